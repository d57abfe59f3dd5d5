package fetch

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// RecordWriter receives each finished record exactly once. Write is called
// from one goroutine at a time. If it also has a Flush() error method, the
// engine calls it within 50 ms of a record, so output is never stale, and
// when the run ends.
type RecordWriter interface {
	Write(r *results.Record) error
}

// Stats is a snapshot of a run's progress.
type Stats struct {
	Done, OK, Failed int64
	InFlight         int64
	Skipped          int64 // lines not taken because --resume found them finished
}

// Engine runs jobs. Create one with New; it runs one Run at a time.
type Engine struct {
	cfg      Config
	routes   []route // never grown: routes are pointed to
	sched    limits.Scheduler
	redactor *proxies.Redactor
	retry    map[int]bool
	header   http.Header   // every request's, from requestHeader
	request  *http.Request // every attempt's request is a copy: see newRequest

	hostFails *hostFailures // --host-max-failures
	buffers   *buffers      // the bodies' copy buffers

	stopNow                    chan struct{} // closed by StopNow
	stopOnce                   sync.Once
	done, ok, failed, inFlight atomic.Int64
	skipped                    atomic.Int64
	coll                       atomic.Pointer[collector] // the running Run's
	ownSched                   bool                      // sched was built by New: Close closes it
	transports                 *transports               // the routes' transports
	eventsMu                   sync.Mutex                // held while moving events to the report
	events                     []limits.HealthEvent      // takeEvents' buffer, under eventsMu
	workers                    workerSet                 // the running Run's, for Waiting

	// halt stops admitting in the running Run because the pool cannot
	// serve or the coordinator is gone; halted is why, once it has.
	halt      atomic.Pointer[context.CancelCauseFunc]
	halted    atomic.Pointer[halting]
	lastFault atomic.Pointer[string] // the message of the last failure of a proxy's own
}

// New checks cfg and builds an Engine with an in-process scheduler.
//
// The engine keeps what it needs of each of cfg.Proxies, not the list: New
// calls cfg.ListDropped, when set, once it holds no reference to the list,
// before it builds the scheduler. New itself never collects garbage: a
// caller that handed New its only reference to a large list may collect it
// there, so that the scheduler's state reuses the list's memory (the
// command does: GC policy is the program's, not the library's).
func New(cfg Config) (*Engine, error) {
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("fetch: concurrency must be at least 1, not %d", cfg.Concurrency)
	}
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("fetch: timeout must be positive")
	}
	for i := range cfg.Proxies {
		// A proxy made by hand rather than by proxies.Load or FromURL
		// would otherwise become a route that fails at its first use.
		p := &cfg.Proxies[i]
		switch {
		case p.Scheme != "http" && p.Scheme != "https" && p.Scheme != "socks5" && p.Scheme != "socks5h":
			return nil, fmt.Errorf("fetch: proxy %d (%s): scheme %q, want http, https, socks5 or socks5h", i+1, p.ID, p.Scheme)
		case p.Host == "":
			return nil, fmt.Errorf("fetch: proxy %d (%s): no host", i+1, p.ID)
		}
	}
	creds := proxies.NewCredentials(cfg.Proxies)
	e := &Engine{cfg: cfg, redactor: creds.Redactor(), retry: map[int]bool{}, stopNow: make(chan struct{}),
		hostFails: newHostFailures(cfg.HostMaxFailures),
		// As many buffers kept as may be in use at once, up to 8 MiB.
		buffers: newBuffers(min(cfg.Concurrency, 256))}
	for _, s := range cfg.RetryStatus {
		e.retry[s] = true
	}
	e.header = requestHeader(&cfg)
	var err error
	if e.request, err = baseRequest(&cfg, e.header); err != nil {
		return nil, err
	}
	lc, err := schedulerConfig(&cfg)
	if err != nil {
		return nil, err
	}
	ts := &transports{cfg: &e.cfg, creds: creds}
	e.transports = ts
	if len(cfg.Proxies) == 0 {
		e.routes = make([]route, 1)
		e.routes[0].init(ts, nil, 0)
	} else {
		e.routes = make([]route, len(cfg.Proxies))
		for i := range cfg.Proxies {
			e.routes[i].init(ts, &e.cfg.Proxies[i], int32(i))
		}
	}
	// The routes and the scheduler's configuration hold what the run needs
	// of each proxy: the list is not kept, so that its 152 bytes a proxy
	// (100,000 identities: 15 MB, every element with pointers) are neither
	// marked at every collection nor counted twice in the heap's goal.
	// It is dropped before the scheduler is built: a caller that handed
	// over its only reference to a large list may have the list and its
	// lines collected in ListDropped, and the scheduler's state (22 MB for
	// 100,000 identities) then reuses their memory instead of adding to
	// the start's peak.
	cfg.Proxies, e.cfg.Proxies = nil, nil
	if cfg.ListDropped != nil {
		cfg.ListDropped()
	}
	e.sched = cfg.Scheduler
	switch {
	case e.sched != nil:
	case cfg.NewScheduler != nil:
		if e.sched, err = cfg.NewScheduler(lc); err != nil {
			return nil, err
		}
		e.ownSched = true
	default:
		e.sched = limits.NewLocal(lc)
		e.ownSched = true
	}
	return e, nil
}

// schedulerConfig is the scheduler's configuration for cfg: one budget per
// proxy or pool (one unlimited route, direct, without proxies), each proxy
// and budget named by the identity records use, the host and global
// limits, the policy, health and pushback.
func schedulerConfig(cfg *Config) (limits.Config, error) {
	lc := limits.Config{
		Host:     limits.Spec{Concurrency: cfg.HostConcurrency, Rate: cfg.HostRate, Burst: cfg.HostBurst},
		Global:   cfg.Rate,
		Policy:   cfg.Policy,
		Health:   limits.Health{MaxFailures: cfg.ProxyMaxFailures, Cooldown: cfg.ProxyCooldown, MaxCooldown: cfg.ProxyCooldownMax, PoolWait: cfg.PoolWait},
		Pushback: limits.Pushback{Delay: cfg.PushbackDelay, Max: cfg.PushbackMax, RetryAfterMax: cfg.RetryAfterMax},
		Clock:    cfg.Clock,
	}
	if len(cfg.Proxies) == 0 {
		lc.Budgets = []limits.Spec{{}} // direct: only -c, host and global limits
		lc.BudgetOf = []int{0}
		lc.ProxyIDs = []string{"direct"}
		lc.BudgetNames = []string{"direct"}
		lc.Health = limits.Health{} // direct is never benched
		return lc, nil
	}
	def := limits.Spec{Concurrency: cfg.ProxyConcurrency, Rate: cfg.ProxyRate, Burst: cfg.ProxyBurst}
	var err error
	if lc.Budgets, lc.BudgetNames, lc.BudgetOf, err = proxies.Budgets(cfg.Proxies, def); err != nil {
		return lc, err
	}
	if cfg.NewScheduler != nil { // names are for a scheduler that keeps its state outside the process
		lc.ProxyIDs = make([]string, len(cfg.Proxies))
		for i := range cfg.Proxies {
			lc.ProxyIDs[i] = cfg.Proxies[i].ID
		}
	}
	return lc, nil
}

// clock is the engine's clock.
func (e *Engine) clock() engineClock { return engineClock{e.cfg.Clock} }

// takeEvents moves the scheduler's news of proxy health into the run's
// report.
func (e *Engine) takeEvents(coll *collector) {
	e.eventsMu.Lock() // events reach the report in the order they happened
	defer e.eventsMu.Unlock()
	e.events = e.sched.Events(e.events[:0])
	for _, ev := range e.events {
		coll.health(&e.routes[ev.Proxy], ev)
	}
}

// Close releases what the engine holds: the scheduler it built (one given in
// Config.Scheduler is the caller's to close) and idle connections. Call it
// once no Run is running.
func (e *Engine) Close() error {
	e.transports.closeIdle()
	if e.ownSched {
		return e.sched.Close()
	}
	return nil
}

// Stats returns the progress so far. It is safe to call while Run runs.
func (e *Engine) Stats() Stats {
	return Stats{Done: e.done.Load(), OK: e.ok.Load(), Failed: e.failed.Load(), InFlight: e.inFlight.Load(), Skipped: e.skipped.Load()}
}

// StopNow ends the grace period of an interrupted Run at once: what is
// still in flight is recorded as cancelled. It is for a second interrupt;
// called before the Run's context is cancelled it takes effect then. It
// cannot be undone: a later Run of the same Engine gets no grace period.
func (e *Engine) StopNow() { e.stopOnce.Do(func() { close(e.stopNow) }) }

// UserAgent is the User-Agent header fetch sends unless -H gives another;
// with it the default Accept is */*, as curl sends.
const UserAgent = "fetch/0.1"
