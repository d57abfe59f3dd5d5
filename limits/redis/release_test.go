package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestReleasesGroupCommit: 200 leases given back at once by 200 goroutines
// take far fewer calls of the release script than releases (each carries
// those that came while the one before was on its way), every Release
// returns once its lease is gone from Redis, and a health change learnt in
// the middle of a call is the right proxy's.
func TestReleasesGroupCommit(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(50, limits.Spec{Concurrency: 1000})
	cfg.Health = limits.Health{MaxFailures: 1, Cooldown: time.Minute}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Minute}, cfg)
	const n = 200
	ls := acquireN(t, s, n)
	// One lease of one proxy fails (MaxFailures 1: its proxy is benched);
	// the others succeed.
	faulty := ls[n/2].Proxy
	calls0 := scriptCalls(t, srv)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			<-start
			if i == n/2 {
				l.Finish(limits.ProxyFault)
			} else {
				l.Finish(limits.Success)
			}
		})
	}
	close(start)
	wg.Wait()
	calls := scriptCalls(t, srv) - calls0
	if calls > n/4 {
		t.Errorf("%d calls of the release script for %d releases at once, want at most %d", calls, n, n/4)
	}
	t.Logf("%d releases in %d calls", n, calls)
	for _, e := range counts(t, srv, "t", true) { // at once: every Release has returned
		t.Error(e)
	}
	evs := s.Events(nil)
	if len(evs) != 1 || evs[0].Proxy != faulty || evs[0].State != "benched" {
		t.Errorf("events %+v, want proxy %d benched", evs, faulty)
	}
}

// scriptCalls is how many scripts srv has run (EVALSHA).
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	v, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(v.(string), "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// TestReleasesWhileRedisHangs: with Redis hanging, releases that queue
// behind a call on its way do not wait for one timeout after another: once
// that call fails they are orphans at once, so no Release takes much more
// than the one call it waited for (before, 512 releases took 9 timeouts in
// a row); and when Redis answers again, the orphans are released in the
// background, in calls of many, each with its outcome (a proxy fault among
// them benches its proxy), and nothing is left over.
func TestReleasesWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 1200 * time.Millisecond // a call's timeout: ttl/6 = 200ms
	cfg := proxies(50, limits.Spec{Concurrency: 1000})
	cfg.Health = limits.Health{MaxFailures: 1, Cooldown: time.Minute}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl}, cfg)
	const n = 512
	ls := acquireN(t, s, n)
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	var slowest atomic.Int64
	var wg sync.WaitGroup
	const faulty = 7
	for i, l := range ls {
		wg.Go(func() {
			o := limits.Success
			if i == faulty {
				o = limits.ProxyFault
				time.Sleep(20 * time.Millisecond) // behind the first call: an orphan
			}
			start := time.Now()
			l.Finish(o)
			if d := int64(time.Since(start)); d > slowest.Load() {
				slowest.Store(d) // racy max: enough for a bound
			}
		})
	}
	wg.Wait()
	srv.Resume()
	resumed = true
	calls0 := scriptCalls(t, srv)
	// The call in flight, its timeout (200ms), and scheduling on a busy
	// machine: 3 timeouts' worth. Nine of them in a row before.
	if d := time.Duration(slowest.Load()); d > 3*ttl/6 {
		t.Errorf("the slowest Release took %v while Redis hung, want at most %v", d, 3*ttl/6)
	}
	// The orphans go back when Redis answers (the heartbeat, every ttl/3).
	deadline := time.Now().Add(5 * time.Second)
	for {
		errs := counts(t, srv, "t", true)
		if len(errs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, e := range errs {
				t.Error(e)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The orphans went back in calls of up to releaseMax, not one each
	// (with the heartbeat's renewals: a few calls more).
	if calls := scriptCalls(t, srv) - calls0; calls >= n/4 {
		t.Errorf("%d script calls to release %d orphans, want fewer than %d", calls, n, n/4)
	} else {
		t.Logf("%d orphans released in %d script calls", n, calls)
	}
	var benched bool
	for _, ev := range s.Events(nil) {
		benched = benched || ev.Proxy == ls[faulty].Proxy && ev.State == "benched"
	}
	if !benched {
		t.Errorf("proxy %d, whose lease failed while Redis hung, is not benched: its outcome was lost", ls[faulty].Proxy)
	}
}

// acquireN takes n leases on s, for host h:1.
func acquireN(t *testing.T, s *Scheduler, n int) []*limits.Lease {
	t.Helper()
	ls := make([]*limits.Lease, n)
	for i := range ls {
		l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}
