package redis

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// BenchmarkAcquireRelease measures one attempt's acquire+release pair:
// with four Scheduler instances (standing in for processes) on one Redis
// and 50 proxies, against limits.Local with the same proxies. ns/op is
// the mean time per pair over all goroutines (b.RunParallel), so 1e9/ns_op
// is the attempts per second the setup sustains. The Redis cases also
// report what a pair costs the server, which a whole run's figures hide
// in their noise: redis-µs/op, the server's CPU time (INFO cpu: its
// networking too); script-µs/op, the time its scripts ran (INFO
// commandstats, FCALL or EVALSHA); cmds/op, the commands the scripts
// called, and calls/op, the calls of scripts.
// "serial" is one caller on one Scheduler, so that every acquire is a call
// of its own, as at a steady rate: the batches of the parallel case hide
// the part of a call that does not depend on its size. "pipelined" sends
// the calls of 100 acquires, then of their releases, in one pipeline each:
// its script-µs/op is what the scripts cost Redis with no network between
// calls and no other process on its core, the steadiest of the figures.
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
		c0 := readCost(b, srv)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) { pairs(b, pb, ss[n.Add(1)%4]) })
		b.StopTimer()
		readCost(b, srv).since(c0).report(b)
	})
	b.Run("redis-serial", func(b *testing.B) {
		srv := redistest.Start(b)
		s := newSched(b, srv, Options{Namespace: "t"}, cfg)
		c0 := readCost(b, srv)
		b.ResetTimer()
		for range b.N {
			l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
			if err != nil {
				b.Fatal(err)
			}
			l.Release()
		}
		b.StopTimer()
		readCost(b, srv).since(c0).report(b)
	})
	b.Run("redis-pipelined", func(b *testing.B) {
		srv := redistest.Start(b)
		s := newSched(b, srv, Options{Namespace: "t"}, cfg)
		ctx := context.Background()
		call := pipeCaller(b, s)
		const k = 100
		c0 := readCost(b, srv)
		b.ResetTimer()
		for i := 0; i < b.N; i += k {
			pipe := s.c.Pipeline()
			var cmds []*goredis.Cmd
			for j := range min(k, b.N-i) {
				cmds = append(cmds, call(pipe, s.scripts.acquire, "1", "", "p"+strconv.Itoa(i+j), "h:1", "", ""))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			pipe = s.c.Pipeline()
			for j, cmd := range cmds {
				v, _ := cmd.Slice()
				r := decodeAcquire(v[0].([]any))
				if r.kind != "ok" {
					b.Fatalf("acquire: %+v", r)
				}
				call(pipe, s.scripts.release, "p"+strconv.Itoa(i+j), "1", "0", r.proxy, r.budget, "h:1")
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		readCost(b, srv).since(c0).report(b)
	})
	for _, hosts := range []bool{false, true} {
		name := "redis-batched"
		if hosts {
			name = "redis-batched-hosts"
		}
		b.Run(name, func(b *testing.B) { batched(b, cfg, hosts) })
	}
	b.Run("local-50", func(b *testing.B) {
		s := limits.NewLocal(cfg)
		defer s.Close()
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) { pairs(b, pb, s) })
	})
}

// batched is BenchmarkAcquireRelease's "redis-batched": as pipelined,
// but each call carries 8 acquires or 8 releases, as the group commits
// make them under load, so that it gives what an attempt costs the
// scripts once a call's own cost is shared. With hosts, every attempt is
// to a host of its own, as in a crawl of many sites ("redis-batched-hosts"):
// what a host costs besides.
func batched(b *testing.B, cfg limits.Config, hosts bool) {
	srv := redistest.Start(b)
	s := newSched(b, srv, Options{Namespace: "t"}, cfg)
	ctx := context.Background()
	call := pipeCaller(b, s)
	host := func(int) string { return "h:1" }
	if hosts {
		host = func(i int) string { return "h" + strconv.Itoa(i) + ":1" }
	}
	const k, per = 96, 8
	c0 := readCost(b, srv)
	b.ResetTimer()
	for i := 0; i < b.N; i += k {
		n := min(k, b.N-i)
		pipe := s.c.Pipeline()
		var cmds []*goredis.Cmd
		for j := 0; j < n; j += per {
			args := []any{strconv.Itoa(min(per, n-j)), ""}
			for q := j; q < min(j+per, n); q++ {
				args = append(args, "p"+strconv.Itoa(i+q), host(i+q), "", "")
			}
			cmds = append(cmds, call(pipe, s.scripts.acquire, args...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		pipe = s.c.Pipeline()
		var rel []any
		for j, cmd := range cmds {
			v, _ := cmd.Slice()
			for q, x := range v {
				r := decodeAcquire(x.([]any))
				if r.kind != "ok" {
					b.Fatalf("acquire: %+v", r)
				}
				rel = append(rel, "p"+strconv.Itoa(i+j*per+q), "1", "0", r.proxy, r.budget, host(i+j*per+q))
			}
			call(pipe, s.scripts.release, rel...)
			rel = rel[:0]
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	readCost(b, srv).since(c0).report(b)
}

// pipeCaller returns a function that adds a call of a script of s to a
// pipeline, as a function or, with -scripts, by EVALSHA.
func pipeCaller(b *testing.B, s *Scheduler) func(goredis.Pipeliner, *script, ...any) *goredis.Cmd {
	ctx := context.Background()
	if !s.fns.Load() {
		for _, sc := range []*script{s.scripts.acquire, s.scripts.release} {
			if err := sc.ev.Load(ctx, s.c).Err(); err != nil {
				b.Fatal(err)
			}
		}
	}
	return func(pipe goredis.Pipeliner, sc *script, args ...any) *goredis.Cmd {
		if s.fns.Load() {
			return pipe.FCall(ctx, sc.fn, s.keys, s.argv(args)...)
		}
		return sc.ev.EvalSha(ctx, pipe, s.keys, s.argv(args)...)
	}
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

// cost is what a Redis server has spent so far, from INFO.
type cost struct {
	cpuUs    float64 // used_cpu_user + used_cpu_sys, µs
	scriptUs float64 // usec of evalsha
	cmds     float64 // calls of every command but evalsha and info
	calls    float64 // calls of scripts (evalsha)
}

func readCost(b *testing.B, srv *redistest.Server) cost {
	b.Helper()
	in, err := srv.Info()
	if err != nil {
		b.Fatal(err)
	}
	c := cost{cpuUs: in.CPUSeconds * 1e6, scriptUs: in.Usec["evalsha"] + in.Usec["fcall"],
		calls: in.Calls["evalsha"] + in.Calls["fcall"]}
	for name, n := range in.Calls {
		if name != "evalsha" && name != "fcall" && name != "info" && name != "function|load" {
			c.cmds += n
		}
	}
	return c
}

func (c cost) since(c0 cost) cost {
	return cost{c.cpuUs - c0.cpuUs, c.scriptUs - c0.scriptUs, c.cmds - c0.cmds, c.calls - c0.calls}
}

func (c cost) report(b *testing.B) {
	n := float64(b.N)
	b.ReportMetric(c.cpuUs/n, "redis-µs/op")
	b.ReportMetric(c.scriptUs/n, "script-µs/op")
	b.ReportMetric(c.cmds/n, "cmds/op")
	b.ReportMetric(c.calls/n, "calls/op")
}
