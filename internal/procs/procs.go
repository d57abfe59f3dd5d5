// Package procs keeps GOMAXPROCS near the number of cores the process
// keeps busy, between 1 and what it was at the start.
//
// Why: Go runs goroutines on GOMAXPROCS processors (Ps), one per core by
// default. A fetcher waiting on the network keeps few of them busy, and
// each goroutine the network wakes while a P is idle starts a thread
// spinning for work, which finds little and sleeps again: a thread woken
// and put to sleep for most network events. Through a proxy that closes
// every connection, on the 2-core benchmark machine (the proxy and the
// target on the same cores), fetch with 2 Ps used 0.7 cores and 330 µs of
// CPU per URL; with 1, 0.6 cores and 245 µs, and the proxy's share of the
// cores went further. Where the work needs more than one core (a fast
// target, TLS), one P holds it back: fetching 1 KiB bodies from nginx
// took 8% longer with 1 than with 2. So the count follows what is used.
//
// Every interval, the process's CPU time over that interval (user and
// system, all threads) says how many cores it kept busy. When that is
// close to all its Ps (Raise of them), the count doubles, up to the
// maximum: work waits for a P. When fewer Ps would do, each busy at most
// Lower, for two intervals in a row, the count falls to that many for a
// trial of a second. A count that is lower for the sake of cheaper work
// must make it cheaper: where the work done is counted (see Count), the
// trial's CPU time per piece of work must be at most Keep of what it was
// before, or the count goes back up. (Through squid, which keeps its
// connections, one P did no cheaper work than two, and 5% less of it.)
// After each raise, and each trial that failed, the count is held for
// longer before it may fall again (from 1 s, doubling, up to a minute),
// so a process near the line does not swing.
//
// The CPU time is what the process got, not what it wanted: on cores kept
// busy by other processes, one P gets one core's share.
package procs

import (
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
)

// Thresholds of the share of its Ps that the process keeps busy, and of
// the CPU time per piece of work that a lower count must keep to.
const (
	Raise = 0.9 // at or above: more Ps
	Lower = 0.8 // the most a P may be busy in a smaller count
	Keep  = 0.9 // a lower count's CPU time per piece of work, at most, of the higher's
)

// trialLooks is how many looks a trial of a lower count lasts, and
// trialWork the least work, before it and during it, that its verdict
// needs: with less, the lower count stays.
const (
	trialLooks = 4
	trialWork  = 200
)

// Interval is how often the count is looked at.
const Interval = 250 * time.Millisecond

// Config is what a Sizer works with; tests give their own.
type Config struct {
	Max      int                  // the most Ps, and the count at the start
	Interval time.Duration        // how often to look
	Clock    clock.Clock          // nil: clock.Real
	CPU      func() time.Duration // the process's CPU time so far
	Set      func(n int)          // sets the count (runtime.GOMAXPROCS)
}

// Count has the Sizer judge lower counts also by work(), the work done so
// far (a run's records), until the returned function is called. Count is
// for one run at a time.
func (s *Sizer) Count(work func() int64) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.work, s.done = work, -1
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.work = nil
	}
}

// Sizer sizes the count until Stop.
type Sizer struct {
	cfg Config

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
	state   state
	at      time.Time     // the last look
	cpu     time.Duration // the CPU time then
	work    func() int64  // see Count; nil: none
	done    int64         // work() then, or -1
}

// state is what the count's next change depends on.
type state struct {
	n       int // the count in force
	most    int // the most Ps
	low     int // the lower count the last interval wanted, or 0
	hold    int // intervals before the count may fall
	holdFor int // the hold of the next raise

	trial  int  // looks left in the trial of a lower count, or 0
	from   int  // the count before the trial
	before cost // CPU time and work at that count, the looks before the trial
	during cost // and during the trial
}

// cost is CPU time and the work done with it; work is -1 when it is not
// counted.
type cost struct {
	cpu  time.Duration
	work int64
}

// add is c and d together; the one whose work was not counted is left
// out.
func (c cost) add(d cost) cost {
	switch {
	case d.work < 0:
		return c
	case c.work < 0:
		return d
	}
	return cost{c.cpu + d.cpu, c.work + d.work}
}

// cheaper reports whether during's CPU time per piece of work is at most
// Keep of before's; true when there is too little work to tell.
func cheaper(during, before cost) bool {
	if during.work < trialWork || before.work < trialWork {
		return true
	}
	return float64(during.cpu)*float64(before.work) <= Keep*float64(before.cpu)*float64(during.work)
}

// Holds, in intervals, after a raise: the first, and the most.
const (
	firstHold = 4
	mostHold  = 240
)

// Start starts sizing with cfg. With a Max below 2, or no CPU time to
// read, it does nothing.
func Start(cfg Config) *Sizer {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = Interval
	}
	s := &Sizer{cfg: cfg, state: state{n: cfg.Max, most: cfg.Max, holdFor: firstHold}, done: -1}
	if cfg.Max < 2 || cfg.CPU == nil || cfg.Set == nil {
		s.stopped = true
		return s
	}
	s.mu.Lock() // look may run before AfterFunc returns
	defer s.mu.Unlock()
	s.at, s.cpu = cfg.Clock.Now(), cfg.CPU()
	s.timer = cfg.Clock.AfterFunc(cfg.Interval, s.look)
	return s
}

// StartProcess starts sizing this process's GOMAXPROCS, from its count
// now. Where the process's CPU time is not read, it does nothing.
func StartProcess() *Sizer {
	cfg := Config{Max: runtime.GOMAXPROCS(0), Set: func(n int) { runtime.GOMAXPROCS(n) }}
	if canReadCPU {
		cfg.CPU = processCPU
	}
	return Start(cfg)
}

// Stop ends the sizing and gives the count back its maximum.
func (s *Sizer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.timer.Stop()
	if s.state.n != s.cfg.Max {
		s.state.n = s.cfg.Max
		s.cfg.Set(s.state.n)
	}
}

// N is the count in force.
func (s *Sizer) N() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.n
}

func (s *Sizer) look() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	now, cpu := s.cfg.Clock.Now(), s.cfg.CPU()
	done := int64(-1)
	if s.work != nil {
		done = s.work()
	}
	if wall := now.Sub(s.at); wall > 0 {
		c := cost{cpu: cpu - s.cpu, work: -1}
		if done >= 0 && s.done >= 0 {
			c.work = done - s.done
		}
		was := s.state.n
		s.state.next(float64(c.cpu)/float64(wall), c)
		if s.state.n != was {
			s.cfg.Set(s.state.n)
		}
	}
	s.done = done
	s.at, s.cpu = now, cpu
	s.timer = s.cfg.Clock.AfterFunc(s.cfg.Interval, s.look)
}

// next moves st on by a look at an interval in which the process kept
// busy cores busy, spending c.
func (st *state) next(busy float64, c cost) {
	held := st.hold > 0
	if held {
		st.hold--
	}
	if busy >= Raise*float64(st.n) {
		if st.n < st.most {
			st.n = min(2*st.n, st.most)
			st.raised()
		}
		st.low, st.trial = 0, 0
		return
	}
	if st.trial > 0 {
		st.during = st.during.add(c)
		if st.trial--; st.trial == 0 && !cheaper(st.during, st.before) {
			st.n = st.from // no cheaper: back
			st.raised()
		}
		return
	}
	want := max(1, int(math.Ceil(busy/Lower)))
	switch {
	case want >= st.n:
		st.low = 0
	case st.low == 0 || held:
		st.low, st.before = want, c // it counts if the next look wants it too
	default:
		st.from, st.n, st.low = st.n, max(want, st.low), 0
		st.before, st.during, st.trial = st.before.add(c), cost{}, trialLooks
	}
}

// raised holds the count after a raise, each time for longer.
func (st *state) raised() {
	st.hold, st.holdFor = st.holdFor, min(2*st.holdFor, mostHold)
}
