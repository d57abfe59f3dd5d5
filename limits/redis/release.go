package redis

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// releases sends a process's releases to Redis by group commit: a call of
// the release script carries every release that came while the call
// before it was on its way, up to releaseMax. Each release still returns
// once its own call has returned, and one alone is sent at once, as
// before; but under load a call gives back several leases, and Redis runs
// the script's preamble (the header, the functions of common.lua), its
// command and its network round once for them, where that was about a
// third of a release's cost.
type releases struct {
	mu    sync.Mutex
	busy  bool            // a call is on its way
	queue []*releaseBatch // the calls that wait for it, in order
}

// releaseBatch is the releases of one call.
type releaseBatch struct {
	items []releaseItem
	done  chan struct{} // closed once the call has returned and its replies are taken in
	turn  chan struct{} // closed when the call before has returned: the batch's first release sends it
	// orphaned (set before done and turn are closed): the call before
	// failed, so this one was not made; its leases are orphans.
	orphaned bool
}

// releaseItem is a lease to give back: its id, its proxy's and budget's
// names and its host ("" when not known: the script then reads them), its
// outcome and its Retry-After (0 none).
type releaseItem struct {
	id, proxy, budget, host string
	o                       limits.Outcome
	ra                      time.Duration
}

// releaseMax is the most releases one call carries.
const releaseMax = 64

// send gives it to Redis in a call of the release script, and returns once
// that call has returned.
func (r *releases) send(s *Scheduler, it releaseItem) {
	r.mu.Lock()
	if n := len(r.queue); n > 0 && len(r.queue[n-1].items) < releaseMax {
		b := r.queue[n-1] // not yet sent: ride along
		b.items = append(b.items, it)
		r.mu.Unlock()
		<-b.done
		return
	}
	b := &releaseBatch{items: []releaseItem{it}, done: make(chan struct{})}
	if r.busy {
		b.turn = make(chan struct{})
		r.queue = append(r.queue, b)
		r.mu.Unlock()
		<-b.turn // taken off the queue: nothing rides along any more
		if b.orphaned {
			return
		}
	} else {
		r.busy = true
		r.mu.Unlock()
	}
	err := s.callRelease(b.items)
	close(b.done)
	r.mu.Lock()
	if err != nil {
		// Redis is failing: the releases waiting are not sent one call
		// after another, each its own timeout, while their leases go
		// unrenewed, but are orphans at once, released in the background
		// when Redis answers again (a release waits for at most the call
		// in flight, as it did alone).
		failed := r.queue
		r.queue, r.busy = nil, false
		r.mu.Unlock()
		for _, q := range failed {
			for _, it := range q.items {
				s.orphan(it)
			}
			q.orphaned = true
			close(q.done)
			close(q.turn)
		}
		return
	}
	if len(r.queue) == 0 {
		r.busy = false
		r.mu.Unlock()
		return
	}
	next := r.queue[0]
	r.queue = append(r.queue[:0], r.queue[1:]...)
	r.mu.Unlock()
	close(next.turn)
}

// callRelease runs the release script for items: each lease's counts are
// given back, and a health change it brings is noted. A lease of a call
// that failed is an orphan, released again in the background (with its
// outcome, from when it first became one); the error is the call's.
func (s *Scheduler) callRelease(items []releaseItem) error {
	args := make([]any, 0, 6*len(items))
	for _, it := range items {
		args = append(args, it.id, strconv.Itoa(int(it.o)), strconv.FormatInt(it.ra.Microseconds(), 10))
		if it.proxy != "" && it.budget != "" && it.host != "" {
			args = append(args, it.proxy, it.budget, it.host)
		} else {
			args = append(args, "", "", "")
		}
	}
	ctx := s.base
	if ctx == nil {
		ctx = context.Background()
	}
	v, err := s.run(context.WithoutCancel(ctx), s.scripts.release, args...)
	if err != nil {
		for _, it := range items {
			s.orphan(it)
		}
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range items {
		if r := decodeRelease(v, i); r.state != "" && it.proxy != "" {
			s.event(s.plan.proxies[it.proxy], r.state, r.cooldown)
		}
	}
	return nil
}
