package limits_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// TestHostBannedByEveryProxy: a host fails as a whole only once every
// proxy not rejected has banned it with no success through it since: its
// waiting requests fail at once with a *HostBannedError naming it and how
// many proxies it banned, later requests too, and other hosts go on.
func TestHostBannedByEveryProxy(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 1}, {Concurrency: 1}},
		BudgetOf: []int{0, 1, 2},
	})
	l0, l1, l2 := r.now("a:1"), r.now("a:1"), r.now("a:1")
	if l0.Proxy+l1.Proxy+l2.Proxy != 3 || l0.Proxy == l1.Proxy {
		t.Fatalf("proxies %d %d %d, want 0 1 2 in some order", l0.Proxy, l1.Proxy, l2.Proxy)
	}
	p0, p1 := l0.Proxy, l1.Proxy
	l0.Finish(limits.Banned)
	l1.Finish(limits.Banned) // 2 of 3
	m := r.now("a:1", p1)    // p0: a success through it lifts its ban
	if m.Proxy != p0 {
		t.Fatalf("went to proxy %d, want %d", m.Proxy, p0)
	}
	m.Finish(limits.Success)
	n0, n1 := r.now("a:1", p1), r.now("a:1", p0) // every proxy busy now
	r.ask("w", limits.Request{Host: "a:1"})
	r.ask("v", limits.Request{Host: "b:1"})
	l2.Finish(limits.Banned) // 2 of 3 (p1 and p2): w, first in line, gets p2
	if got := r.settle(); len(got) != 1 || got[0] != "w" {
		t.Fatalf("granted %q, want w", got)
	}
	r.ask("u", limits.Request{Host: "a:1"}) // waits
	n0.Finish(limits.Banned)                // 3 of 3: u fails, v gets p0
	done := map[string]*ask{}
	for range 2 {
		a := <-r.done
		done[a.name] = a
	}
	r.order = nil
	var hb *limits.HostBannedError
	if u := done["u"]; u == nil || !errors.As(u.err, &hb) || hb.Host != "a:1" || hb.Proxies != 3 || !errors.Is(u.err, limits.ErrHostBanned) {
		t.Fatalf("waiting u: %+v, want a HostBannedError of a:1 by 3", u)
	}
	if v := done["v"]; v == nil || v.err != nil {
		t.Fatalf("v, for another host: %+v, want a grant", v)
	}
	if _, err := r.s.Acquire(context.Background(), limits.Request{Host: "a:1"}); !errors.As(err, &hb) {
		t.Fatalf("a later request for a:1: %v, want a HostBannedError", err)
	}
	done["v"].l.Release()
	n1.Release()
	r.asks["w"].l.Release()
	r.now("b:1").Release()
}

// TestHostBannedByEveryProxyLeft: a proxy that leaves the run (rejected)
// no longer counts among those that could serve a host.
func TestHostBannedByEveryProxyLeft(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
	})
	a, b := r.now("a:1"), r.now("b:1")
	a.Finish(limits.Banned) // 1 of 2
	r.now("a:1", a.Proxy).Release()
	b.Finish(limits.Rejected) // 1 of 1 left
	_, err := r.s.Acquire(context.Background(), limits.Request{Host: "a:1"})
	var hb *limits.HostBannedError
	if !errors.As(err, &hb) || hb.Proxies != 1 {
		t.Fatalf("err %v, want a HostBannedError by 1", err)
	}
}

// TestRetryAfterHoldsTheHost: a Retry-After from one host through one
// proxy holds no one else; through a second one within a minute, every
// proxy's attempts to that host wait until the latest one's time, at most
// RetryAfterMax; other hosts go on; two answers more than a minute apart
// hold nothing.
func TestRetryAfterHoldsTheHost(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 2}, {Concurrency: 2}},
		BudgetOf: []int{0, 1},
		Pushback: limits.Pushback{RetryAfterMax: 5 * time.Minute},
	})
	told := func(avoid int, ra time.Duration) int {
		l := r.now("a:1", avoid)
		l.RetryAfter = ra
		l.Finish(limits.PushedBack)
		return l.Proxy
	}
	p := told(1, 30*time.Second)
	if p != 0 {
		t.Fatalf("went to proxy %d, want 0", p)
	}
	r.now("a:1").Release() // one proxy told: no hold
	r.clock.Advance(10 * time.Second)
	if q := told(p, 20*time.Second); q == p {
		t.Fatalf("the second Retry-After went through the same proxy %d", q)
	}
	r.now("b:1").Release() // another host goes on
	l, waited := r.soon("a:1")
	l.Release()
	if waited != 20*time.Second {
		t.Fatalf("waited %s, want 20s (the latest Retry-After)", waited)
	}

	// Capped by RetryAfterMax.
	r.clock.Advance(limits.RetryAfterWindow) // the answers so far are old
	told(1, time.Hour)
	told(0, time.Hour)
	l, waited = r.soon("a:1")
	l.Release()
	if waited != 5*time.Minute {
		t.Fatalf("waited %s, want 5m0s (RetryAfterMax)", waited)
	}

	// More than a minute apart: no hold.
	told(1, time.Hour)
	r.clock.Advance(limits.RetryAfterWindow)
	told(0, time.Hour)
	r.now("a:1").Release()
}

// waitingFor starts an Acquire for host on s, cancels it once it waits, and
// returns what its WaitError says it waited for.
func waitingFor(t *testing.T, s *limits.Local, host string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	before := limits.Waiting(s)
	go func() {
		l, err := s.Acquire(ctx, limits.Request{Host: host})
		l.Release()
		errc <- err
	}()
	for limits.Waiting(s) == before {
		select {
		case err := <-errc:
			t.Fatalf("Acquire for %s did not wait: %v", host, err)
		default:
		}
		runtime.Gosched()
	}
	cancel()
	err := <-errc
	var we *limits.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want a WaitError wrapping context.Canceled", err)
	}
	return we.Waiting()
}

// TestWaitErrorSaysWhatItWaitedFor: a request whose wait ends before a
// grant names the cause, whichever it is.
func TestWaitErrorSaysWhatItWaitedFor(t *testing.T) {
	perMinute := limits.Rate{N: 1, Per: time.Minute}
	two := func(cfg limits.Config) limits.Config {
		cfg.Budgets = []limits.Spec{{Concurrency: 4}, {Concurrency: 1}}
		cfg.BudgetOf = []int{0, 1}
		return cfg
	}
	for _, tc := range []struct {
		name  string
		cfg   limits.Config
		setup func(r *run) // leaves a request for a:1 waiting
		want  string
	}{
		{"host concurrency", limits.Config{Host: limits.Spec{Concurrency: 1}}, func(r *run) { r.now("a:1") },
			"the host's concurrency (1 in flight to a:1)"},
		{"host rate", limits.Config{Host: limits.Spec{Rate: perMinute, Burst: 1}}, func(r *run) { r.now("a:1").Release() },
			"the host's rate (a:1)"},
		{"global rate", limits.Config{Global: perMinute}, func(r *run) { r.now("b:1").Release() },
			"the global rate"},
		{"proxy concurrency", limits.Config{Budgets: []limits.Spec{{Concurrency: 1}}, BudgetOf: []int{0}},
			func(r *run) { r.now("b:1") }, "a proxy's or pool's concurrency (every one full)"},
		{"proxy rate", limits.Config{Budgets: []limits.Spec{{Concurrency: 4, Rate: perMinute, Burst: 1}}, BudgetOf: []int{0}},
			func(r *run) { r.now("b:1").Release() }, "a proxy's or pool's rate"},
		{"benched", limits.Config{Health: limits.Health{MaxFailures: 1, Cooldown: time.Minute, MaxCooldown: time.Hour}},
			func(r *run) { r.now("b:1").Finish(limits.ProxyFault) }, "a usable proxy: 1 of 1 benched"},
		{"pushback", limits.Config{Pushback: limits.Pushback{Delay: time.Second, Max: time.Minute}}, func(r *run) {
			r.now("a:1").Finish(limits.PushedBack) // the window is 1 now
			r.now("a:1")                           // and full
		}, "pushback from a:1 (1 proxies slowed, 0 of them banned)"},
		{"bans", two(limits.Config{Pushback: limits.Pushback{Delay: time.Second, Max: time.Minute}}), func(r *run) {
			r.now("b:1", 0)                    // proxy 1 is full
			r.now("a:1").Finish(limits.Banned) // proxy 0 is banned: its window is 1
			r.now("a:1")                       // and full
		}, "bans by a:1 (1 of 2 proxies banned it and are slowed)"},
		{"retry-after", two(limits.Config{Pushback: limits.Pushback{RetryAfterMax: time.Minute}}), func(r *run) {
			for p := range 2 {
				l := r.now("a:1", 1-p)
				l.RetryAfter = 30 * time.Second
				l.Finish(limits.PushedBack)
			}
		}, "a Retry-After from a:1 held every proxy (30s more)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Budgets == nil {
				tc.cfg.Budgets, tc.cfg.BudgetOf = []limits.Spec{{Concurrency: 4}}, []int{0}
			}
			r := newRun(t, tc.cfg)
			tc.setup(r)
			if got := waitingFor(t, r.s, "a:1"); got != tc.want {
				t.Errorf("waiting for %q, want %q", got, tc.want)
			}
		})
	}
}
