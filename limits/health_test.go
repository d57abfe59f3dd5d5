package limits_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// events collects the health events of s, taken through Events.
type events struct {
	mu  sync.Mutex
	s   *limits.Local
	evs []limits.HealthEvent
}

func (e *events) states() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.evs = e.s.Events(e.evs)
	var s []string
	for _, ev := range e.evs {
		s = append(s, ev.State)
	}
	return s
}

func acquire(t *testing.T, s *limits.Local, host string, within time.Duration) *limits.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	l, err := s.Acquire(ctx, limits.Request{Host: host})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return l
}

// TestBenchProbeRestore walks a proxy through benched, probing (one attempt
// at a time), benched again for twice as long, and healthy.
func TestBenchProbeRestore(t *testing.T) {
	ev := &events{}
	const cool = 150 * time.Millisecond
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 2}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
		Health:   limits.Health{MaxFailures: 2, Cooldown: cool, MaxCooldown: time.Second},
	})
	ev.s = s
	defer s.Close()
	// Two faults on proxy 0 bench it.
	for range 2 {
		l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1", Avoid: []int{1}})
		if err != nil || l.Proxy != 0 {
			t.Fatalf("got %v %v, want proxy 0", l, err)
		}
		l.Finish(limits.ProxyFault)
	}
	benchedAt := time.Now()
	if got := ev.states(); len(got) != 1 || got[0] != "benched" {
		t.Fatalf("events %v, want [benched]", got)
	}
	// While benched, everything goes to proxy 1.
	for range 5 {
		l := acquire(t, s, "h:1", time.Second)
		if l.Proxy != 0 && time.Since(benchedAt) < cool {
			l.Release()
			continue
		}
		if l.Proxy == 0 && time.Since(benchedAt) < cool {
			t.Fatalf("benched proxy used %s into a %s cooldown", time.Since(benchedAt), cool)
		}
		l.Release()
	}
	// Hold proxy 1 so the next lease must be the probe on proxy 0.
	hold := acquire(t, s, "h:1", time.Second)
	if hold.Proxy != 1 {
		t.Fatalf("got proxy %d, want 1", hold.Proxy)
	}
	probe := acquire(t, s, "h:1", 2*cool+time.Second)
	if probe.Proxy != 0 || time.Since(benchedAt) < cool {
		t.Fatalf("probe on proxy %d after %s", probe.Proxy, time.Since(benchedAt))
	}
	// One probe at a time: with proxy 1 full and the probe out, a third
	// request waits although proxy 0's budget has room.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if l, err := s.Acquire(ctx, limits.Request{Host: "h:1"}); err == nil {
		t.Fatalf("second lease on a probing proxy: %d", l.Proxy)
	}
	cancel()
	probe.Finish(limits.ProxyFault) // relapse: benched for 2x
	probe2 := acquire(t, s, "h:1", 4*cool+time.Second)
	if probe2.Proxy != 0 {
		t.Fatalf("got %d, want the probe on 0", probe2.Proxy)
	}
	probe2.Finish(limits.Success)
	// Healthy: proxy 0 takes its full budget of 2 again.
	a := acquire(t, s, "h:1", time.Second)
	b := acquire(t, s, "h:1", time.Second)
	if a.Proxy != 0 || b.Proxy != 0 {
		t.Errorf("after recovery got proxies %d,%d, want 0,0", a.Proxy, b.Proxy)
	}
	a.Release()
	b.Release()
	hold.Release()
	want := []string{"benched", "probing", "benched", "probing", "healthy"}
	got := ev.states()
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
	ev.mu.Lock()
	first, second := ev.evs[0].Cooldown, ev.evs[2].Cooldown
	ev.mu.Unlock()
	if first != cool || second != 2*cool {
		t.Errorf("cooldowns %s then %s, want %s then %s", first, second, cool, 2*cool)
	}
}

// TestAllBenchedWait: when every proxy is benched, an attempt waits for the
// first to come back instead of failing.
func TestAllBenchedWait(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}},
		BudgetOf: []int{0},
		Health:   limits.Health{MaxFailures: 1, Cooldown: 100 * time.Millisecond},
	})
	defer s.Close()
	acquire(t, s, "h:1", time.Second).Finish(limits.ProxyFault)
	start := time.Now()
	l := acquire(t, s, "h:1", 2*time.Second)
	if el := time.Since(start); el < 90*time.Millisecond {
		t.Errorf("granted after %s, inside the 100ms cooldown", el)
	}
	l.Release()
}

// TestLeastUsedRestoredNotFlooded: a proxy back from the bench starts level
// with the least used of the others, so least-used does not pour every
// request into it to "catch up".
func TestLeastUsedRestoredNotFlooded(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{}, {}},
		BudgetOf: []int{0, 1},
		Policy:   limits.LeastUsed,
		Health:   limits.Health{MaxFailures: 1, Cooldown: 30 * time.Millisecond},
	})
	defer s.Close()
	first := acquire(t, s, "h:1", time.Second)
	other := 1 - first.Proxy
	first.Finish(limits.ProxyFault)
	for range 50 {
		l := acquire(t, s, "h:1", time.Second)
		if l.Proxy != other {
			t.Fatalf("benched proxy used")
		}
		l.Finish(limits.Success)
	}
	time.Sleep(40 * time.Millisecond)
	// The probe goes to the restored proxy (least used); it succeeds.
	var counts [2]int
	for range 20 {
		l := acquire(t, s, "h:1", time.Second)
		counts[l.Proxy]++
		l.Finish(limits.Success)
	}
	if counts[first.Proxy] > 12 {
		t.Errorf("restored proxy took %d of the next 20 attempts: flooded", counts[first.Proxy])
	}
}

// TestPushbackSlowsThePair walks a proxy-host pair down its window (half
// the proxy's load, then halving), into spacing, and back: other hosts are
// never held up.
func TestPushbackSlowsThePair(t *testing.T) {
	const base = 100 * time.Millisecond
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Throttle: limits.Throttle{Base: base, Max: time.Second},
	})
	defer s.Close()
	blocked := func(host string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer cancel()
		l, err := s.Acquire(ctx, limits.Request{Host: host})
		if err != nil {
			return true
		}
		l.Release()
		return false
	}
	hold := func(n int) []*limits.Lease {
		var ls []*limits.Lease
		for range n {
			ls = append(ls, acquire(t, s, "slow:1", time.Second))
		}
		return ls
	}
	finish := func(ls []*limits.Lease, o limits.Outcome) {
		for _, l := range ls {
			l.Finish(o)
		}
	}
	// 8 in flight; one 503: the pair may have 4 in flight from now on.
	ls := hold(8)
	ls[0].Finish(limits.Pushback)
	finish(ls[1:], limits.Success) // begun before the pushback: no news
	ls = hold(4)
	if !blocked("slow:1") {
		t.Fatal("a 5th attempt started in a window of 4")
	}
	if blocked("other:1") {
		t.Fatal("another host was held up by the pushed-back pair")
	}
	ls[0].Finish(limits.Pushback) // window 2
	finish(ls[1:], limits.Success)
	ls = hold(2)
	if !blocked("slow:1") {
		t.Fatal("a 3rd attempt started in a window of 2")
	}
	ls[0].Finish(limits.Pushback) // window 1
	ls[1].Release()
	l := acquire(t, s, "slow:1", time.Second)
	l.Finish(limits.Pushback) // spacing base
	start := time.Now()
	l = acquire(t, s, "slow:1", time.Second)
	if el := time.Since(start); el < base-5*time.Millisecond {
		t.Errorf("with the window at 1, a pushback spaced starts by %s, want %s", el, base)
	}
	l.Finish(limits.Pushback) // spacing 2·base
	start = time.Now()
	l = acquire(t, s, "slow:1", 2*time.Second)
	if el := time.Since(start); el < 2*base-5*time.Millisecond {
		t.Errorf("after another pushback waited %s, want %s", el, 2*base)
	}
	// Successes undo it step by step: the spacing, then the window, until
	// the pair is forgotten and 8 run at once again.
	l.Finish(limits.Success)
	for range 20 {
		acquire(t, s, "slow:1", 2*time.Second).Finish(limits.Success)
	}
	if _, pairs := s.Tracked(); pairs != 0 {
		t.Errorf("%d pairs still slowed after 21 successes", pairs)
	}
	finish(hold(8), limits.Success)
}

// TestStaleOutcomesAreOldNews: attempts in flight when a proxy is benched
// or a pair pushed back do not, finishing later, bench it again, double the
// pushback or undo it.
func TestStaleOutcomesAreOldNews(t *testing.T) {
	ev := &events{}
	const base = 200 * time.Millisecond
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Health:   limits.Health{MaxFailures: 1, Cooldown: time.Minute, MaxCooldown: time.Hour},
		Throttle: limits.Throttle{Base: base, Max: time.Minute},
	})
	ev.s = s
	defer s.Close()
	var ls []*limits.Lease
	for range 8 {
		ls = append(ls, acquire(t, s, "h:1", time.Second))
	}
	for _, l := range ls {
		l.Finish(limits.ProxyFault)
	}
	if got := ev.states(); len(got) != 1 {
		t.Fatalf("8 attempts failing together gave events %v, want one bench", got)
	}
	if d := ev.evs[0].Cooldown; d != time.Minute {
		t.Errorf("cooldown %s, want the first %s", d, time.Minute)
	}

	s2 := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Throttle: limits.Throttle{Base: base, Max: time.Minute},
	})
	defer s2.Close()
	ls = ls[:0]
	for range 6 {
		ls = append(ls, acquire(t, s2, "h:1", time.Second))
	}
	// Three 503s from attempts that were all in flight together: one
	// pushback, a window of 3.
	for _, l := range ls[:3] {
		l.Finish(limits.Pushback)
	}
	// Three successes of attempts started before it: they do not undo it.
	for _, l := range ls[3:] {
		l.Finish(limits.Success)
	}
	ls = ls[:0]
	for range 3 {
		ls = append(ls, acquire(t, s2, "h:1", time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if l, err := s2.Acquire(ctx, limits.Request{Host: "h:1"}); err == nil {
		l.Release()
		t.Errorf("a 4th attempt started: the window is not 3 (stale pushbacks or successes counted)")
	}
	for _, l := range ls {
		l.Release()
	}
}

// TestStateDoesNotGrowWithHosts: host and pair state for hosts seen once is
// forgotten once it says nothing any more.
func TestStateDoesNotGrowWithHosts(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{}},
		BudgetOf: []int{0},
		Host:     limits.Spec{Rate: limits.Rate{N: 1000, Per: time.Second}, Burst: 1},
		Throttle: limits.Throttle{Base: time.Millisecond, Max: 5 * time.Millisecond},
	})
	defer s.Close()
	for i := range 10000 {
		l := acquire(t, s, fmt.Sprintf("h%d:80", i), time.Second)
		if i%2 == 0 {
			l.Finish(limits.Pushback)
		} else {
			l.Release()
		}
	}
	time.Sleep(20 * time.Millisecond) // buckets refill, pushbacks age
	for i := range 5000 {
		acquire(t, s, fmt.Sprintf("again%d:80", i%50), time.Second).Release()
	}
	hosts, pairs := s.Tracked()
	if hosts > 100 || pairs > 100 {
		t.Errorf("after 10000 one-off hosts the scheduler keeps %d hosts and %d pairs", hosts, pairs)
	}
}
