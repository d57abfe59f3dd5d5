package limits_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// TestBansBenchOnlyAcrossHosts: bans by one host never bench a proxy;
// bans by BanHosts distinct hosts in a row do, and a success breaks the
// row.
func TestBansBenchOnlyAcrossHosts(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0, 0}, // proxy 1, never used, keeps a host from banning every proxy
		Health:   limits.Health{MaxFailures: 2, Cooldown: time.Minute, MaxCooldown: time.Hour},
	})
	now := func(host string) *limits.Lease { return r.now(host, 1) } // proxy 0
	ban := func(host string) []string {
		l := now(host)
		l.Finish(limits.Banned)
		return r.events()
	}
	for i := range 3 * limits.BanHosts {
		if ev := ban("same:1"); len(ev) != 0 {
			t.Fatalf("ban %d by one host: events %q, want none", i+1, ev)
		}
	}
	now("ok:1").Finish(limits.PushedBack) // a response that is not a ban breaks the row
	for i := range limits.BanHosts - 1 {
		if ev := ban(fmt.Sprintf("h%d:1", i)); len(ev) != 0 {
			t.Fatalf("ban by host %d: events %q", i, ev)
		}
	}
	l := now("ok:1") // a success breaks the row
	l.Finish(limits.Success)
	for i := range limits.BanHosts - 1 {
		if ev := ban(fmt.Sprintf("g%d:1", i)); len(ev) != 0 {
			t.Fatalf("ban by host g%d after a success: events %q", i, ev)
		}
	}
	// Faults do not break the row, nor repeated bans by one host.
	now("x:1").Finish(limits.ProxyFault)
	if ev := ban("g0:1"); len(ev) != 0 {
		t.Fatalf("repeated ban: events %q", ev)
	}
	if ev := ban("last:1"); len(ev) != 1 || ev[0] != "0 benched 1m0s" {
		t.Fatalf("ban by the %dth distinct host in a row: events %q, want 0 benched 1m0s", limits.BanHosts, ev)
	}
}

// TestBanSlowsThePair: a ban narrows the pair's window as a pushback does.
func TestBanSlowsThePair(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}, {Concurrency: 8}},
		BudgetOf: []int{0, 1},
		Pushback: limits.Pushback{Delay: 100 * time.Millisecond, Max: time.Second},
		Health:   limits.Health{MaxFailures: 1, Cooldown: time.Hour, MaxCooldown: time.Hour},
	})
	// Proxy 1 is benched: every attempt goes to proxy 0, and the host,
	// which never bans proxy 1, never bans every proxy.
	r.now("x:1", 0).Finish(limits.ProxyFault)
	r.play([]step{
		{ask: names("a", 8), host: "ban:1", grant: names("a", 8)},                       // 8 in flight
		{finish: names("a", 1), outcome: limits.Banned},                                 // a ban: the pair may have 4 in flight from now on
		{finish: names("a", 8)[1:], outcome: limits.Success},                            // (begun before it)
		{at: time.Millisecond, ask: names("b", 4), host: "ban:1", grant: names("b", 4)}, // 4 start ...
		{ask: []string{"b5"}, host: "ban:1"},                                            // ... a 5th waits
		{ask: []string{"other"}, host: "other:1", grant: []string{"other"}},             // another host is not held up
		{cancel: []string{"b5"}, finish: []string{"other"}},
	})
}
