package fetch

import (
	"reflect"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// TestCollectorAddsUpAnIdentity: routes of one identity (a Config listing a
// proxy twice) are one proxy in the report, their attempts, bans, phases
// and state changes added up as if they had been one route's, the most in
// flight the larger; a route of another identity stays apart, and building
// the report leaves the routes' own statistics as they were.
func TestCollectorAddsUpAnIdentity(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	routes := []route{{index: 0, id: "http://a:1", pool: "p"}, {index: 1, id: "http://b:1"}, {index: 2, id: "http://a:1", pool: "p"}}
	c := newCollector(start, 10, routes)
	headers := func(ms float64) *PhaseTimes {
		var pt PhaseTimes
		pt.ms[pHeaders], pt.seen[pHeaders] = ms, true
		return &pt
	}
	c.attempt(&routes[0], "t:80", true, 3, 1, headers(10))
	c.attempt(&routes[2], "t:80", false, 5, 1, headers(30))
	c.attempt(&routes[2], "t:80", true, 1, 1, headers(30))
	c.attempt(&routes[1], "t:80", true, 7, 1, headers(99))
	c.ban(&routes[2], "t:80")
	c.health(&routes[2], limits.HealthEvent{Proxy: 2, At: start.Add(time.Second), State: "benched", Cooldown: time.Second})
	c.health(&routes[0], limits.HealthEvent{Proxy: 0, At: start.Add(2 * time.Second), State: "benched", Cooldown: 2 * time.Second})
	c.health(&routes[2], limits.HealthEvent{Proxy: 2, At: start.Add(3 * time.Second), State: "healthy"})
	c.health(&routes[0], limits.HealthEvent{Proxy: 0, At: start.Add(4 * time.Second), State: "probing"})

	before := *c.byRoute[0]
	for range 2 { // the same report twice
		rep := c.report(5000)
		if len(rep.Proxies) != 2 {
			t.Fatalf("%d proxies in the report, want 2: %v", len(rep.Proxies), rep.Proxies)
		}
		a := rep.Proxies["http://a:1"]
		want := ProxyReport{Pool: "p", Attempts: 3, OK: 2, Failed: 1, MaxInFlight: 5, Banned: 1, State: "probing",
			PhasesMS: map[string]Quantiles{"headers": {P50: 29.95, P95: 29.95}},
			Health: []StateChange{{AtMS: 1000, State: "benched", CooldownMS: 1000}, {AtMS: 2000, State: "benched", CooldownMS: 2000},
				{AtMS: 3000, State: "healthy"}, {AtMS: 4000, State: "probing"}}}
		if !reflect.DeepEqual(*a, want) {
			t.Fatalf("identity a:\n got %+v\nwant %+v", *a, want)
		}
		if b := rep.Proxies["http://b:1"]; b.Attempts != 1 || b.MaxInFlight != 7 || b.Pool != "" || b.State != "" {
			t.Fatalf("identity b: %+v", *b)
		}
	}
	if after := c.byRoute[0]; after.rep.Attempts != before.rep.Attempts || len(after.rep.Health) != len(before.rep.Health) || after.phases[pHeaders].n != 1 {
		t.Fatalf("route 0's own statistics changed: %+v, was %+v", after.rep, before.rep)
	}
}

// TestCollectorStatePastTheCap: an identity's state is that of its last
// change, also when that change came after its route kept
// maxStateChanges of them.
func TestCollectorStatePastTheCap(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	routes := []route{{index: 0, id: "http://a:1"}, {index: 1, id: "http://a:1"}}
	c := newCollector(start, 10, routes)
	for i := 1; i <= maxStateChanges+1; i++ {
		state := "benched"
		if i%2 == 1 {
			state = "probing"
		}
		c.health(&routes[0], limits.HealthEvent{At: start.Add(time.Duration(i) * time.Second), State: state})
	}
	// After the last change route 0 kept (at 1000 s), before its last one (1001 s).
	c.health(&routes[1], limits.HealthEvent{Proxy: 1, At: start.Add(1000500 * time.Millisecond), State: "healthy"})
	if got := c.report(0).Proxies["http://a:1"].State; got != "probing" {
		t.Errorf("state %q, want probing: the last change, at 1001 s", got)
	}
}
