package procs

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/internal/clock/clocktest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNext: the count after each interval, from the cores the intervals
// kept busy.
func TestNext(t *testing.T) {
	for _, tc := range []struct {
		name string
		most int
		busy []float64
		want []int // the count after each interval
	}{
		{"2 Ps, 0.7 cores: one, after two intervals", 2, []float64{0.7, 0.7, 0.6}, []int{2, 1, 1}},
		{"2 Ps, once under: no change", 2, []float64{0.7, 1.1, 0.7, 1.1}, []int{2, 2, 2, 2}},
		{"2 Ps, busy: kept", 2, []float64{1.1, 0.85, 1.8, 0.95}, []int{2, 2, 2, 2}},
		{"one P busy: doubled at once", 2, []float64{0.5, 0.5, 0.95}, []int{2, 1, 2}},
		{"never above the most", 4, []float64{0.1, 0.1, 0.95, 1.9, 3.9}, []int{4, 1, 2, 4, 4}},
		{"8 Ps, 2.1 cores: three", 8, []float64{2.1, 2.1}, []int{8, 3}},
		{"the larger of the two wants", 8, []float64{3.1, 1.1}, []int{8, 4}},
		{"idle: one", 8, []float64{0, 0}, []int{8, 1}},
		// A raise holds the count for 4 intervals, then 8: the process
		// near the line flaps less and less.
		{"held after a raise", 2,
			[]float64{0.5, 0.5, 0.95, 0.5, 0.5, 0.5, 0.5, 0.5, 0.95, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5},
			[]int{2, 1, 2, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1}},
	} {
		st := state{n: tc.most, most: tc.most, holdFor: firstHold}
		var got []int
		for _, b := range tc.busy {
			st.next(b)
			got = append(got, st.n)
		}
		if !equal(got, tc.want) {
			t.Errorf("%s: counts %v, want %v", tc.name, got, tc.want)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeProcess is a process whose CPU time grows by busy cores while its
// fake clock moves, and whose counts are recorded.
type fakeProcess struct {
	clk *clocktest.Clock

	mu   sync.Mutex
	busy float64
	cpu  time.Duration
	last time.Time
	sets []int
}

func (p *fakeProcess) CPU() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clk.Now()
	p.cpu += time.Duration(p.busy * float64(now.Sub(p.last)))
	p.last = now
	return p.cpu
}

func (p *fakeProcess) Set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sets = append(p.sets, n)
}

func (p *fakeProcess) run(busy float64, d time.Duration) {
	p.CPU() // the time so far at the old rate
	p.mu.Lock()
	p.busy = busy
	p.mu.Unlock()
	p.clk.Advance(d)
}

// TestSizer: a Sizer looks every interval, sets the count only when it
// changes, and gives it back its maximum on Stop; after Stop it sets
// nothing.
func TestSizer(t *testing.T) {
	clk := clocktest.New(time.Unix(1e9, 0))
	p := &fakeProcess{clk: clk, last: clk.Now()}
	s := Start(Config{Max: 2, Interval: time.Second, Clock: clk, CPU: p.CPU, Set: p.Set})
	p.run(0.6, 2*time.Second) // two intervals at 0.6 cores: one P
	if s.N() != 1 {
		t.Errorf("after 2 s at 0.6 cores of 2: %d Ps, want 1", s.N())
	}
	p.run(0.99, time.Second) // one P busy: two
	if s.N() != 2 {
		t.Errorf("after 1 s at 0.99 cores of 1: %d Ps, want 2", s.N())
	}
	p.run(0.6, 1500*time.Millisecond)
	s.Stop()
	p.run(0.1, 10*time.Second)
	if want := []int{1, 2}; !equal(p.sets, want) {
		t.Errorf("counts set %v, want %v", p.sets, want)
	}
	if s.N() != 2 {
		t.Errorf("after Stop: %d Ps, want the most, 2", s.N())
	}
}

// TestSizerStopGivesBack: a Sizer stopped with fewer Ps than its most
// sets the most.
func TestSizerStopGivesBack(t *testing.T) {
	clk := clocktest.New(time.Unix(1e9, 0))
	p := &fakeProcess{clk: clk, last: clk.Now()}
	s := Start(Config{Max: 4, Interval: time.Second, Clock: clk, CPU: p.CPU, Set: p.Set})
	p.run(0, 2*time.Second)
	s.Stop()
	s.Stop()
	if want := []int{1, 4}; !equal(p.sets, want) {
		t.Errorf("counts set %v, want %v", p.sets, want)
	}
}

// TestSizerNothingToSize: with one P at most, or no CPU time to read, a
// Sizer does nothing.
func TestSizerNothingToSize(t *testing.T) {
	clk := clocktest.New(time.Unix(1e9, 0))
	p := &fakeProcess{clk: clk, last: clk.Now()}
	for _, cfg := range []Config{
		{Max: 1, Clock: clk, CPU: p.CPU, Set: p.Set},
		{Max: 4, Clock: clk, Set: p.Set},
	} {
		s := Start(cfg)
		p.run(0, 10*time.Second)
		s.Stop()
		if len(p.sets) != 0 || s.N() != cfg.Max {
			t.Errorf("max %d, CPU read %v: counts set %v, %d in force; want none set, %d", cfg.Max, cfg.CPU != nil, p.sets, s.N(), cfg.Max)
		}
	}
}

// TestStartProcess: on the real clock, with this process's CPU time and
// GOMAXPROCS, a test process that is idle is given one P within 2
// intervals and a look (tolerance: 5 s), and Stop gives back the count it
// had.
func TestStartProcess(t *testing.T) {
	was := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(was)
	s := StartProcess()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.GOMAXPROCS(0) != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.GOMAXPROCS(0); n != 1 || s.N() != 1 {
		t.Errorf("idle for up to 5 s: GOMAXPROCS %d, sizer %d; want 1", n, s.N())
	}
	s.Stop()
	if n := runtime.GOMAXPROCS(0); n != 2 {
		t.Errorf("after Stop: GOMAXPROCS %d, want 2", n)
	}
}
