package limits_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCapsHoldUnderLoad hammers a scheduler from many goroutines with random
// hold times and checks that no budget, pool or host ever exceeds its
// concurrency, and that every permit comes back.
func TestCapsHoldUnderLoad(t *testing.T) {
	for _, pol := range []limits.Policy{limits.LeastInFlight, limits.LeastUsed, limits.RoundRobin, limits.Random} {
		t.Run(pol.String(), func(t *testing.T) {
			// proxies 0,1 alone (caps 1, 3); proxies 2,3,4 share a pool of 2.
			caps := []int{1, 3, 2}
			s := limits.NewLocal(limits.Config{
				Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 3}, {Concurrency: 2}},
				BudgetOf: []int{0, 1, 2, 2, 2},
				Host:     limits.Spec{Concurrency: 4},
				Policy:   pol,
			})
			defer s.Close()
			var budgetIn [3]atomic.Int32
			var hostIn [2]atomic.Int32
			var maxBudget [3]atomic.Int32
			var used [5]atomic.Int32
			var wg sync.WaitGroup
			var errs atomic.Int32
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(g), 1))
					for range 40 {
						h := rng.IntN(2)
						host := []string{"a:80", "b:80"}[h]
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(3)+1)*time.Millisecond)
						if rng.IntN(4) > 0 {
							cancel()
							ctx, cancel = context.WithCancel(context.Background())
						}
						l, err := s.Acquire(ctx, limits.Request{Host: host})
						if err != nil {
							cancel()
							if !errors.Is(err, context.DeadlineExceeded) {
								errs.Add(1)
							}
							continue
						}
						used[l.Proxy].Add(1)
						b := l.Budget
						if n := budgetIn[b].Add(1); n > int32(caps[b]) {
							t.Errorf("budget %d: %d in flight, cap %d", b, n, caps[b])
						} else {
							for m := maxBudget[b].Load(); n > m && !maxBudget[b].CompareAndSwap(m, n); m = maxBudget[b].Load() {
							}
						}
						if n := hostIn[h].Add(1); n > 4 {
							t.Errorf("host %s: %d in flight, cap 4", host, n)
						}
						// The attempt's own time, which makes the
						// contention: the behaviour, not a wait for it.
						time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
						hostIn[h].Add(-1)
						budgetIn[b].Add(-1)
						l.Release()
						l.Release() // a second release must change nothing
						cancel()
					}
				}()
			}
			wg.Wait()
			if errs.Load() > 0 {
				t.Errorf("%d unexpected errors", errs.Load())
			}
			for b, c := range caps {
				if got := maxBudget[b].Load(); got != int32(c) {
					t.Errorf("budget %d never reached its cap %d (max %d)", b, c, got)
				}
			}
			for p := range used {
				if used[p].Load() == 0 {
					t.Errorf("proxy %d never used", p)
				}
			}
			// Every permit came back: all budgets can be filled at once again.
			var ls []*limits.Lease
			for i := range 6 {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				l, err := s.Acquire(ctx, limits.Request{Host: fmt.Sprintf("c%d:80", i)})
				cancel()
				if err != nil {
					t.Fatalf("after the run, full capacity is not available: %v", err)
				}
				ls = append(ls, l)
			}
			for _, l := range ls {
				l.Release()
			}
		})
	}
}

// TestBusyProxyNeverBlocks: with one proxy full, a request goes to the other
// at once rather than queueing behind the busy one.
func TestBusyProxyNeverBlocks(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
	})
	defer s.Close()
	ctx := context.Background()
	a, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, err := s.Acquire(tctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatalf("second acquire waited although a proxy was free: %v", err)
	}
	if a.Proxy == b.Proxy {
		t.Fatalf("both leases on proxy %d", a.Proxy)
	}
	a.Release()
	b.Release()
}

// TestHostAtLimitDoesNotBlockOthers: a waiter for a host at its limit stays
// queued while a later request for another host is served.
func TestHostAtLimitDoesNotBlockOthers(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 10}},
		BudgetOf: []int{0},
		Host:     limits.Spec{Concurrency: 1},
	})
	r.play([]step{
		{ask: []string{"first"}, host: "a:1", grant: []string{"first"}}, // host a at its limit of 1
		{ask: []string{"second"}, host: "a:1"},                          // a second for a waits ...
		{ask: []string{"other"}, host: "b:1", grant: []string{"other"}}, // ... and does not hold up one for b
		{finish: []string{"first"}, grant: []string{"second"}},          // a's first given back: the second starts
	})
	if l := r.asks["second"].l; l.HostInFlight != 1 {
		t.Errorf("host in flight at grant = %d", l.HostInFlight)
	}
}

// TestAvoidPrefersAnotherProxy: a retry avoids the proxy it already used
// when another can start now, and still uses it when none can.
func TestAvoidPrefersAnotherProxy(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 2}, {Concurrency: 2}},
		BudgetOf: []int{0, 1},
	})
	defer s.Close()
	ctx := context.Background()
	for _, avoid := range []int{0, 1} {
		l, _ := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{avoid}})
		if l.Proxy == avoid {
			t.Errorf("avoid %d: got proxy %d", avoid, l.Proxy)
		}
		l.Release()
	}
	hold, _ := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{0}}) // proxy 1
	hold2, _ := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{0}})
	l, _ := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{0}})
	if l.Proxy != 0 {
		t.Errorf("with proxy 1 full, got proxy %d, want the avoided 0", l.Proxy)
	}
	for _, x := range []*limits.Lease{hold, hold2, l} {
		x.Release()
	}
}

// TestRateBound checks the token-bucket bound on grant times: with up to
// four attempts waiting and new ones coming between tokens, in any window W after the first grant at most
// burst + W·rate grants, and 40 grants take no less than the rate allows.
func TestRateBound(t *testing.T) {
	cases := []struct {
		name  string
		cfg   limits.Config
		rate  float64
		burst int
	}{
		{"proxy 100/s burst 3", limits.Config{Budgets: []limits.Spec{{Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 3}}, BudgetOf: []int{0}}, 100, 3},
		{"pool of two 100/s", limits.Config{Budgets: []limits.Spec{{Rate: limits.Rate{N: 1, Per: 10 * time.Millisecond}, Burst: 1}}, BudgetOf: []int{0, 0}}, 100, 1},
		{"host 100/s burst 2", limits.Config{Budgets: []limits.Spec{{}}, BudgetOf: []int{0}, Host: limits.Spec{Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 2}}, 100, 2},
		{"global 100/s", limits.Config{Budgets: []limits.Spec{{}}, BudgetOf: []int{0}, Global: limits.Rate{N: 100, Per: time.Second}}, 100, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRun(t, tc.cfg)
			var times []time.Time
			grant := func(name string) {
				times = append(times, r.clock.Now())
				r.asks[name].l.Release()
			}
			asked := 0
			for len(times) < 40 {
				if asked-len(times) < 4 && asked < 40 { // one more, up to four asking
					if name := "a" + strconv.Itoa(asked); r.ask(name, limits.Request{Host: "h:1"}) {
						grant(name)
					}
					asked++
				}
				// Move on to the next timer, and at most 3ms, out of step
				// with the rates, so that new attempts also come between
				// tokens. A grant's time is then the clock's time.
				d := 3 * time.Millisecond
				if next, ok := r.clock.Next(); ok {
					d = min(d, next.Sub(r.clock.Now()))
				}
				r.clock.Advance(d)
				for _, name := range r.settle() {
					grant(name)
				}
			}
			for i := range times {
				for j := i; j < len(times); j++ {
					w := times[j].Sub(times[i])
					allowed := float64(tc.burst) + w.Seconds()*tc.rate
					if n := countBetween(times, times[i], times[j]); float64(n) > allowed+1e-9 {
						t.Fatalf("%d grants in %s, bound %.1f", n, w, allowed)
					}
				}
			}
			span := maxTime(times).Sub(minTime(times))
			if min := time.Duration(float64(40-tc.burst) / tc.rate * float64(time.Second)); span < min {
				t.Errorf("40 grants in %s, the rate allows no faster than %s", span, min)
			}
		})
	}
}

// TestRealClockWakesWaiters: on the real clock (Config.Clock nil), attempts
// waiting for rate tokens are woken by a real timer, no sooner than the rate
// allows.
func TestRealClockWakesWaiters(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Rate: limits.Rate{N: 1, Per: 20 * time.Millisecond}, Burst: 1}},
		BudgetOf: []int{0},
	})
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range 3 { // the first at once, the others a token apart
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
			if err != nil {
				t.Error(err)
				return
			}
			l.Release()
		}()
	}
	wg.Wait()
	if el := time.Since(start); el < 40*time.Millisecond {
		t.Errorf("3 grants at 1/20ms in %s", el)
	}
}

func countBetween(ts []time.Time, a, b time.Time) int {
	n := 0
	for _, t := range ts {
		if !t.Before(a) && !t.After(b) {
			n++
		}
	}
	return n
}

func minTime(ts []time.Time) time.Time {
	m := ts[0]
	for _, t := range ts {
		if t.Before(m) {
			m = t
		}
	}
	return m
}

func maxTime(ts []time.Time) time.Time {
	m := ts[0]
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

// TestCancelledWaiterTakesNothing: a waiter whose context ends gets the
// context's error and leaves the scheduler as it was.
func TestCancelledWaiterTakesNothing(t *testing.T) {
	r := newRun(t, limits.Config{Budgets: []limits.Spec{{Concurrency: 1}}, BudgetOf: []int{0}})
	r.play([]step{
		{ask: []string{"hold"}, grant: []string{"hold"}}, // the one permit
		{ask: []string{"x"}},                             // a second waits ...
		{cancel: []string{"x"}},                          // ... until its context ends: context.Canceled, no lease
		{finish: []string{"hold"}},                       // the permit comes back, to no one
		{ask: []string{"y"}, grant: []string{"y"}},       // and is there for the next
	})
}

// TestCancelledWaiterRealDeadline: on the real clock, a context deadline
// ends a wait with context.DeadlineExceeded.
func TestCancelledWaiterRealDeadline(t *testing.T) {
	s := limits.NewLocal(limits.Config{Budgets: []limits.Spec{{Concurrency: 1}}, BudgetOf: []int{0}})
	defer s.Close()
	hold, _ := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
	defer hold.Release()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if _, err := s.Acquire(ctx, limits.Request{Host: "h:1"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

// TestStoppedWaiterTakesNothing: closing a request's Stop ends its wait
// with context.Canceled while its context goes on, and the permit it
// waited for goes to the next request; a Stop closed already ends the
// request before it queues. In a synctest bubble: synctest.Wait returns
// once the waiting Acquire is blocked in the list, where the test polled
// the list's length every millisecond.
func TestStoppedWaiterTakesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := limits.NewLocal(limits.Config{Budgets: []limits.Spec{{Concurrency: 1}}, BudgetOf: []int{0}})
		defer s.Close()
		hold, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		got := make(chan error, 1)
		go func() {
			l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1", Stop: stop})
			if l != nil {
				l.Release()
			}
			got <- err
		}()
		synctest.Wait()
		if n := limits.Waiting(s); n != 1 {
			t.Fatalf("%d waiting, want the one Acquire", n)
		}
		close(stop)
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped wait: err = %v, want context.Canceled", err)
		}
		if limits.Waiting(s) != 0 {
			t.Fatal("the stopped waiter is still queued")
		}
		if _, err := s.Acquire(context.Background(), limits.Request{Host: "h:1", Stop: stop}); !errors.Is(err, context.Canceled) {
			t.Fatalf("stopped before asking: err = %v, want context.Canceled", err)
		}
		hold.Release()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		next, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatalf("the permit did not come back: %v", err)
		}
		next.Release()
	})
}

// TestFIFO: waiters are served first come, first served.
func TestFIFO(t *testing.T) {
	r := newRun(t, limits.Config{Budgets: []limits.Spec{{Concurrency: 1}}, BudgetOf: []int{0}})
	r.play([]step{
		{ask: []string{"hold"}, grant: []string{"hold"}},  // the one permit
		{ask: names("w", 5)},                              // five wait, in order
		{finish: []string{"hold"}, grant: []string{"w0"}}, // each release serves the oldest
		{finish: []string{"w0"}, grant: []string{"w1"}},
		{finish: []string{"w1"}, grant: []string{"w2"}},
		{finish: []string{"w2"}, grant: []string{"w3"}},
		{finish: []string{"w3"}, grant: []string{"w4"}},
	})
}

// TestLeastInFlightIsByFill: least-inflight compares how full budgets are,
// not raw counts: capacity 8 with 2 in flight beats capacity 2 with 1.
func TestLeastInFlightIsByFill(t *testing.T) {
	s := limits.NewLocal(limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}, {Concurrency: 2}},
		BudgetOf: []int{0, 1},
	})
	defer s.Close()
	ctx := context.Background()
	var held []*limits.Lease
	for _, avoid := range []int{1, 1, 0} { // two on the big one, one on the small
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{avoid}})
		if err != nil || l.Proxy == avoid {
			t.Fatalf("setup: %v %v", l, err)
		}
		held = append(held, l)
	}
	l, _ := s.Acquire(ctx, limits.Request{Host: "h:1"})
	if l.Proxy != 0 {
		t.Errorf("got proxy %d: 2/8 full should beat 1/2 full", l.Proxy)
	}
	l.Release()
	for _, h := range held {
		h.Release()
	}
}

// TestDrainHoldsBackSlowProxy: once the input has run out, a request waits
// for the fast proxy rather than start on one that would finish it later.
// Before Drain, the slow proxy takes it at once.
// TestDrainPrefersKnownPace: once the input has run out, a request goes to
// a proxy that has shown its pace before one that has not (which may be
// slow, or failing every attempt), though the policy alone would pick the
// unknown one; and the unknown one still takes a request when no other can.
func TestDrainPrefersKnownPace(t *testing.T) {
	const ms = time.Millisecond
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
	})
	r.play([]step{
		{ask: []string{"a"}, avoid: []int{0}, grant: []string{"a@1"}}, // proxy 1 shows its pace ...
		{at: 5 * ms, finish: []string{"a"}, outcome: limits.Success},  // ... 5ms; proxy 0 has shown none
		{ask: []string{"x"}, grant: []string{"x@0"}},                  // before Drain the policy picks the less used proxy 0
		{finish: []string{"x"}},                                       // (given back, no pace learned)
		{drain: true},
		{ask: []string{"y"}, grant: []string{"y@1"}}, // now the known pace first
		{ask: []string{"z"}, grant: []string{"z@0"}}, // and the unknown one when it is the only one free
	})
}

func TestDrainHoldsBackSlowProxy(t *testing.T) {
	const ms = time.Millisecond
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
	})
	r.play([]step{
		{ask: []string{"a"}, avoid: []int{1}, grant: []string{"a@0"}},       // teach it the latencies: proxy 0 ...
		{at: 5 * ms, finish: []string{"a"}, outcome: limits.Success},        // ... holds a lease 5ms ...
		{ask: []string{"b"}, avoid: []int{0}, grant: []string{"b@1"}},       // ... and proxy 1 ...
		{at: 105 * ms, finish: []string{"b"}, outcome: limits.Success},      // ... 100ms
		{ask: []string{"fast"}, avoid: []int{1}, grant: []string{"fast@0"}}, // the fast one busy
		{ask: []string{"x"}, grant: []string{"x@1"}},                        // before Drain the free slow proxy takes a request at once
		{finish: []string{"x"}}, // (given back)
		{drain: true},           // the input has run out
		{ask: []string{"y"}},    // now a request waits: the fast proxy would finish it sooner
		{at: 115 * ms, finish: []string{"fast"}, outcome: limits.Success, grant: []string{"y@0"}}, // it goes to the fast one once free
	})
}
