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
// Lower, for two intervals in a row, the count falls to that many. A
// process with fewer Ps uses less CPU time, not more, so a count raised
// because its Ps were busy stays; for a process near the line all the
// same, each raise holds the count for longer before it may fall again
// (from 1 s, doubling, up to a minute).
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

// Thresholds of the share of its Ps that the process keeps busy.
const (
	Raise = 0.9 // at or above: more Ps
	Lower = 0.8 // the most a P may be busy in a smaller count
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

// Sizer sizes the count until Stop.
type Sizer struct {
	cfg Config

	mu      sync.Mutex
	stopped bool
	timer   clock.Timer
	state   state
	at      time.Time     // the last look
	cpu     time.Duration // the CPU time then
}

// state is what the count's next change depends on.
type state struct {
	n       int // the count in force
	most    int // the most Ps
	low     int // the lower count the last interval wanted, or 0
	hold    int // intervals before the count may fall
	holdFor int // the hold of the next raise
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
	s := &Sizer{cfg: cfg, state: state{n: cfg.Max, most: cfg.Max, holdFor: firstHold}}
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
	if wall := now.Sub(s.at); wall > 0 {
		was := s.state.n
		s.state.next(float64(cpu-s.cpu) / float64(wall))
		if s.state.n != was {
			s.cfg.Set(s.state.n)
		}
	}
	s.at, s.cpu = now, cpu
	s.timer = s.cfg.Clock.AfterFunc(s.cfg.Interval, s.look)
}

// next moves st on by an interval in which the process kept busy cores
// busy.
func (st *state) next(busy float64) {
	held := st.hold > 0
	if held {
		st.hold--
	}
	if busy >= Raise*float64(st.n) {
		if st.n < st.most {
			st.n = min(2*st.n, st.most)
			st.hold, st.holdFor = st.holdFor, min(2*st.holdFor, mostHold)
		}
		st.low = 0
		return
	}
	want := max(1, int(math.Ceil(busy/Lower)))
	switch {
	case want >= st.n:
		st.low = 0
	case st.low == 0 || held:
		st.low = want // it counts if the next interval wants it too
	default:
		st.n, st.low = max(want, st.low), 0
	}
}
