package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestHostBannedShared: a host that has banned every proxy, whichever
// process saw each ban, fails every process's requests for it at once with
// a *limits.HostBannedError; other hosts go on; a success through a
// banned proxy lifts its ban first.
func TestHostBannedShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	via := func(s *Scheduler, host string, p int, o limits.Outcome) {
		t.Helper()
		l, err := s.Acquire(ctx, limits.Request{Host: host, Avoid: []int{1 - p}})
		if err != nil || l.Proxy != p {
			t.Fatalf("got %v, %v; want a lease on proxy %d", l, err, p)
		}
		l.Finish(o)
	}
	via(a, "x:1", 0, limits.Banned)
	via(b, "x:1", 0, limits.Success) // lifts proxy 0's ban
	via(b, "x:1", 1, limits.Banned)  // 1 of 2
	via(a, "x:1", 1, limits.Banned)  // the same again: 1 of 2
	via(a, "x:1", 0, limits.Banned)  // 2 of 2
	for _, s := range []*Scheduler{a, b} {
		_, err := s.Acquire(ctx, limits.Request{Host: "x:1"})
		var hb *limits.HostBannedError
		if !errors.As(err, &hb) || hb.Host != "x:1" || hb.Proxies != 2 {
			t.Fatalf("acquire for the banned host: %v, want a HostBannedError of x:1 by 2", err)
		}
		l, err := s.Acquire(ctx, limits.Request{Host: "y:1"})
		if err != nil {
			t.Fatalf("another host: %v", err)
		}
		l.Release()
	}
	checkIdle(t, srv, a, b)
}

// TestRetryAfterShared: a Retry-After told by one host through two proxies,
// each seen by another process, holds both processes' attempts to that
// host until the time given, at most RetryAfterMax; other hosts go on.
func TestRetryAfterShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	const hold = time.Second
	cfg.Pushback = limits.Pushback{RetryAfterMax: hold}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: 2 * time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: 2 * time.Second}, cfg)
	ctx := context.Background()
	told := func(s *Scheduler, p int) {
		t.Helper()
		l, err := s.Acquire(ctx, limits.Request{Host: "x:1", Avoid: []int{1 - p}})
		if err != nil || l.Proxy != p {
			t.Fatalf("got %v, %v; want a lease on proxy %d", l, err, p)
		}
		l.RetryAfter = time.Hour // capped
		l.Finish(limits.PushedBack)
	}
	told(a, 0)
	l, err := b.Acquire(ctx, limits.Request{Host: "x:1"}) // one proxy told: no hold
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	told(b, 1)
	t0 := time.Now()
	l, err = b.Acquire(ctx, limits.Request{Host: "y:1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	if d := time.Since(t0); d > hold/2 {
		t.Errorf("another host waited %s", d)
	}
	for _, s := range []*Scheduler{a, b} {
		l, err := s.Acquire(ctx, limits.Request{Host: "x:1"})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
		// The hold runs on the Redis clock from the second answer; a
		// tolerance of 50ms below (the clocks' rounding and the time the
		// second release took) and 2s above (a busy machine).
		if d := time.Since(t0); d < hold-50*time.Millisecond || d > hold+2*time.Second {
			t.Errorf("an attempt to the held host waited %s, want about %s", d, hold)
		}
	}
	checkIdle(t, srv, a, b)
}

// TestWaitErrorShared: an Acquire whose context ends while it waits says
// what Redis told it it waited for.
func TestWaitErrorShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 4})
	cfg.Host = limits.Spec{Concurrency: 1}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	held, err := s.Acquire(context.Background(), limits.Request{Host: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(ctx, limits.Request{Host: "x:1"})
	var we *limits.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) || we.Waiting() != "the host's concurrency (x:1)" {
		t.Fatalf("err %v, want a WaitError for the host's concurrency", err)
	}
	held.Release()
	checkIdle(t, srv, s)
}
