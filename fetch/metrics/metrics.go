// Package metrics keeps a run's Prometheus metrics (--metrics): it is the
// engine's fetch.Observer, holds its own registry (never the global one),
// and gives the HTTP handler that serves them.
//
// The metrics and their labels:
//
//	fetch_attempts_total{outcome,kind,phase,pool}  counter: attempts that got a proxy
//	fetch_records_total{ok,kind}                   counter: records written
//	fetch_phase_seconds{phase}                     histogram: time of each attempt in each phase
//	fetch_in_flight                                gauge: URLs taken and not yet finished
//	fetch_waiting                                  gauge: attempts waiting for their turn
//	fetch_proxies{state,pool}                      gauge: proxies by state
//	fetch_proxy_attempts_total{proxy,pool,outcome} counter: with Options.Busiest only
//
// Every label takes its values from a short fixed list, but pool, which
// has one value for each pool of the proxy list: "" for proxies of no
// pool, "direct" when requests go direct. No label holds a host, and
// none a proxy's identity but proxy, for the Options.Busiest busiest
// proxies; an identity never holds a secret (see proxies.Identity).
//
// The engine's path costs no allocation: an attempt adds one to a counter
// found by indexes into arrays, never by labels, and the counters become
// Prometheus samples only when they are scraped.
package metrics

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DirectPool is the pool label of attempts and of the one "proxy" of a run
// without proxies, whose proxy identity is "direct" in records. A list
// cannot have a pool of that name in such a run: it has no list.
const DirectPool = "direct"

// Options configures New.
type Options struct {
	// Proxies is the run's proxy list, in the order of fetch.Config.Proxies;
	// none: requests go direct. New keeps their pools and, with Busiest,
	// their identities, not the list.
	Proxies []proxies.Proxy

	// Busiest is how many proxies get series of their own in
	// fetch_proxy_attempts_total, labelled with their identity
	// (--metrics-proxies); the others are added up under proxy="other".
	// 0: no such metric.
	Busiest int
}

// Source is what the gauges fetch_in_flight and fetch_waiting read at each
// scrape: a *fetch.Engine.
type Source interface {
	Stats() fetch.Stats
	Waiting() int
}

// Metrics is a run's metrics. Make one with New, give it to the engine as
// fetch.Config.Observer, call Watch once the engine is built, and serve
// Handler. It is safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	pools  []string // label values, by pool index
	poolOf []uint32 // by proxy index: its pool's index

	attempts []atomic.Pointer[poolCounts] // by pool index, made at the pool's first attempt
	records  [2][numKinds]atomic.Uint64   // by ok (0 false, 1 true) and kind
	phases   [results.NumPhases]prometheus.Observer

	state  []atomic.Uint32           // by proxy index: a state*
	states [][numStates]atomic.Int64 // by pool index: proxies in each state

	src atomic.Pointer[sourceBox]

	busy *busiest // nil without Options.Busiest
}

type sourceBox struct{ Source }

// poolCounts is a pool's attempts by outcome, kind and phase: 8 KB, made
// when the pool has its first attempt.
type poolCounts [numOutcomes][numKinds][numPhaseLabels]atomic.Uint64

// New returns the metrics of a run over opts.Proxies, registered in a
// registry of their own.
func New(opts Options) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	n := max(len(opts.Proxies), 1)
	m.poolOf = make([]uint32, n)
	if len(opts.Proxies) == 0 {
		m.pools = []string{DirectPool}
	} else {
		index := map[string]uint32{}
		for i := range opts.Proxies {
			p := opts.Proxies[i].Pool
			k, ok := index[p]
			if !ok {
				k = uint32(len(m.pools))
				index[p] = k
				// A copy: the name may be a slice of the list's whole text.
				m.pools = append(m.pools, strings.Clone(p))
			}
			m.poolOf[i] = k
		}
	}
	m.attempts = make([]atomic.Pointer[poolCounts], len(m.pools))
	m.state = make([]atomic.Uint32, n)
	m.states = make([][numStates]atomic.Int64, len(m.pools))
	for _, k := range m.poolOf {
		m.states[k][stateHealthy].Add(1)
	}
	if opts.Busiest > 0 {
		m.busy = newBusiest(opts.Busiest, opts.Proxies)
	}

	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fetch_phase_seconds",
		Help:    "Time attempts spent in each phase, one observation per attempt that got a proxy and the phase.",
		Buckets: phaseBuckets,
	}, []string{"phase"})
	for i, p := range results.Phases {
		if i != results.IndexInput { // never the phase of an attempt
			m.phases[i] = hist.WithLabelValues(p)
		}
	}
	m.reg.MustRegister(hist, (*collector)(m),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fetch_in_flight",
			Help: "URLs taken for work and not yet finished: in an attempt, waiting for a proxy, or waiting to retry.",
		}, func() float64 {
			if s := m.src.Load(); s != nil {
				return float64(s.Stats().InFlight)
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fetch_waiting",
			Help: "Attempts waiting for their turn: a permit or rate token of a proxy or pool, of a host, or of the run.",
		}, func() float64 {
			if s := m.src.Load(); s != nil {
				return float64(s.Waiting())
			}
			return 0
		}),
	)
	return m
}

// phaseBuckets are fetch_phase_seconds' buckets: from a loopback's
// millisecond to the minute of a slow body.
var phaseBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Watch makes the gauges fetch_in_flight and fetch_waiting read src; until
// it is called they read 0.
func (m *Metrics) Watch(src Source) { m.src.Store(&sourceBox{src}) }

// Handler serves the metrics in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// Register adds c to the metrics' registry: the place for metrics of
// parts that are not the engine's, such as the work queue's
// fetch_queue_lines{state} for `fetch work`.
func (m *Metrics) Register(c prometheus.Collector) error { return m.reg.Register(c) }

var _ fetch.Observer = (*Metrics)(nil)

// Attempt counts a finished attempt.
func (m *Metrics) Attempt(a fetch.AttemptEvent) {
	if a.Proxy < 0 || a.Proxy >= len(m.poolOf) {
		return
	}
	pool := m.poolOf[a.Proxy]
	c := m.attempts[pool].Load()
	if c == nil {
		m.attempts[pool].CompareAndSwap(nil, new(poolCounts))
		c = m.attempts[pool].Load()
	}
	o := outcomeIndex(a.Outcome)
	c[o][kindIndex(a.Kind)][phaseIndex(a.Phase)].Add(1)
	for i, h := range m.phases {
		if ms, ok := a.Phases.At(i); ok && h != nil {
			h.Observe(ms / 1000)
		}
	}
	switch a.Outcome {
	case limits.Banned:
		m.move(a.Proxy, stateHealthy, stateBanned)
	case limits.Success, limits.PushedBack:
		m.move(a.Proxy, stateBanned, stateHealthy)
	}
	if m.busy != nil {
		m.busy.add(a.Proxy, o)
	}
}

// Record counts a record.
func (m *Metrics) Record(r *results.Record) {
	ok, kind := 0, 0
	if r.OK {
		ok = 1
	}
	if r.Error != nil {
		kind = kindIndex(r.Error.Kind)
	}
	m.records[ok][kind].Add(1)
}

// Health follows a proxy's change of state.
func (m *Metrics) Health(ev limits.HealthEvent) {
	if ev.Proxy < 0 || ev.Proxy >= len(m.state) {
		return
	}
	var to uint32
	switch ev.State {
	case "healthy":
		to = stateHealthy
	case "benched", "probing": // probing: back for one attempt, not yet healthy
		to = stateBenched
	case "rejected":
		to = stateRejected
	default:
		return
	}
	st := &m.state[ev.Proxy]
	for {
		from := st.Load()
		if from == to || from == stateRejected { // rejected is for good
			return
		}
		if st.CompareAndSwap(from, to) {
			m.moved(ev.Proxy, from, to)
			return
		}
	}
}

// move moves proxy p from state from to state to, if it is in from.
func (m *Metrics) move(p int, from, to uint32) {
	if st := &m.state[p]; st.Load() == from && st.CompareAndSwap(from, to) {
		m.moved(p, from, to)
	}
}

// moved counts proxy p out of state from and into to.
func (m *Metrics) moved(p int, from, to uint32) {
	s := &m.states[m.poolOf[p]]
	s[from].Add(-1)
	s[to].Add(1)
}

// busiest keeps the attempts of each proxy by outcome, for
// fetch_proxy_attempts_total.
type busiest struct {
	n      int
	ids    []string                                     // by proxy index
	counts []atomic.Pointer[[numOutcomes]atomic.Uint64] // by proxy index, made at its first attempt

	mu     sync.Mutex // held by a scrape
	listed []int      // the proxies with series of their own, in the order they got them
	isList []bool     // by proxy index
}

func newBusiest(n int, list []proxies.Proxy) *busiest {
	b := &busiest{n: n}
	if len(list) == 0 {
		b.ids = []string{"direct"}
	} else {
		b.ids = make([]string, len(list))
		for i := range list {
			b.ids[i] = list[i].ID
		}
	}
	b.counts = make([]atomic.Pointer[[numOutcomes]atomic.Uint64], len(b.ids))
	b.isList = make([]bool, len(b.ids))
	return b
}

func (b *busiest) add(p, outcome int) {
	c := b.counts[p].Load()
	if c == nil {
		b.counts[p].CompareAndSwap(nil, new([numOutcomes]atomic.Uint64))
		c = b.counts[p].Load()
	}
	c[outcome].Add(1)
}
