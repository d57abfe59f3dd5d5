package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestAcquiresRideTogether: acquires that find none of their process
// waiting, and come while such an acquire's call is on its way, go to
// Redis together (groupCommit), batchMax a call. Redis holds the first
// call (CLIENT PAUSE WRITE) until the 63 others have queued behind it:
// the 64 then take 5 calls of the acquire script (1, then 16, 16, 16 and
// 15), where each took one before, and each gets a lease of its own.
func TestAcquiresRideTogether(t *testing.T) {
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t"}, proxies(4, limits.Spec{Concurrency: 100}))
	admin := srv.Client()
	defer admin.Close()
	ctx := context.Background()
	calls0 := scriptCalls(t, srv)
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	paused := true
	defer func() {
		if paused {
			admin.Do(ctx, "CLIENT", "UNPAUSE")
		}
	}()
	const n = 64
	leases := make([]*limits.Lease, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { leases[i], errs[i] = s.Acquire(ctx, limits.Request{Host: "h:1"}) })
	}
	// The first call is on its way, and held: wait for the rest to queue.
	deadline := time.Now().Add(10 * time.Second)
	for queued := 0; queued < n-1; {
		s.asks.mu.Lock()
		queued = 0
		for _, b := range s.asks.queue {
			queued += len(b.items)
		}
		s.asks.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%d acquires queued behind the first after 10s, want %d", queued, n-1)
		}
		time.Sleep(time.Millisecond) // polls a condition, bounded above
	}
	if err := admin.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	paused = false
	wg.Wait()
	calls := scriptCalls(t, srv) - calls0
	for i, l := range leases {
		if errs[i] != nil {
			t.Fatalf("acquire %d: %v", i, errs[i])
		}
		defer l.Release()
	}
	s.mu.Lock()
	held := len(s.held)
	s.mu.Unlock()
	if held != n {
		t.Errorf("%d leases held, want %d", held, n)
	}
	if calls != 5 {
		t.Errorf("%d calls of the acquire script for %d acquires at once, want 5 (1, then 16, 16, 16, 15)", calls, n)
	}
}

// TestAcquiresQueuedBehindAHungCall: with Redis hanging (SIGSTOP), the
// acquires that queue behind the call on its way are not sent one call
// after another when it fails, each waiting out its timeout: they are
// told its error at once, and wait as any Acquire does while Redis is
// down, until their context ends, with an error naming the coordinator
// and the context. 48 acquires (the first call, then 16, 16 and 15), a
// call's timeout 1s and a context of 1.5s: all return within 1.5s and a
// tolerance of 0.9s for a loaded machine (sent one after another, the
// last would return after 4s). Once Redis answers again, what the calls
// that reached it took is given back: no count is left.
func TestAcquiresQueuedBehindAHungCall(t *testing.T) {
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t", opTimeout: time.Second}, proxies(4, limits.Spec{Concurrency: 100}))
	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	const n = 48
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
			if l != nil {
				l.Release()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	took := time.Since(start)
	srv.Resume()
	resumed = true
	for i, err := range errs {
		if !errors.Is(err, limits.ErrCoordinator) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("acquire %d: %v, want an error wrapping limits.ErrCoordinator and the context's", i, err)
		}
	}
	if limit := 1500*time.Millisecond + 900*time.Millisecond; took > limit {
		t.Errorf("the acquires returned %v after they began, want within %v: the queued ones waited for calls of their own", took, limit)
	}
	checkIdle(t, srv, s)
}
