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

// look is an interval: the cores kept busy, and the CPU time per record
// (µs) over 1,000 records; perRecord 0: records not counted.
type look struct {
	busy      float64
	perRecord float64
}

func (l look) cost() cost {
	if l.perRecord == 0 {
		return cost{cpu: time.Duration(l.busy * float64(Interval)), work: -1}
	}
	return cost{cpu: time.Duration(l.perRecord * 1000 * float64(time.Microsecond)), work: 1000}
}

// looks is n looks like l.
func looks(n int, l look) []look {
	ls := make([]look, n)
	for i := range ls {
		ls[i] = l
	}
	return ls
}

func cat(lss ...[]look) []look {
	var all []look
	for _, ls := range lss {
		all = append(all, ls...)
	}
	return all
}

// TestNext: the count after each look, from the cores the intervals kept
// busy and what a record cost.
func TestNext(t *testing.T) {
	idle := look{busy: 0.5}
	for _, tc := range []struct {
		name  string
		most  int
		looks []look
		want  []int // the count after each look
	}{
		{"2 Ps, 0.7 cores: one, after two looks", 2, []look{{0.7, 0}, {0.7, 0}, {0.6, 0}}, []int{2, 1, 1}},
		{"2 Ps, once under: no change", 2, []look{{0.7, 0}, {1.1, 0}, {0.7, 0}, {1.1, 0}}, []int{2, 2, 2, 2}},
		{"2 Ps, busy: kept", 2, []look{{1.1, 0}, {0.85, 0}, {1.8, 0}, {0.95, 0}}, []int{2, 2, 2, 2}},
		{"one P busy: doubled at once", 2, []look{idle, idle, {0.95, 0}}, []int{2, 1, 2}},
		{"never above the most", 4, cat(looks(6, look{0.1, 0}), []look{{0.95, 0}, {1.9, 0}, {3.9, 0}}), []int{4, 1, 1, 1, 1, 1, 2, 4, 4}},
		{"8 Ps, 2.1 cores: three", 8, []look{{2.1, 0}, {2.1, 0}}, []int{8, 3}},
		{"the larger of the two wants", 8, []look{{3.1, 0}, {1.1, 0}}, []int{8, 4}},
		{"idle: one", 8, []look{{0, 0}, {0, 0}}, []int{8, 1}},
		// A raise holds the count for 4 looks, then 8: the process near
		// the line flaps less and less.
		{"held after a raise", 2,
			cat(looks(2, idle), []look{{0.95, 0}}, looks(5, idle), []look{{0.95, 0}}, looks(9, idle)),
			[]int{2, 1, 2, 2, 2, 2, 2, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1}},
		// Records counted: the trial's looks must be cheaper per record
		// by a tenth, or the count goes back up, and is held.
		{"cheaper with one: kept", 2, cat(looks(2, look{0.7, 330}), looks(6, look{0.6, 250})), []int{2, 1, 1, 1, 1, 1, 1, 1}},
		{"no cheaper: back, held", 2, cat(looks(2, look{0.6, 60}), looks(4, look{0.55, 62}), looks(5, look{0.6, 60}), looks(4, look{0.55, 62})),
			[]int{2, 1, 1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 2}},
		{"a tenth cheaper is enough", 2, cat(looks(2, look{0.6, 100}), looks(5, look{0.55, 90})), []int{2, 1, 1, 1, 1, 1, 1}},
		{"saturated in the trial: back at once", 2, cat(looks(2, look{0.6, 100}), []look{{0.95, 50}}), []int{2, 1, 2}},
	} {
		st := state{n: tc.most, most: tc.most, holdFor: firstHold}
		var got []int
		for _, l := range tc.looks {
			st.next(l.busy, l.cost())
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

	mu        sync.Mutex
	busy      float64
	perRecord time.Duration // CPU time a record takes; 0: none done
	cpu       time.Duration
	records   float64
	last      time.Time
	sets      []int
}

func (p *fakeProcess) CPU() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.catchUp()
	return p.cpu
}

func (p *fakeProcess) Records() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.catchUp()
	return int64(p.records)
}

func (p *fakeProcess) catchUp() {
	now := p.clk.Now()
	spent := time.Duration(p.busy * float64(now.Sub(p.last)))
	p.cpu += spent
	if p.perRecord > 0 {
		p.records += float64(spent) / float64(p.perRecord)
	}
	p.last = now
}

func (p *fakeProcess) Set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sets = append(p.sets, n)
}

func (p *fakeProcess) run(busy float64, d time.Duration) {
	p.runCosting(busy, 0, d)
}

// runCosting runs d at busy cores, a record taking perRecord of CPU time.
func (p *fakeProcess) runCosting(busy float64, perRecord, d time.Duration) {
	p.mu.Lock()
	p.catchUp() // the time so far at the old rates
	p.busy, p.perRecord = busy, perRecord
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

// TestSizerCount: with the records counted, a lower count whose records
// cost no less goes back up after its trial, and one whose records cost
// less stays; once the count's stop function is called, lower counts are
// judged by the cores kept busy alone again.
func TestSizerCount(t *testing.T) {
	clk := clocktest.New(time.Unix(1e9, 0))
	p := &fakeProcess{clk: clk, last: clk.Now()}
	s := Start(Config{Max: 2, Interval: time.Second, Clock: clk, CPU: p.CPU, Set: p.Set})
	defer s.Stop()
	stop := s.Count(p.Records)
	p.runCosting(0.6, 60*time.Microsecond, 2*time.Second) // two looks: a trial of one
	p.runCosting(0.55, 62*time.Microsecond, 4*time.Second)
	if s.N() != 2 {
		t.Errorf("after a trial of one P whose records cost as much: %d Ps, want 2", s.N())
	}
	p.runCosting(0.6, 330*time.Microsecond, 6*time.Second) // held 4 looks, then two: a trial
	p.runCosting(0.6, 250*time.Microsecond, 4*time.Second)
	if s.N() != 1 {
		t.Errorf("after a trial of one P whose records cost a quarter less: %d Ps, want 1", s.N())
	}
	p.runCosting(0.95, 60*time.Microsecond, time.Second) // one P busy
	stop()
	p.runCosting(0.6, 60*time.Microsecond, 12*time.Second) // held 8, two looks, a trial
	if want := []int{1, 2, 1, 2, 1}; !equal(p.sets, want) || s.N() != 1 {
		t.Errorf("counts set %v, %d in force; want %v, 1 (records no longer counted)", p.sets, s.N(), want)
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
