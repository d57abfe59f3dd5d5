package limits_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/limits"
)

// checkWindows checks that sorted admission times meet the GCRA bound: at
// most burst−1+⌈W/T⌉ admissions in any half-open window of length W. The
// densest windows start at an admission, so it is enough that the k-th
// admission after any one comes at least (k+1−burst)·T later.
func checkWindows(t *testing.T, at []time.Time, period time.Duration, burst int) {
	t.Helper()
	for i := range at {
		for k := burst; i+k < len(at) && k < burst+64; k++ {
			d := at[i+k].Sub(at[i])
			if need := time.Duration(k+1-burst) * period; d < need {
				t.Fatalf("%d admissions within %s (from #%d), the bound allows %d (T=%s burst=%d)",
					k+1, d, i, burst-1+int(math.Ceil(float64(d+1)/float64(period))), period, burst)
			}
		}
	}
}

// TestGCRAModel drives the GCRA as the scheduler does, on a fake time line:
// requests arrive at random, a request that must wait is woken by a timer
// that fires late by a random amount, and the admission is charged at
// ChargeAt of the time the timer was due. The admissions' logical times meet
// the window bound exactly; their real times trail them by no more than one
// timer's lateness; greedy requests reach the rate however late the timers
// are; and an idle limiter banks no more than its burst.
func TestGCRAModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rate  limits.Rate
		burst int
		late  time.Duration // the most a timer fires late
	}{
		{"1/s burst 1", limits.Rate{N: 1, Per: time.Second}, 1, 300 * time.Millisecond},
		{"3/s burst 1", limits.Rate{N: 3, Per: time.Second}, 1, 0},
		{"10/s burst 5", limits.Rate{N: 10, Per: time.Second}, 5, 150 * time.Millisecond},
		{"60/m burst 60", limits.Rate{N: 60, Per: time.Minute}, 60, time.Second},
		{"7/100ms burst 2", limits.Rate{N: 7, Per: 100 * time.Millisecond}, 2, 20 * time.Millisecond},
		{"5000/s burst 1", limits.Rate{N: 5000, Per: time.Second}, 1, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := limits.NewGCRA(tc.rate, tc.burst)
			period := g.Interval()
			if want := time.Duration(math.Ceil(float64(tc.rate.Per) / tc.rate.N)); period != want {
				t.Fatalf("T = %s, want %s", period, want)
			}
			rng := rand.New(rand.NewPCG(1, uint64(tc.burst)))
			now := start
			var logical []time.Time // when each was charged
			for range 20000 {
				if w := g.WaitAt(now); w > 0 {
					if rng.IntN(2) == 0 {
						// Wait for the token: the timer is due at now+w
						// and fires up to late after it.
						due := now.Add(w)
						if tc.late > 0 {
							now = due.Add(time.Duration(rng.Int64N(int64(tc.late))))
						} else {
							now = due
						}
						if g.WaitAt(now) != 0 {
							t.Fatalf("not allowed at %s, after WaitAt said %s", now.Sub(start), w)
						}
						a := g.ChargeAt(due)
						if a.After(now) || now.Sub(a) > tc.late {
							t.Fatalf("charged at %s, real time %s: more than one timer's lateness apart", a.Sub(start), now.Sub(start))
						}
						g.TakeAt(a)
						logical = append(logical, a)
						continue
					}
				} else {
					a := g.ChargeAt(now)
					g.TakeAt(a)
					logical = append(logical, a)
				}
				now = now.Add(time.Duration(rng.Int64N(int64(period) / 2)))
			}
			checkWindows(t, logical, period, tc.burst)

			// Greedy requests with late timers reach the rate: the
			// lateness does not add up. A greedy request is always
			// waiting, so it is charged when its token comes due.
			g = limits.NewGCRA(tc.rate, tc.burst)
			now = start
			last := start
			for range 1000 {
				due := g.ChargeAt(last)
				if due.After(now) { // wait for a timer, which fires late
					now = due
					if tc.late > 0 {
						now = now.Add(time.Duration(rng.Int64N(int64(tc.late))))
					}
				}
				last = due
				g.TakeAt(last)
			}
			if want := start.Add(time.Duration(1000-tc.burst) * period); !last.Equal(want) {
				t.Fatalf("the 1000th admission charged at +%s, want +%s", last.Sub(start), want.Sub(start))
			}
			if now.Sub(last) > tc.late {
				t.Fatalf("the 1000th admission at +%s, %s after its schedule", now.Sub(start), now.Sub(last))
			}

			// Idle for a long time, it allows its burst at once and then
			// one per T: nothing banked beyond the burst.
			now = now.Add(1000 * period)
			n := 0
			for g.WaitAt(now) == 0 {
				g.TakeAt(g.ChargeAt(now))
				n++
			}
			if n != tc.burst {
				t.Fatalf("after a long idle spell %d admissions at once, want the burst %d", n, tc.burst)
			}
			if !g.FullAt(now.Add(time.Duration(tc.burst) * period)) {
				t.Fatalf("not full %s after the burst", time.Duration(tc.burst)*period)
			}
		})
	}
}

// TestGCRAUnlimited: the zero Rate allows everything.
func TestGCRAUnlimited(t *testing.T) {
	g := limits.NewGCRA(limits.Rate{}, 1)
	for range 1000 {
		if g.WaitAt(start) != 0 {
			t.Fatal("an unlimited GCRA made a request wait")
		}
		g.TakeAt(start)
	}
	if g.Limited() || !g.FullAt(start) {
		t.Fatal("an unlimited GCRA is limited, or not full")
	}
}

// lateClock is a FakeClock whose timers fire late by a fixed amount, as a
// loaded machine's do.
type lateClock struct {
	*limits.FakeClock
	late time.Duration
}

func (c lateClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return lateTimer{c.FakeClock.AfterFunc(d+c.late, f), c.late}
}

// movingClock is a lateClock whose reads move on as a real clock does
// while the scheduler works: each read within one instant of the fake
// clock is step later than the one before (the first is the instant
// itself), and the next instant starts afresh.
type movingClock struct {
	lateClock
	step time.Duration

	mu    sync.Mutex
	at    time.Time // the fake instant of the last read
	reads int       // reads within it
}

func (c *movingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.FakeClock.Now()
	if !now.Equal(c.at) {
		c.at, c.reads = now, 0
	}
	c.reads++
	return now.Add(time.Duration(c.reads-1) * c.step)
}

type lateTimer struct {
	clock.Timer
	late time.Duration
}

func (t lateTimer) Reset(d time.Duration) bool { return t.Timer.Reset(d + t.late) }

// TestLateTimersDoNotAddUp: with every timer 4ms late at 100/s (T = 10ms),
// greedy attempts still start 100 per second: each is charged at the time
// its token came due, not at the time its timer fired, so the lateness of
// one does not push back the next. Against the x/time/rate limiters, which
// charged at the firing, it was 1000/14 = 71 per second. So too when a
// timer is so late (9.5ms) that the next token is due before the scheduler
// is done with the wake-up (the clock moves 1ms a read): the wake-up armed
// the timer for that token, then, reading the clock again, took it for
// past and forgot its due time, and the next grant was charged when it ran
// (0.3 to 0.8% of the rate lost at 5000/s on a real clock).
func TestLateTimersDoNotAddUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  limits.Config
	}{
		{"global", limits.Config{Budgets: []limits.Spec{{}}, BudgetOf: []int{0}, Global: limits.Rate{N: 100, Per: time.Second}}},
		{"proxy", limits.Config{Budgets: []limits.Spec{{Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 1}}, BudgetOf: []int{0}}},
		{"host", limits.Config{Budgets: []limits.Spec{{}}, BudgetOf: []int{0}, Host: limits.Spec{Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 1}}},
	} {
		for _, clk := range []struct {
			late, step time.Duration
		}{{4 * time.Millisecond, 0}, {9500 * time.Microsecond, time.Millisecond}} {
			t.Run(fmt.Sprintf("%s/late=%s/step=%s", tc.name, clk.late, clk.step), func(t *testing.T) {
				t.Parallel()
				testLateTimers(t, tc.cfg, clk.late, clk.step)
			})
		}
	}
}

// testLateTimers runs in a synctest bubble: synctest.Wait returns once
// every asking goroutine is granted or blocked in the list, where the test
// polled the list's length every 50µs.
func testLateTimers(t *testing.T, cfg limits.Config, late, step time.Duration) {
	synctest.Test(t, func(t *testing.T) {
		clock := limits.NewFakeClock(start)
		cfg.Clock = &movingClock{lateClock: lateClock{clock, late}, step: step}
		s := limits.NewLocal(cfg)
		defer s.Close()
		var times []time.Time
		granted := make(chan *limits.Lease, 8)
		ask := func() {
			go func() {
				l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
				if err != nil {
					l = nil
				}
				granted <- l
			}()
		}
		const asking = 3
		for range asking {
			ask()
		}
		for len(times) < 101 {
			// Once every goroutine is granted or queued, move to the next
			// timer.
			synctest.Wait()
			select {
			case l := <-granted:
				if l == nil {
					t.Fatal("Acquire failed")
				}
				times = append(times, clock.Now())
				l.Release()
				ask()
				continue
			default:
			}
			if !clock.AdvanceToTimer() {
				t.Fatal("no timer armed while attempts wait")
			}
		}
		span := times[100].Sub(times[0])
		// 100 intervals of 10ms, and the last start at most one
		// timer's lateness behind its schedule.
		// The scheduler reads the moving clock several times within one
		// instant, each read a step later, and charges a start at what it
		// read: a start may come up to three steps before its time by the
		// fake clock the starts are timed by (2.5 the most seen in 300 runs;
		// up to two while NewLocal's read of the clock was the first of the
		// first instant and so pushed every later one a step on).
		if lo := time.Second - 3*step; span < lo || span > time.Second+late {
			t.Fatalf("101 starts at 100/s with timers %s late took %s, want %s to 1s+%s", late, span, lo, late)
		}
		s.Close()
		for range asking {
			if l := <-granted; l != nil {
				l.Release()
			}
		}
	})
}

// BenchmarkRate measures the rate greedy attempts achieve under a global
// rate of 5000/s on the real clock (x/time/rate's limiters reached about
// 830/s). Each op is one grant; the achieved rate is reported as starts/s.
func BenchmarkRate(b *testing.B) {
	for _, r := range []float64{50, 5000} {
		b.Run(fmt.Sprintf("rate=%g", r), func(b *testing.B) {
			s := limits.NewLocal(limits.Config{Budgets: []limits.Spec{{}}, BudgetOf: []int{0}, Global: limits.Rate{N: r, Per: time.Second}})
			defer s.Close()
			ctx := context.Background()
			var wg sync.WaitGroup
			const workers = 64 // as a run's, most of them waiting
			per := b.N/workers + 1
			b.ResetTimer()
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
						if err != nil {
							b.Error(err)
							return
						}
						l.Release()
					}
				}()
			}
			wg.Wait()
			// n starts take n−1 intervals: the first is at once.
			b.ReportMetric(float64(workers*per-1)/time.Since(start).Seconds(), "starts/s")
		})
	}
}
