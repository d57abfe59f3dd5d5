package metrics

import (
	"cmp"
	"slices"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/prometheus/client_golang/prometheus"
)

// outcomes are the outcome label's values, by limits.Outcome.
var outcomes = [...]string{
	limits.Neutral:    "neutral",
	limits.Success:    "success",
	limits.ProxyFault: "proxy_fault",
	limits.PushedBack: "pushed_back",
	limits.Rejected:   "rejected",
	limits.Banned:     "banned",
}

const numOutcomes = len(outcomes)

// outcomeIndex is o's index in outcomes; one it does not know is neutral.
func outcomeIndex(o limits.Outcome) int {
	if o < 0 || int(o) >= numOutcomes {
		return int(limits.Neutral)
	}
	return int(o)
}

// kinds are the kind label's values: "" for no error, then every kind of
// package results. A kind it does not know counts as other.
var kinds = [...]string{
	"",
	results.KindInvalid, results.KindTimeout, results.KindDeadline, results.KindDNS,
	results.KindRefused, results.KindReset, results.KindTLS, results.KindProxy,
	results.KindStatus, results.KindTooLarge, results.KindRedirect, results.KindCancelled,
	results.KindCoordinator, results.KindBanned, results.KindSkipped, results.KindOther,
}

const numKinds = len(kinds)

// kindIndex is k's index in kinds: a switch, not a map, so that finding it
// hashes nothing.
func kindIndex(k string) int {
	switch k {
	case "":
		return 0
	case results.KindInvalid:
		return 1
	case results.KindTimeout:
		return 2
	case results.KindDeadline:
		return 3
	case results.KindDNS:
		return 4
	case results.KindRefused:
		return 5
	case results.KindReset:
		return 6
	case results.KindTLS:
		return 7
	case results.KindProxy:
		return 8
	case results.KindStatus:
		return 9
	case results.KindTooLarge:
		return 10
	case results.KindRedirect:
		return 11
	case results.KindCancelled:
		return 12
	case results.KindCoordinator:
		return 13
	case results.KindBanned:
		return 14
	case results.KindSkipped:
		return 15
	}
	return 16 // other
}

// The phase label's values are "" (no error) and results.Phases: phase
// index i of package results is label index i+1.
const numPhaseLabels = results.NumPhases + 1

func phaseLabel(i int) string {
	if i == 0 {
		return ""
	}
	return results.Phases[i-1]
}

// phaseIndex is the label index of phase p; one it does not know counts
// as "" (index 0).
func phaseIndex(p string) int { return 1 + results.PhaseIndex(p) }

// The states of fetch_proxies: a proxy in the run is healthy, or banned
// when the last verdict on it was a ban by a host (a success or a 429
// through it since makes it healthy again; bans by limits.BanHosts hosts
// in a row bench it); out of it for a while it is benched (probing
// included), and for good rejected.
const (
	stateHealthy = iota
	stateBenched
	stateRejected
	stateBanned
	numStates
)

var states = [numStates]string{"healthy", "benched", "rejected", "banned"}

var (
	attemptsDesc = prometheus.NewDesc("fetch_attempts_total",
		"Attempts that got a proxy (or went direct), by outcome for the proxy, error kind and phase (\"\" when ok), and pool.",
		[]string{"outcome", "kind", "phase", "pool"}, nil)
	recordsDesc = prometheus.NewDesc("fetch_records_total",
		"Records written, by ok and error kind (\"\" when ok).",
		[]string{"ok", "kind"}, nil)
	proxiesDesc = prometheus.NewDesc("fetch_proxies",
		"Proxies of the list by state (healthy, benched, rejected, banned) and pool.",
		[]string{"state", "pool"}, nil)
	proxyAttemptsDesc = prometheus.NewDesc("fetch_proxy_attempts_total",
		"Attempts of the busiest proxies (--metrics-proxies) by outcome; proxy=\"other\" adds up the rest of each pool.",
		[]string{"proxy", "pool", "outcome"}, nil)
)

// collector makes the samples of the counters and of fetch_proxies at a
// scrape.
type collector Metrics

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- attemptsDesc
	ch <- recordsDesc
	ch <- proxiesDesc
	if c.busy != nil {
		ch <- proxyAttemptsDesc
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for pool := range c.attempts {
		counts := c.attempts[pool].Load()
		if counts == nil {
			continue
		}
		for o := range counts {
			for k := range counts[o] {
				for p := range counts[o][k] {
					if v := counts[o][k][p].Load(); v > 0 {
						ch <- prometheus.MustNewConstMetric(attemptsDesc, prometheus.CounterValue, float64(v),
							outcomes[o], kinds[k], phaseLabel(p), c.pools[pool])
					}
				}
			}
		}
	}
	for ok, label := range [2]string{"false", "true"} {
		for k := range c.records[ok] {
			if v := c.records[ok][k].Load(); v > 0 {
				ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(v), label, kinds[k])
			}
		}
	}
	for pool := range c.states {
		for s := range c.states[pool] {
			ch <- prometheus.MustNewConstMetric(proxiesDesc, prometheus.GaugeValue,
				float64(c.states[pool][s].Load()), states[s], c.pools[pool])
		}
	}
	if c.busy != nil {
		c.busy.collect(ch, (*Metrics)(c))
	}
}

// collect makes the samples of fetch_proxy_attempts_total: a series for
// each listed proxy, and for each pool one of the others added up. Free
// places on the list go, at each scrape, to the busiest proxies not on it;
// a proxy stays on it for the rest of the run, so that its series never
// goes backwards. (proxy="other" does, by a listed proxy's count, when
// one is listed: at most Busiest times a run, at its first scrapes.)
func (b *busiest) collect(ch chan<- prometheus.Metric, m *Metrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	type seen struct {
		p     int
		total uint64
		by    [numOutcomes]uint64
	}
	var unlisted []seen
	for p := range b.counts {
		c := b.counts[p].Load()
		if c == nil {
			continue
		}
		s := seen{p: p}
		for o := range c {
			s.by[o] = c[o].Load()
			s.total += s.by[o]
		}
		if !b.isList[p] {
			unlisted = append(unlisted, s)
		}
	}
	if free := b.n - len(b.listed); free > 0 && len(unlisted) > 0 {
		slices.SortFunc(unlisted, func(x, y seen) int {
			return cmp.Or(cmp.Compare(y.total, x.total), cmp.Compare(x.p, y.p))
		})
		free = min(free, len(unlisted))
		for _, s := range unlisted[:free] {
			b.listed = append(b.listed, s.p)
			b.isList[s.p] = true
		}
		unlisted = unlisted[free:]
	}
	for _, p := range b.listed {
		c := b.counts[p].Load()
		for o := range c {
			if v := c[o].Load(); v > 0 {
				ch <- prometheus.MustNewConstMetric(proxyAttemptsDesc, prometheus.CounterValue, float64(v),
					b.ids[p], m.pools[m.poolOf[p]], outcomes[o])
			}
		}
	}
	other := make([][numOutcomes]uint64, len(m.pools))
	for _, s := range unlisted {
		for o, v := range s.by {
			other[m.poolOf[s.p]][o] += v
		}
	}
	for pool := range other {
		for o, v := range other[pool] {
			if v > 0 {
				ch <- prometheus.MustNewConstMetric(proxyAttemptsDesc, prometheus.CounterValue, float64(v),
					"other", m.pools[pool], outcomes[o])
			}
		}
	}
}
