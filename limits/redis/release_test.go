package redis

import (
	"context"
	"strconv"
	"strings"
	"sync"
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
	ls := make([]*limits.Lease, n)
	for i := range ls {
		l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
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
