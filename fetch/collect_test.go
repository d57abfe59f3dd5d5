package fetch

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// TestCollectorAddsUpAnIdentity: routes of one identity (a Config listing a
// proxy twice) are one proxy in the report, their attempts, bans, phases
// and state changes added up as if they had been one route's, the most in
// flight the larger; a route of another identity stays apart, and building
// the report leaves the routes' own statistics as they were (the same
// report twice; the bins themselves: TestMergeLeavesItsArgument in
// fetch/report).
func TestCollectorAddsUpAnIdentity(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	routes := []route{{index: 0, id: "http://a:1", pool: "p"}, {index: 1, id: "http://b:1"}, {index: 2, id: "http://a:1", pool: "p"},
		{index: 3, id: "http://c:1"}, {index: 4, id: "http://c:1"}}
	c := newCollector(start, 10, 10, routes)
	headers := func(ms float64) *results.PhaseTimes {
		var pt results.PhaseTimes
		pt.SetAt(results.IndexHeaders, ms)
		return &pt
	}
	// Identity c: route 3 with more bins than it keeps in place (12), added
	// up with route 4's one.
	for i := range 12 {
		c.attempt(&routes[3], "t:80", true, 1, 1, headers(float64(10+i)))
	}
	c.attempt(&routes[4], "t:80", true, 1, 1, headers(10))
	c.attempt(&routes[0], "t:80", true, 3, 1, headers(10))
	c.attempt(&routes[2], "t:80", false, 5, 1, headers(30))
	c.attempt(&routes[2], "t:80", true, 1, 1, headers(30))
	c.attempt(&routes[1], "t:80", true, 7, 1, headers(99))
	c.ban(&routes[2], "t:80")
	c.health(&routes[2], limits.HealthEvent{Proxy: 2, At: start.Add(time.Second), State: "benched", Cooldown: time.Second})
	c.health(&routes[0], limits.HealthEvent{Proxy: 0, At: start.Add(2 * time.Second), State: "benched", Cooldown: 2 * time.Second})
	c.health(&routes[2], limits.HealthEvent{Proxy: 2, At: start.Add(3 * time.Second), State: "healthy"})
	c.health(&routes[0], limits.HealthEvent{Proxy: 0, At: start.Add(4 * time.Second), State: "probing"})

	beforeAttempts, beforeHealth := c.byRoute[0].Proxy.Attempts, len(c.byRoute[0].Proxy.Health) // not a copy
	for range 2 {                                                                               // the same report twice
		rep := c.report(5000)
		if len(rep.Proxies) != 3 {
			t.Fatalf("%d proxies in the report, want 3: %v", len(rep.Proxies), rep.Proxies)
		}
		if cr := rep.Proxies["http://c:1"]; cr.Attempts != 13 || cr.PhasesMS["headers"] != (report.Quantiles{P50: 14.98, P95: 20.97}) {
			t.Fatalf("identity c: %+v", *cr)
		}
		a := rep.Proxies["http://a:1"]
		want := report.Proxy{Pool: "p", Attempts: 3, OK: 2, Failed: 1, MaxInFlight: 5, Banned: 1, State: "probing",
			PhasesMS: map[string]report.Quantiles{"headers": {P50: 29.95, P95: 29.95}},
			Health: []report.StateChange{{AtMS: 1000, State: "benched", CooldownMS: 1000}, {AtMS: 2000, State: "benched", CooldownMS: 2000},
				{AtMS: 3000, State: "healthy"}, {AtMS: 4000, State: "probing"}}}
		if !reflect.DeepEqual(*a, want) {
			t.Fatalf("identity a:\n got %+v\nwant %+v", *a, want)
		}
		if b := rep.Proxies["http://b:1"]; b.Attempts != 1 || b.MaxInFlight != 7 || b.Pool != "" || b.State != "" {
			t.Fatalf("identity b: %+v", *b)
		}
	}
	if after := c.byRoute[0]; after.Proxy.Attempts != beforeAttempts || len(after.Proxy.Health) != beforeHealth {
		t.Fatalf("route 0's own statistics changed: %+v, was %d attempts, %d state changes", after.Proxy, beforeAttempts, beforeHealth)
	}
}

// TestCollectorStatePastTheCap: an identity's state is that of its last
// change, also when that change came after its route kept
// maxStateChanges of them.
func TestCollectorStatePastTheCap(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	routes := []route{{index: 0, id: "http://a:1"}, {index: 1, id: "http://a:1"}}
	c := newCollector(start, 10, 10, routes)
	for i := 1; i <= report.MaxStateChanges+1; i++ {
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

// TestCollectorListsTheBusiestProxies: a report lists at most its number
// of proxies, the busiest by attempts (ties by identity), with their exact
// counts; the others are summed up in ProxiesOther, by pool too, so that
// listed and other add up to every attempt and ban. Routes that never had
// an attempt or a change of health are in neither.
func TestCollectorListsTheBusiestProxies(t *testing.T) {
	// Route i has i+1 attempts, the last of them a ban when i is odd; i
	// is in pool "even" or "odd", or in none when i%5 == 0. Route 30 is
	// never used.
	const used = 30
	routes := make([]route, used+1)
	for i := range routes {
		routes[i] = route{index: int32(i), id: fmt.Sprintf("http://p%02d:1", i)}
		switch {
		case i%5 == 0:
		case i%2 == 0:
			routes[i].pool = "even"
		default:
			routes[i].pool = "odd"
		}
	}
	for _, tt := range []struct {
		name      string
		listed    int
		wantPools bool // Pools in ProxiesOther
	}{
		{"all", used + 5, false},
		{"exactly all", used, false},
		{"five", 5, true},
		{"two", 2, true},
		{"one", 1, true},
		{"none", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCollector(time.Unix(1_700_000_000, 0), 10, tt.listed, routes)
			var total, bans int
			for i := range used {
				for k := range i + 1 {
					c.attempt(&routes[i], "t:80", k%3 != 0, 1, 1, &results.PhaseTimes{})
					total++
				}
				if i%2 == 1 {
					c.ban(&routes[i], "t:80")
					bans++
				}
			}
			c.health(&routes[0], limits.HealthEvent{At: time.Unix(1_700_000_001, 0), State: "benched", Cooldown: time.Second})
			rep := c.report(1)
			if len(rep.Proxies) != min(tt.listed, used) {
				t.Fatalf("%d proxies listed, want %d", len(rep.Proxies), min(tt.listed, used))
			}
			for i := used - len(rep.Proxies); i < used; i++ { // the busiest
				p := rep.Proxies[routes[i].id]
				if p == nil || p.Attempts != i+1 || p.Missed != 0 || p.Pool != routes[i].pool {
					t.Fatalf("%s = %+v, want listed with %d attempts, pool %q", routes[i].id, p, i+1, routes[i].pool)
				}
			}
			other := rep.ProxiesOther
			if tt.listed >= used {
				if other != nil {
					t.Fatalf("proxies_other = %+v, want none: every proxy is listed", *other)
				}
				if p := rep.Proxies[routes[0].id]; p.State != "benched" {
					t.Fatalf("%s: state %q, want benched", routes[0].id, p.State)
				}
				return
			}
			if other == nil {
				t.Fatal("no proxies_other")
			}
			if want := used - tt.listed; other.Proxies != want {
				t.Errorf("proxies_other.proxies = %d, want %d", other.Proxies, want)
			}
			if want := map[string]int{"benched": 1}; !reflect.DeepEqual(other.States, want) {
				t.Errorf("proxies_other.states = %v, want %v: route 0, not listed, was benched", other.States, want)
			}
			sum := other.Counts
			for _, p := range rep.Proxies {
				addCounts(&sum, p.Attempts, p.OK, p.Failed, p.Banned)
			}
			if sum.Attempts != total || sum.OK+sum.Failed != total || sum.Banned != bans {
				t.Errorf("listed and other add up to %+v, want %d attempts, %d bans", sum, total, bans)
			}
			if (other.Pools != nil) != tt.wantPools || other.PoolsDropped {
				t.Fatalf("proxies_other.pools = %v (dropped %v), want pools: %v", other.Pools, other.PoolsDropped, tt.wantPools)
			}
			if !tt.wantPools {
				return
			}
			want := map[string]*report.Counts{}
			for i := range used - tt.listed {
				pool := routes[i].pool
				if pool == "" {
					continue
				}
				if want[pool] == nil {
					want[pool] = &report.Counts{}
				}
				ok := i + 1 - (i/3 + 1) // k in 0..i with k%3 != 0
				addCounts(want[pool], i+1, ok, i+1-ok, i%2)
			}
			if !reflect.DeepEqual(other.Pools, want) {
				t.Errorf("proxies_other.pools:\n got %s\nwant %s", fmtCounts(other.Pools), fmtCounts(want))
			}
		})
	}
}

// addCounts adds attempts, ok, failed and banned to c's counts.
func addCounts(c *report.Counts, attempts, ok, failed, banned int) {
	c.Attempts += attempts
	c.OK += ok
	c.Failed += failed
	c.Banned += banned
}

func fmtCounts(m map[string]*report.Counts) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s:%+v ", k, *m[k])
	}
	return b.String()
}

// TestCollectorBoundsHealth: proxies that go on changing state keep at
// most maxStateChanges changes each and maxHealthKept in all, the first
// ones; the others are counted in HealthDropped, and each proxy's state is
// still its last.
func TestCollectorBoundsHealth(t *testing.T) {
	const proxies, changes = 150, 1200 // 180,000 changes: over both bounds
	routes := make([]route, proxies)
	for i := range routes {
		routes[i] = route{index: int32(i), id: fmt.Sprintf("http://p%03d:1", i)}
	}
	start := time.Unix(1_700_000_000, 0)
	c := newCollector(start, 10, proxies, routes)
	states := []string{"benched", "probing", "healthy"}
	for k := range changes {
		for i := range routes {
			c.health(&routes[i], limits.HealthEvent{Proxy: i, At: start.Add(time.Duration(k) * time.Millisecond), State: states[(k+i)%3]})
		}
	}
	rep := c.report(1)
	kept := 0
	for i := range routes {
		rt := &routes[i]
		p := rep.Proxies[rt.id]
		if len(p.Health) > report.MaxStateChanges || len(p.Health)+p.HealthDropped != changes {
			t.Fatalf("%s: %d changes kept and %d dropped, want at most %d kept and %d in all", rt.id, len(p.Health), p.HealthDropped, report.MaxStateChanges, changes)
		}
		if want := states[(changes-1+i)%3]; p.State != want {
			t.Fatalf("%s: state %q, want its last, %q", rt.id, p.State, want)
		}
		for k, sc := range p.Health { // the first ones
			if sc.AtMS != float64(k) {
				t.Fatalf("%s: change %d at %v ms, want %d", rt.id, k, sc.AtMS, k)
			}
		}
		kept += len(p.Health)
	}
	if kept != maxHealthKept {
		t.Errorf("%d changes kept in all, want %d", kept, maxHealthKept)
	}
}

// TestStatsSmall: what the engine keeps for each route stays as small as
// README says (104 bytes on a 64-bit machine); see also
// TestProxyStatsSmall in fetch/report.
func TestStatsSmall(t *testing.T) {
	if n := unsafe.Sizeof(route{}); n > 104 {
		t.Errorf("route is %d bytes, want at most 104", n)
	}
}
