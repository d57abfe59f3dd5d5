package fetch

import (
	"sync"
	"time"

	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// collector builds the Report as attempts and records finish. It is safe
// for concurrent use.
type collector struct {
	mu      sync.Mutex
	rep     report.Report
	routes  []route              // the engine's, for their identities
	byRoute []*report.ProxyStats // by route index: found without hashing the identity
	listed  int                  // proxies the report lists (Config.ReportProxies)
	kept    int                  // state changes kept in all the proxies' Health (see maxHealthKept)
	hosts   *report.HostTable
	start   time.Time
	obs     Observer // Config.Observer: told outside mu
}

// stats returns rt's statistics, made when they are first needed: a pool
// of 100,000 sessions of which a run uses a few costs a few, and a route's
// first attempt costs one allocation, not a look-up of its identity in a
// map that grows with the pool. Routes of the same identity (an Engine's
// Config may list a proxy twice) are added up by report. Call with c.mu
// held.
func (c *collector) stats(rt *route) *report.ProxyStats {
	ps := c.byRoute[rt.index]
	if ps == nil {
		ps = &report.ProxyStats{Proxy: report.Proxy{Pool: rt.pool}} // PhasesMS: made by report
		c.byRoute[rt.index] = ps
	}
	return ps
}

// health notes a proxy's change of state, and tells the observer, if
// any (in order: the engine calls it holding eventsMu).
func (c *collector) health(rt *route, ev limits.HealthEvent) {
	sc := report.StateChange{AtMS: millis(ev.At.Sub(c.start)), State: ev.State}
	if ev.Cooldown > 0 {
		sc.CooldownMS = millis(ev.Cooldown)
	}
	c.mu.Lock()
	if c.stats(rt).Change(sc, c.kept < maxHealthKept) {
		c.kept++
	}
	c.mu.Unlock()
	if c.obs != nil {
		c.obs.Health(ev)
	}
}

// maxHealthKept bounds the state changes kept for all the proxies
// together, the first ones (each proxy keeps at most its own share, see
// report's bound): a pool of 100,000 proxies that go on failing and coming
// back keeps 3.2 MB of them, not gigabytes. The others are counted
// (report.Proxy.HealthDropped).
const maxHealthKept = 100_000

func newCollector(start time.Time, reportHosts, reportProxies int, routes []route) *collector {
	c := &collector{
		start:  start,
		listed: reportProxies,
		hosts:  report.NewHostTable(reportHosts),
		rep: report.Report{
			ByKind:  map[string]int{},
			ByPhase: map[string]int{},
		},
		routes:  routes,
		byRoute: make([]*report.ProxyStats, len(routes)),
	}
	return c
}

// attempt counts one finished attempt.
func (c *collector) attempt(rt *route, host string, ok bool, proxyInFlight, hostInFlight int, phases *results.PhaseTimes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hosts.Add(host, ok, hostInFlight)
	c.stats(rt).Attempt(ok, proxyInFlight, phases)
}

// observe tells the observer, if any, of the attempt res on rt (after
// attempt has counted it). Without one it is a nil check.
func (c *collector) observe(rt *route, res *result) {
	if c.obs != nil {
		observe(c.obs, rt, res)
	}
}

// ban counts an attempt whose response was a ban, for its proxy and its
// host (after attempt has counted it).
func (c *collector) ban(rt *route, host string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats(rt).Proxy.Banned++
	c.hosts.Ban(host)
}

// record counts one record.
func (c *collector) record(r *results.Record) {
	if c.obs != nil {
		c.obs.Record(r)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Jobs++
	if r.OK {
		c.rep.OK++
		return
	}
	c.rep.Failed++
	if r.Error != nil {
		c.rep.ByKind[r.Error.Kind]++
		c.rep.ByPhase[r.Error.Phase]++
	}
}

// report returns the finished Report.
func (c *collector) report(elapsedMS float64) *report.Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep := c.rep
	rep.ElapsedMS = elapsedMS
	rep.Hosts, rep.HostsOther = c.hosts.Report()
	// A route's statistics, or for an identity of several routes, theirs
	// added up in a copy (the routes' own stay as they are).
	used := 0
	for _, ps := range c.byRoute {
		if ps != nil {
			used++
		}
	}
	byID := make(map[string]*report.ProxyStats, used)
	var summed map[string]bool // the identities whose statistics in byID are a copy made here
	for i, ps := range c.byRoute {
		if ps == nil {
			continue
		}
		id := c.routes[i].id
		sum, ok := byID[id]
		switch {
		case !ok:
			byID[id] = ps
			continue
		case !summed[id]:
			first := sum
			sum = &report.ProxyStats{Proxy: report.Proxy{Pool: first.Proxy.Pool}}
			sum.Merge(first)
			byID[id] = sum
			if summed == nil {
				summed = map[string]bool{}
			}
			summed[id] = true
		}
		sum.Merge(ps)
	}
	rep.Proxies, rep.ProxiesOther = report.ListProxies(byID, c.listed)
	return &rep
}
