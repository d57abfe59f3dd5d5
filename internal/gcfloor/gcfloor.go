// Package gcfloor keeps the Go garbage collector from running more often
// than every Floor bytes of allocation while the live heap is small.
//
// With GOGC=100 a collection starts when the heap has grown by as much as
// was live after the last one. A bulk fetcher keeps a few megabytes live
// and allocates a few kilobytes per URL, so it collects every few hundred
// URLs, and the fixed cost of each cycle (finding the roots, the stacks of
// every worker) becomes a large part of its CPU time. Floor raises the
// growth allowed before a collection to at least Floor bytes; a heap whose
// live part is larger than Floor is collected as GOGC says. Memory goes up
// by at most Floor, CPU time spent collecting down by as much as
// Floor/live.
//
// This is the effect of a heap ballast without the ballast: after each
// collection the GOGC percentage is set so that the next one starts at
// live+Floor (see percent), or at base when that is more, where base is
// the percentage in force when the floor was put in place.
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// heapMinimum is the runtime's smallest heap goal at GOGC=100; it scales
// with the percentage (the GC guide's "minimum total heap size"). Below it
// the floor is reached with a smaller percentage than 100·Floor/live.
const heapMinimum = 4 << 20

// Floor is a floor put in place by Start.
type Floor struct {
	floor uint64
	base  int

	mu      sync.Mutex
	kept    uint64 // bytes of the live heap that stay live all run long (see KeepLive)
	stopped bool
	paused  bool // between Pause and its resume: collection is off
	percent int
	sample  []metrics.Sample
}

// sentinel is garbage made to be found at the next collection: its
// finalizer runs once per cycle. It is big enough, and holds a pointer, so
// that it never shares a tiny-allocator block with live data.
type sentinel struct {
	p *Floor
	_ [16]byte
}

// Start puts a floor of floor bytes in place until Stop. A base percentage
// of 0 or less (GOGC=off) is left alone: Start does nothing then.
func Start(floor uint64) *Floor {
	f := &Floor{floor: floor, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	f.base = int(gogc[0].Value.Uint64()) // 0 for GOGC=off
	f.percent = f.base
	if f.base <= 0 || floor == 0 {
		f.stopped = true
		return f
	}
	f.tune()
	f.arm()
	return f
}

// Stop lifts the floor: the percentage goes back to the base.
func (f *Floor) Stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return
	}
	f.stopped = true
	f.paused = false
	debug.SetGCPercent(f.base)
}

// Pause turns collection off until resume is called, for a phase that
// builds what lives as long as the process: every collection while such a
// heap grows marks again what the one before found live (reading a list of
// 100,000 proxies and building their state went through four, a third of
// that start's CPU time), and the phase's garbage is no more than what it
// keeps. Memory during the phase goes up by its garbage; its callers keep
// it bounded by what they read. resume puts the percentage in force back
// (later calls do nothing); the next collection, which comes soon since
// the heap has grown past its goal, sets it for the new live heap. A nil
// or stopped Floor (GOGC=off, or a GOGC or GOMEMLIMIT of the user's left
// alone) does not pause.
func (f *Floor) Pause() (resume func()) {
	if f == nil {
		return func() {}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || f.paused {
		return func() {}
	}
	f.paused = true
	debug.SetGCPercent(-1)
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.paused = false
			if !f.stopped {
				debug.SetGCPercent(f.percent)
			}
		})
	}
}

// KeepLive says that what the last collection found live stays live for
// the rest of the run (the state of a large proxy pool, built at its
// start, collected just before): those bytes are never garbage, so they
// count for half in the heap's goal. The goal becomes the live heap plus
// the floor, or plus the base percentage of the rest of the live heap and
// of half the kept bytes, whichever is more. With 100,000 identities
// (41 MB kept) a run's heap went on to twice that before each collection:
// 40 MB that the kernel mapped page by page for garbage, and that the run
// held (peak RSS 113 MB; 91 MB with KeepLive and fetch.New's collection
// of the list). A collection then comes about twice as often, and marks
// the kept bytes again. Later calls replace the kept bytes; a nil or
// stopped Floor does nothing.
func (f *Floor) KeepLive() {
	if f == nil {
		return
	}
	f.mu.Lock()
	metrics.Read(f.sample)
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		f.kept = f.sample[0].Value.Uint64()
	}
	f.mu.Unlock()
	f.tune()
}

// Percent is the GOGC percentage in force: -1 during a pause.
func (f *Floor) Percent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paused {
		return -1
	}
	return f.percent
}

func (f *Floor) arm() {
	runtime.SetFinalizer(&sentinel{p: f}, func(*sentinel) { f.collected() })
}

// collected runs after each collection: it sets the percentage for the
// live heap that collection found, and waits for the next.
func (f *Floor) collected() {
	if f.tune() {
		f.arm()
	}
}

// tune sets the percentage for the live heap, and reports whether the
// floor is still in place.
func (f *Floor) tune() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return false
	}
	if f.paused { // a collection forced during a pause: the percentage waits for resume
		return true
	}
	metrics.Read(f.sample)
	live := uint64(0)
	if f.sample[0].Value.Kind() == metrics.KindUint64 {
		live = f.sample[0].Value.Uint64()
	}
	p := max(percent(live, f.floor), f.base)
	if f.kept > 0 && live > 0 {
		kept := min(live, f.kept)
		p = max(percent(live, f.floor), int((live-kept+kept/2)*uint64(f.base)/live))
	}
	// Setting the percentage has a cost of its own: leave small changes.
	if p != f.percent && (p < f.percent*9/10 || p > f.percent*11/10 || p == f.base) {
		debug.SetGCPercent(p)
		f.percent = p
	}
	return true
}

// percent is the percentage whose heap goal for live bytes live is
// live+floor: 100·floor/live, or, while the runtime's minimum goal at that
// percentage would be larger, the percentage that makes the minimum
// live+floor.
func percent(live, floor uint64) int {
	byMinimum := (live + floor) * 100 / heapMinimum
	if live == 0 {
		return int(byMinimum)
	}
	return int(min(floor*100/live, byMinimum))
}
