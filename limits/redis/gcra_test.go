package redis

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// gcraModel is the scripts' rate limit in pure Go, on microseconds: the
// same steps as gcra() in common.lua.
type gcraModel struct{ t, tau, tat float64 }

func (g *gcraModel) allow(now float64) (wait float64, ok bool) {
	wait, _, ok = g.allowDue(now, now)
	return wait, ok
}

// allowDue is allow for a waiter whose token came due at due (≤ now): when
// allowed, the time it is charged at.
func (g *gcraModel) allowDue(now, due float64) (wait, charged float64, ok bool) {
	tat := math.Max(g.tat, due)
	allowAt := tat + g.t - g.tau
	if now < allowAt {
		return math.Ceil(allowAt - now), 0, false
	}
	g.tat = tat + g.t
	return 0, math.Max(due, allowAt), true
}

// checkBound checks that sorted admission times (µs) meet the GCRA bound:
// at most burst−1+⌈W/T⌉ admissions in any half-open window of length W.
// The densest windows start at an admission, so it is enough that the k-th
// admission after any one comes at least (k+1−burst)·T later; it checks
// windows of up to burst+64 admissions.
func checkBound(t *testing.T, name string, at []int64, period float64, burst int) {
	t.Helper()
	slices.Sort(at)
	for i := range at {
		for k := burst; i+k < len(at) && k < burst+64; k++ {
			d := float64(at[i+k] - at[i])
			if need := float64(k+1-burst) * period; d < need-1 { // 1µs: TIME's resolution
				t.Fatalf("%s: %d admissions within %.0fµs (from #%d), bound allows %d (T=%.0fµs burst=%d)",
					name, k+1, d, i, burst-1+int(math.Ceil((d+1)/period)), period, burst)
			}
		}
	}
}

// TestGCRAModelBound drives the model on a fake clock with random arrivals
// and checks the window bound, and that the bound is reached (the limiter
// does not over-block).
func TestGCRAModelBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		per   time.Duration
		n     float64
		burst int
	}{
		{"1/s burst 1", time.Second, 1, 1},
		{"3/s burst 1", time.Second, 3, 1},
		{"10/s burst 5", time.Second, 10, 5},
		{"60/m burst 60", time.Minute, 60, 60},
		{"7/100ms burst 2", 100 * time.Millisecond, 7, 2},
		{"2000/s burst 1", time.Second, 2000, 1}, // late waiters come back intervals late
		{"500/s burst 4", time.Second, 500, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			period := float64(tc.per.Microseconds()) / tc.n
			g := &gcraModel{t: period, tau: period * float64(tc.burst)}
			rng := rand.New(rand.NewPCG(1, uint64(tc.burst)))
			var now float64 = 1.7e15 // a Redis TIME of today: exact in a double
			var at []int64
			for range 20000 {
				if wait, ok := g.allow(now); ok {
					at = append(at, int64(now))
				} else if rng.IntN(2) == 0 {
					now += wait // a waiter that comes back exactly when told
					continue
				}
				now += float64(rng.IntN(int(period) / 2))
			}
			checkBound(t, tc.name, at, period, tc.burst)
			// Up to eight waiters, of any process, come back late by up
			// to 10ms (acquire.lua's LATE) among fresh arrivals, and are
			// charged at the times they were told: the times charged meet
			// the bound, in whatever order they come.
			g = &gcraModel{t: period, tau: period * float64(tc.burst)}
			type waiter struct{ due, back float64 }
			var waiting []waiter
			now, at = 1.7e15, nil
			for range 40000 {
				next, due := now+float64(rng.IntN(int(period)/2)), -1.0
				first := -1
				for i, w := range waiting {
					if w.back <= next && (first < 0 || w.back < waiting[first].back) {
						first = i
					}
				}
				if first >= 0 {
					next, due = waiting[first].back, waiting[first].due
					waiting = slices.Delete(waiting, first, first+1)
				}
				now = math.Max(now, next)
				d := now
				if due >= 0 && due <= now && now-due <= 10000 {
					d = due
				}
				if wait, charged, ok := g.allowDue(now, d); ok {
					at = append(at, int64(charged))
				} else if len(waiting) < 8 {
					waiting = append(waiting, waiter{now + wait, now + wait + float64(rng.IntN(10001))})
				}
			}
			checkBound(t, tc.name+" late", at, period, tc.burst)
			// Greedy arrivals reach the rate: nothing is lost to rounding.
			g = &gcraModel{t: period, tau: period * float64(tc.burst)}
			now, n := 1.7e15, 0
			start := now
			for n < 1000 {
				if w, ok := g.allow(now); ok {
					n++
				} else {
					now += w
				}
			}
			if want := start + float64(n-tc.burst)*period; now > want+float64(n) {
				t.Fatalf("1000 admissions took until +%.0fµs, want +%.0fµs", now-start, want-start)
			}
		})
	}
}
