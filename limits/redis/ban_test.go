package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestBansShared: the Banned outcome is learnt as limits.Local learns it,
// across processes: bans by one host never bench a proxy, bans by
// limits.BanHosts distinct hosts in a row do, whichever process saw them.
func TestBansShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	cfg.Health = limits.Health{MaxFailures: 3, Cooldown: 300 * time.Millisecond, MaxCooldown: time.Second}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	ban := func(s *Scheduler, host string) []limits.HealthEvent {
		t.Helper()
		l, err := s.Acquire(ctx, limits.Request{Host: host, Avoid: []int{1}})
		if err != nil || l.Proxy != 0 {
			t.Fatalf("got %v, %v", l, err)
		}
		l.Finish(limits.Banned)
		return s.Events(nil)
	}
	for range 2 * limits.BanHosts {
		if ev := ban(a, "same:1"); len(ev) != 0 {
			t.Fatalf("bans by one host: events %+v", ev)
		}
	}
	for i := range limits.BanHosts - 2 { // with same:1, one short of the row
		if ev := ban([]*Scheduler{a, b}[i%2], fmt.Sprintf("h%d:1", i)); len(ev) != 0 {
			t.Fatalf("ban by host h%d: events %+v", i, ev)
		}
	}
	ev := ban(b, "last:1")
	if len(ev) != 1 || ev[0].State != "benched" || ev[0].Proxy != 0 || ev[0].Cooldown != 300*time.Millisecond {
		t.Fatalf("ban by the %dth distinct host: events %+v, want proxy 0 benched for 300ms", limits.BanHosts, ev)
	}
	checkIdle(t, srv, a, b)
}
