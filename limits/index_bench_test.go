package limits_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/fetch-dev/fetch/limits"
)

// BenchmarkGrantPool measures one grant and one release in a pool of 10,
// 10,000 and 100,000 proxies (each its own budget of concurrency 8) with 64
// attempts in flight, for each policy: the cost per grant must not grow
// with the pool (the end of a run, draining, is measured by fetch's
// BenchmarkIdentities). It also reports the scheduler's memory
// per proxy (B/proxy), measured once per size.
func BenchmarkGrantPool(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		cfg := limits.Config{}
		for i := range n {
			cfg.Budgets = append(cfg.Budgets, limits.Spec{Concurrency: 8})
			cfg.BudgetOf = append(cfg.BudgetOf, i)
		}
		perProxy := schedulerBytes(cfg) / float64(n)
		for _, pol := range []limits.Policy{limits.LeastInFlight, limits.LeastUsed, limits.RoundRobin, limits.Random} {
			{
				b.Run(fmt.Sprintf("proxies=%d/%s", n, pol), func(b *testing.B) {
					cfg := cfg
					cfg.Policy = pol
					s := limits.NewLocal(cfg)
					defer s.Close()
					ctx := context.Background()
					const window = 64
					var ring [window]*limits.Lease
					for i := range window {
						l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
						if err != nil {
							b.Fatal(err)
						}
						ring[i] = l
					}
					b.ReportAllocs()
					b.ResetTimer()
					for i := range b.N {
						ring[i%window].Finish(limits.Success)
						l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
						if err != nil {
							b.Fatal(err)
						}
						ring[i%window] = l
					}
					b.StopTimer()
					for _, l := range ring {
						l.Release()
					}
					b.ReportMetric(perProxy, "B/proxy")
				})
			}
		}
	}
}

// schedulerBytes is the heap a scheduler for cfg takes.
func schedulerBytes(cfg limits.Config) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := limits.NewLocal(cfg)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	s.Close()
	return float64(after.HeapAlloc) - float64(before.HeapAlloc)
}
