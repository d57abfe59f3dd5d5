package fetch

import (
	"sync"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// Observer is told what a run does as it happens, for live metrics
// (package fetch/metrics implements it for Prometheus). The engine calls
// it where it counts the same things for the report, from its own
// goroutines and concurrently: its methods must be safe for concurrent
// use, quick, and must not block, for they run on the path of every
// attempt. Set none (Config.Observer nil) and the engine does nothing
// more than a nil check.
type Observer interface {
	// Attempt is called once for each attempt that held a lease (the
	// attempts records and the report count), when it is over.
	Attempt(a AttemptEvent)
	// Record is called once for each record, just before it is written.
	// r is the engine's: it must not be kept or changed.
	Record(r *results.Record)
	// Health is called for each change of a proxy's state, in the order
	// the changes happened.
	Health(ev limits.HealthEvent)
}

// AttemptEvent is what an Observer is told of a finished attempt. It is
// passed by value, so that telling costs no allocation.
type AttemptEvent struct {
	Proxy   int            // the proxy's index in Config.Proxies; 0 when requests go direct
	Outcome limits.Outcome // what the attempt says of its proxy, as the scheduler was told
	OK      bool
	Kind    string // its error's kind and phase; "" when it had no error
	Phase   string
	Phases  results.PhaseTimes // the time it spent in each phase
}

// observe tells o of the attempt res on rt.
func observe(o Observer, rt *route, res *result) {
	ev := AttemptEvent{Proxy: int(rt.index), Outcome: outcome(rt, *res), OK: res.ok, Phases: res.phases}
	if res.err != nil {
		ev.Kind, ev.Phase = res.err.Kind, res.err.Phase
	}
	o.Attempt(ev)
}

// workerSet is the trackers of the workers of the running Run, for
// Engine.Waiting: it is kept per worker, not per attempt, so that counting
// the attempts waiting for their turn costs an attempt nothing.
type workerSet struct {
	mu       sync.Mutex
	trackers map[*tracker]struct{}
}

// add keeps t until the returned func is called.
func (w *workerSet) add(t *tracker) (remove func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.trackers == nil {
		w.trackers = map[*tracker]struct{}{}
	}
	w.trackers[t] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.trackers, t)
	}
}

// Waiting returns how many attempts of the running Run are waiting for
// their turn (phase queue): for a permit or a rate token of a proxy or
// pool, of a host, or of the whole run. A URL waiting out the back-off
// before a retry is in flight but not waiting. It is safe to call while
// Run runs; it looks at every worker, so it is for a scrape or a progress
// line, not for every attempt.
func (e *Engine) Waiting() int {
	w := &e.workers
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for t := range w.trackers {
		if t.waiting() {
			n++
		}
	}
	return n
}

// waiting reports whether t's attempt is waiting for its lease.
func (t *tracker) waiting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.done && t.phase == results.IndexQueue
}
