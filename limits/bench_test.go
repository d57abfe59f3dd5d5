package limits_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/fetch-dev/fetch/limits"
)

// BenchmarkAcquireRelease measures one grant and release with many
// goroutines contending, for pools of 10 and 1000 proxies whose budgets are
// smaller than the number of goroutines, so that most acquires wait.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{10, 1000} {
		for _, workers := range []int{64, 512} {
			b.Run(fmt.Sprintf("proxies=%d/workers=%d", n, workers), func(b *testing.B) {
				cfg := limits.Config{}
				for i := range n {
					cfg.Budgets = append(cfg.Budgets, limits.Spec{Concurrency: 2})
					cfg.BudgetOf = append(cfg.BudgetOf, i)
				}
				if 2*n >= workers {
					// Keep it contended: shrink the budgets to a quarter of the workers.
					cfg.Budgets = cfg.Budgets[:max(workers/8, 1)]
					for i := range cfg.BudgetOf {
						cfg.BudgetOf[i] = i % len(cfg.Budgets)
					}
				}
				s := limits.NewLocal(cfg)
				defer s.Close()
				ctx := context.Background()
				var wg sync.WaitGroup
				per := b.N/workers + 1
				b.ResetTimer()
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						host := fmt.Sprintf("h%d:80", w%16)
						for range per {
							l, err := s.Acquire(ctx, limits.Request{Host: host})
							if err != nil {
								b.Error(err)
								return
							}
							l.Finish(limits.Success)
						}
					}()
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkPoolSize measures one grant and one release with 64 leases held
// at a time, as a run at -c 64 keeps them, through pools of 10, 10,000 and
// 100,000 proxies of their own budget each (the identities of a rotating
// gateway): what choosing a proxy costs as the pool grows, without
// goroutines waiting. An op is a release and a grant.
func BenchmarkPoolSize(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			cfg := limits.Config{}
			for i := range n {
				cfg.Budgets = append(cfg.Budgets, limits.Spec{Concurrency: 8})
				cfg.BudgetOf = append(cfg.BudgetOf, i)
			}
			s := limits.NewLocal(cfg)
			defer s.Close()
			ctx := context.Background()
			var held [64]*limits.Lease
			hosts := make([]string, 16)
			for i := range hosts {
				hosts[i] = fmt.Sprintf("h%d:80", i)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				k := i % len(held)
				if held[k] != nil {
					held[k].Finish(limits.Success)
				}
				l, err := s.Acquire(ctx, limits.Request{Host: hosts[i%len(hosts)]})
				if err != nil {
					b.Fatal(err)
				}
				held[k] = l
				i++
			}
			for _, l := range held {
				if l != nil {
					l.Finish(limits.Success)
				}
			}
		})
	}
}

// BenchmarkNewLocal measures building the scheduler for 100,000 proxies:
// each of its own budget (the identities of a rotating gateway), and in 10
// pools. An op is one scheduler.
func BenchmarkNewLocal(b *testing.B) {
	const n = 100_000
	for _, pools := range []int{n, 10} {
		b.Run(fmt.Sprintf("budgets=%d", pools), func(b *testing.B) {
			cfg := limits.Config{}
			for range pools {
				cfg.Budgets = append(cfg.Budgets, limits.Spec{Concurrency: 8})
			}
			for i := range n {
				cfg.BudgetOf = append(cfg.BudgetOf, i%pools)
			}
			b.ReportAllocs()
			for b.Loop() {
				limits.NewLocal(cfg).Close()
			}
		})
	}
}
