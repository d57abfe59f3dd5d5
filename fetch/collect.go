package fetch

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// collector builds the Report as attempts and records finish. It is safe
// for concurrent use.
type collector struct {
	mu      sync.Mutex
	rep     Report
	byID    map[string]*proxyStats // by proxy identity
	byRoute []*proxyStats          // the same by route index, found without hashing the identity
	hosts   *hostTable
	start   time.Time
}

// proxyStats is what the collector keeps of one proxy: its part of the
// report, and the durations of its attempts' phases.
type proxyStats struct {
	rep    *ProxyReport
	phases [numPhases]histogram // by phase index; empty until one happens
}

// stats returns rt's statistics, made when they are first needed: a pool
// of 100,000 sessions of which a run uses a few costs a few. Routes of the
// same identity share them. Call with c.mu held.
func (c *collector) stats(rt *route) *proxyStats {
	if ps := c.byRoute[rt.index]; ps != nil {
		return ps
	}
	ps := c.byID[rt.id]
	if ps == nil {
		ps = &proxyStats{rep: &ProxyReport{Pool: rt.pool}} // PhasesMS: made by report
		c.byID[rt.id] = ps
		c.rep.Proxies[rt.id] = ps.rep
	}
	c.byRoute[rt.index] = ps
	return ps
}

// proxy returns rt's part of the report. Call with c.mu held.
func (c *collector) proxy(rt *route) *ProxyReport { return c.stats(rt).rep }

// health notes a proxy's change of state.
func (c *collector) health(rt *route, ev limits.HealthEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proxy(rt)
	sc := StateChange{AtMS: millis(ev.At.Sub(c.start)), State: ev.State}
	if ev.Cooldown > 0 {
		sc.CooldownMS = millis(ev.Cooldown)
	}
	if len(p.Health) < maxStateChanges {
		p.Health = append(p.Health, sc)
	}
	p.State = ev.State
}

// maxStateChanges bounds the state changes kept per proxy in a report.
const maxStateChanges = 1000

func newCollector(start time.Time, reportHosts, routes int) *collector {
	c := &collector{
		start: start,
		hosts: newHostTable(reportHosts),
		rep: Report{
			ByKind:  map[string]int{},
			ByPhase: map[string]int{},
			Proxies: map[string]*ProxyReport{},
		},
		byID:    map[string]*proxyStats{},
		byRoute: make([]*proxyStats, routes),
	}
	return c
}

// attempt counts one finished attempt.
func (c *collector) attempt(rt *route, host string, ok bool, proxyInFlight, hostInFlight int, phases *PhaseTimes) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := c.stats(rt)
	p := ps.rep
	c.hosts.add(host, ok, hostInFlight)
	p.Attempts++
	if ok {
		p.OK++
	} else {
		p.Failed++
	}
	p.MaxInFlight = max(p.MaxInFlight, proxyInFlight)
	for i, seen := range phases.seen {
		if !seen {
			continue
		}
		ps.phases[i].add(phases.ms[i])
	}
}

// ban counts an attempt whose response was a ban, for its proxy and its
// host (after attempt has counted it).
func (c *collector) ban(rt *route, host string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.proxy(rt).Banned++
	c.hosts.ban(host)
}

// record counts one record.
func (c *collector) record(r *Record) {
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
func (c *collector) report(elapsedMS float64) *Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	rep := c.rep
	rep.ElapsedMS = elapsedMS
	rep.Hosts, rep.HostsOther = c.hosts.report()
	for _, ps := range c.byID {
		if ps.rep.PhasesMS == nil {
			ps.rep.PhasesMS = map[string]Quantiles{}
		}
		for i := range ps.phases {
			if hg := &ps.phases[i]; hg.n > 0 {
				ps.rep.PhasesMS[Phases[i]] = Quantiles{P50: hg.quantile(0.50), P95: hg.quantile(0.95)}
			}
		}
	}
	return &rep
}

// histogram keeps durations in logarithmic buckets about 2% wide, so its
// memory does not grow with the number of attempts and its quantiles are
// within 2% of the exact ones. The buckets used are kept in order in a
// slice: a proxy of a large pool has a handful, a busy one a few hundred,
// and none more than the 1,400 or so between 1 µs and a day. A histogram
// is used in place (its first bucket is inside it): never copied.
type histogram struct {
	bins  []histBin // by bucket, ascending; in first until there are more
	n     int64
	first [1]histBin
}

type histBin struct {
	bucket int32
	count  int64
}

const (
	histBase  = 1.02
	histFloor = 0.001 // ms; anything smaller counts as zero
)

var logHistBase = math.Log(histBase)

// histBucket is the bucket of ms: -1 below histFloor, else the power of
// histBase that ms/histFloor reaches.
func histBucket(ms float64) int32 {
	if ms < histFloor {
		return -1
	}
	return int32(math.Log(ms/histFloor) / logHistBase)
}

func (h *histogram) add(ms float64) {
	b := histBucket(ms)
	if h.bins == nil {
		h.bins = h.first[:0] // a proxy of a large pool often has one bucket: no allocation
	}
	i, j := 0, len(h.bins) // the first bin of bucket b or above is in [i, j]
	for i < j {
		m := int(uint(i+j) >> 1)
		if h.bins[m].bucket < b {
			i = m + 1
		} else {
			j = m
		}
	}
	if i < len(h.bins) && h.bins[i].bucket == b {
		h.bins[i].count++
	} else {
		h.bins = slices.Insert(h.bins, i, histBin{bucket: b, count: 1})
	}
	h.n++
}

// quantile returns the q-quantile (0 < q <= 1), as the middle of its bucket,
// rounded to a hundredth of a millisecond.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for _, bin := range h.bins {
		seen += bin.count
		if seen >= rank {
			if bin.bucket < 0 {
				return 0
			}
			v := histFloor * math.Pow(histBase, float64(bin.bucket)+0.5)
			return math.Round(v*100) / 100
		}
	}
	return 0
}
