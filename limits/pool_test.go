package limits_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// poolRun is a Local of n proxies of capacity 1, benched at the first fault
// for cooldown, on a fake clock, with PoolWait wait.
func poolRun(t *testing.T, n int, cooldown, wait time.Duration) *run {
	t.Helper()
	cfg := limits.Config{Health: limits.Health{MaxFailures: 1, Cooldown: cooldown, MaxCooldown: 8 * cooldown, PoolWait: wait}}
	for i := range n {
		cfg.Budgets = append(cfg.Budgets, limits.Spec{Concurrency: 1})
		cfg.BudgetOf = append(cfg.BudgetOf, i)
	}
	return newRun(t, cfg)
}

// waitFor returns the result of the waiting ask name, which must have
// returned by now.
func (r *run) waitFor(name string) *ask {
	r.t.Helper()
	select {
	case a := <-r.done:
		if a.name != name {
			r.t.Fatalf("ask %q returned, want %q", a.name, name)
		}
		for i, o := range r.order {
			if o == name {
				r.order = append(r.order[:i], r.order[i+1:]...)
			}
		}
		return a
	case <-time.After(10 * time.Second): // a failsafe: the scheduler has decided already
		r.t.Fatalf("ask %q did not return", name)
		return nil
	}
}

// TestRejectedLeavesAtOnce: a proxy that refuses its credentials takes no
// attempt again, benched or not, and the others carry on.
func TestRejectedLeavesAtOnce(t *testing.T) {
	r := poolRun(t, 2, time.Second, time.Minute)
	l0 := r.now("h:1")
	l1 := r.now("h:1")
	if l0.Proxy == l1.Proxy {
		t.Fatalf("both on proxy %d", l0.Proxy)
	}
	rej, other := l0, l1
	rej.Finish(limits.Rejected)
	if got := r.events(); len(got) != 1 || got[0] != "0 rejected" && got[0] != "1 rejected" {
		t.Fatalf("events %v, want one rejected", got)
	}
	if r.ask("next", limits.Request{Host: "h:1"}) {
		t.Fatal("granted while the only proxy left is busy")
	}
	other.Finish(limits.Success)
	if got := r.settle(); len(got) != 1 || r.asks["next"].l.Proxy != other.Proxy {
		t.Fatalf("granted %v on %d, want next on %d", got, r.asks["next"].l.Proxy, other.Proxy)
	}
	r.asks["next"].l.Finish(limits.Success)
	// Hours later, the rejected proxy is still out.
	r.clock.Advance(time.Hour)
	for range 3 {
		l := r.now("h:1")
		if l.Proxy == rej.Proxy {
			t.Fatalf("rejected proxy %d granted again", rej.Proxy)
		}
		l.Finish(limits.Success)
	}
}

// TestAllRejectedStops: once every proxy is rejected, waiters and later
// asks fail at once with a *PoolError, whatever PoolWait is.
func TestAllRejectedStops(t *testing.T) {
	for _, wait := range []time.Duration{0, time.Hour} {
		r := poolRun(t, 2, time.Second, wait)
		a, b := r.now("h:1"), r.now("h:1")
		if r.ask("waiting", limits.Request{Host: "h:1"}) {
			t.Fatal("granted past capacity")
		}
		a.Finish(limits.Rejected) // its slot is free, but it is out
		if n := limits.Waiting(r.s); n != 1 {
			t.Fatalf("%d waiting, want 1: a rejected proxy takes nothing", n)
		}
		b.Finish(limits.Rejected)
		got := r.waitFor("waiting")
		var pe *limits.PoolError
		if !errors.As(got.err, &pe) || !errors.Is(got.err, limits.ErrNoUsableProxy) {
			t.Fatalf("waiter: %v, want a PoolError", got.err)
		}
		if pe.Error() != "no usable proxy: 2 of 2 rejected" {
			t.Errorf("message %q", pe.Error())
		}
		if _, err := tryAcquire(r.s); !errors.Is(err, limits.ErrNoUsableProxy) {
			t.Errorf("a later Acquire: %v", err)
		}
	}
}

// TestPoolWait: with every proxy benched (or probing and failing) the pool
// cannot serve once PoolWait has passed since the last one was healthy.
func TestPoolWait(t *testing.T) {
	const cool, wait = time.Second, 2500 * time.Millisecond
	r := poolRun(t, 2, cool, wait)
	a, b := r.now("h:1"), r.now("h:1")
	a.Finish(limits.ProxyFault) // t=0: benched for 1s
	b.Finish(limits.ProxyFault) // t=0: benched for 1s; none is healthy from now
	if r.ask("w", limits.Request{Host: "h:1"}) {
		t.Fatal("granted while every proxy is benched")
	}
	r.clock.Advance(cool) // t=1s: both probe, and both probes fail: benched until 3s
	r.waitFor("w").l.Finish(limits.ProxyFault)
	r.now("h:1").Finish(limits.ProxyFault)
	if r.ask("w2", limits.Request{Host: "h:1"}) {
		t.Fatal("granted while every proxy is benched again")
	}
	r.clock.Advance(wait - cool - time.Millisecond) // just before 2.5s: still waiting
	if n := limits.Waiting(r.s); n != 1 {
		t.Fatalf("%d waiting just before the pool wait ends, want 1", n)
	}
	r.clock.Advance(time.Millisecond) // 2.5s: the pool cannot serve
	got := r.waitFor("w2")
	var pe *limits.PoolError
	if !errors.As(got.err, &pe) || pe.Benched != 2 || pe.Total != 2 || pe.For != wait {
		t.Fatalf("err %v (%+v), want 2 of 2 benched for %s", got.err, pe, wait)
	}
	if got, want := pe.Error(), "no usable proxy: 2 of 2 benched for 2.5s"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

// TestPoolWaitStartsOver: a proxy that is healthy again before PoolWait
// ends the wait; the next time the pool goes down, the wait starts anew.
func TestPoolWaitStartsOver(t *testing.T) {
	const cool, wait = time.Second, 3 * time.Second
	r := poolRun(t, 1, cool, wait)
	r.now("h:1").Finish(limits.ProxyFault) // t=0: benched for 1s
	r.clock.Advance(cool)
	r.now("h:1").Finish(limits.Success)    // t=1s: the probe succeeds
	r.clock.Advance(2 * time.Second)       // t=3s: healthy for 2s
	r.now("h:1").Finish(limits.ProxyFault) // benched again: the wait starts at 3s
	r.clock.Advance(wait - time.Millisecond)
	if _, err := tryAcquire(r.s); errors.Is(err, limits.ErrNoUsableProxy) {
		t.Fatalf("the pool gave up %s into a new wait of %s", wait-time.Millisecond, wait)
	}
	r.clock.Advance(time.Millisecond)
	if _, err := tryAcquire(r.s); !errors.Is(err, limits.ErrNoUsableProxy) {
		t.Fatalf("after the whole wait: %v, want ErrNoUsableProxy", err)
	}
}

// tryAcquire asks s for a lease and returns what Acquire returned at
// once, or, once it waits in the list, its error when cancelled then. It
// gave Acquire a millisecond of real time before: on a loaded machine the
// context could end before Acquire looked at the pool (it looks at the
// context first), and the pool's error was taken for a deadline.
func tryAcquire(s *limits.Local) (*limits.Lease, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		l   *limits.Lease
		err error
	}
	done := make(chan result, 1)
	before := limits.Waiting(s)
	go func() {
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		done <- result{l, err}
	}()
	for {
		select {
		case r := <-done:
			if r.l != nil {
				r.l.Release()
			}
			return r.l, r.err
		default:
		}
		if limits.Waiting(s) > before {
			cancel() // it waits: what a deadline would have ended
		}
		runtime.Gosched()
	}
}

// TestWaitErrorNamesThePool: a request whose context ends while no proxy is
// healthy says what it waited for.
func TestWaitErrorNamesThePool(t *testing.T) {
	r := poolRun(t, 3, time.Minute, 0)
	var ls []*limits.Lease
	for range 3 {
		ls = append(ls, r.now("h:1"))
	}
	for _, l := range ls {
		l.Finish(limits.ProxyFault)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond) // real time: the fake clock does not move
	defer cancel()
	_, err := r.s.Acquire(ctx, limits.Request{Host: "h:1"})
	var we *limits.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want a WaitError wrapping DeadlineExceeded", err)
	}
	if we.Waiting() != "a usable proxy: 3 of 3 benched" {
		t.Errorf("waiting %q", we.Waiting())
	}
}
