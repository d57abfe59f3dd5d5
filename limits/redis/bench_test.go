package redis

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// BenchmarkAcquireRelease measures one attempt's acquire+release pair:
// with four Scheduler instances (standing in for processes) on one Redis
// and 50 proxies, against limits.Local with the same proxies. ns/op is
// the mean time per pair over all goroutines (b.RunParallel), so 1e9/ns_op
// is the attempts per second the setup sustains.
func BenchmarkAcquireRelease(b *testing.B) {
	cfg := proxies(50, limits.Spec{Concurrency: 1000})
	b.Run("redis-4x50", func(b *testing.B) {
		srv := redistest.Start(b)
		var ss []*Scheduler
		for range 4 {
			ss = append(ss, newSched(b, srv, Options{Namespace: "t"}, cfg))
		}
		var n atomic.Int64
		b.SetParallelism(4) // 4×GOMAXPROCS goroutines: each scheduler has several callers
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) { pairs(b, pb, ss[n.Add(1)%4]) })
	})
	b.Run("local-50", func(b *testing.B) {
		s := limits.NewLocal(cfg)
		defer s.Close()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) { pairs(b, pb, s) })
	})
}

// pairs acquires and releases on s while pb says so.
func pairs(b *testing.B, pb *testing.PB, s limits.Scheduler) {
	for pb.Next() {
		l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
		if err != nil {
			b.Error(err)
			return
		}
		l.Release()
	}
}
