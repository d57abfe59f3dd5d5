package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"golang.org/x/sync/errgroup"
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
		Pushback: limits.Pushback{Delay: cfg.PushbackDelay, Max: cfg.PushbackMax},
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

// ErrInterrupted is wrapped by Run's error when ctx was cancelled.
var ErrInterrupted = errors.New("fetch: interrupted")

// Run reads every input in order, fetches each URL line, writes one record
// per line taken to w, and returns the report. When ctx is cancelled Run
// stops taking lines, gives work in flight the grace period, records what is
// still unfinished as cancelled, and returns the report (Interrupted set)
// with an error wrapping ErrInterrupted and context.Canceled.
func (e *Engine) Run(ctx context.Context, inputs []input.Source, w RecordWriter) (*report.Report, error) {
	start := e.clock().now()
	coll := newCollector(start, e.cfg.ReportHosts, e.cfg.ReportProxies, e.routes)
	e.coll.Store(coll)
	defer e.coll.Store(nil)

	// Two stages run in g: fetch runs the jobs, write writes their
	// records. One that fails (only write can) ends stages, which stops
	// admitting and ends the work at once. The reader is a third stage
	// outside g: see read.
	g, stages := errgroup.WithContext(context.WithoutCancel(ctx))
	// admit ends on an interrupt (or a failed write): no line is taken and
	// no attempt starts after it. work ends the grace period later: the
	// attempts already under way may finish until then.
	admit, stopAdmitCause := context.WithCancelCause(ctx)
	stopAdmit := func() { stopAdmitCause(nil) }
	defer stopAdmit()
	defer context.AfterFunc(stages, stopAdmit)()
	e.halted.Store(nil)
	e.halt.Store(&stopAdmitCause)
	defer e.halt.Store(nil)
	work, cancelWork := context.WithCancel(stages)
	defer cancelWork()
	defer context.AfterFunc(admit, func() { e.grace(work, cancelWork) })()

	jobs := newJobQueue(min(e.cfg.Concurrency, maxJobsQueued))
	readDone := make(chan error, 1)
	go e.read(admit, inputs, jobs, readDone)

	records := make(chan *results.Record, min(e.cfg.Concurrency, maxRecordsWaiting))
	g.Go(func() error {
		defer close(records)
		e.fetch(admit, work, stages, jobs, records, coll)
		return nil
	})
	g.Go(func() error { return e.write(w, records, coll) })
	writeErr := g.Wait()
	cancelWork() // ends the grace timer
	e.transports.closeIdle()

	var readErr error
	readAll := false
	select {
	case readErr = <-readDone:
		readAll = readErr == nil
		if errors.Is(readErr, context.Canceled) {
			readErr = nil
		}
	default: // still blocked in a read
	}
	// Interrupted means something was left: unread input or a cancelled
	// record. A signal that lands while the last records are flushed
	// changes nothing.
	e.takeEvents(coll)
	rep := coll.report(millis(e.clock().since(start)))
	halted := e.halted.Load()
	interrupted := ctx.Err() != nil && (!readAll || rep.ByKind[results.KindCancelled] > 0)
	rep.Interrupted = interrupted && halted == nil
	if halted != nil {
		rep.Stopped = halted.stopped
	}
	switch {
	case writeErr != nil:
		return rep, writeErr
	case halted != nil:
		return rep, fmt.Errorf("fetch: %w", e.haltMessage(halted))
	case readErr != nil:
		return rep, readErr
	case interrupted:
		return rep, fmt.Errorf("%w: %w", ErrInterrupted, context.Canceled)
	}
	return rep, nil
}

// StoppedNoProxy is the report's "stopped" when the run stopped because no
// proxy could serve.
const StoppedNoProxy = "no usable proxy"

// StoppedCoordinator is the report's "stopped" when the run stopped because
// the coordinator (Redis) was unreachable for the pool wait.
const StoppedCoordinator = "coordinator unreachable"

// halting is why a run stopped admitting before its input ran out: the
// scheduler's error (a *limits.PoolError, or one wrapping
// limits.ErrCoordinatorDown) and the report's "stopped".
type halting struct {
	err     error
	stopped string
}

// haltFor returns the halting that err of Acquire calls for, or nil: a pool
// that cannot serve, or a coordinator gone for the pool wait.
func haltFor(err error) *halting {
	var pe *limits.PoolError
	switch {
	case errors.As(err, &pe):
		return &halting{err: pe, stopped: StoppedNoProxy}
	case errors.Is(err, limits.ErrCoordinatorDown):
		return &halting{err: err, stopped: StoppedCoordinator}
	}
	return nil
}

// stop stops admitting for h: the run ends as on an interrupt, and Run
// returns an error wrapping h's (limits.ErrNoUsableProxy or
// limits.ErrCoordinatorDown). The first cause is kept.
func (e *Engine) stop(h *halting) {
	if e.halted.CompareAndSwap(nil, h) {
		if stop := e.halt.Load(); stop != nil {
			(*stop)(h.err)
		}
	}
}

// poolError is the error of a pool that cannot serve, with the last failure
// of a proxy's own when there was one: "no usable proxy: 3 of 3 benched for
// 2m0s; last failure: connection refused".
type poolError struct {
	pe   *limits.PoolError
	last string
}

func (p *poolError) Error() string {
	if p.last == "" {
		return p.pe.Error()
	}
	return p.pe.Error() + "; last failure: " + p.last
}

func (p *poolError) Unwrap() error { return p.pe }

// haltMessage is the error that says why the run stopped: for a pool, with
// the last failure of a proxy's own.
func (e *Engine) haltMessage(h *halting) error {
	pe, ok := h.err.(*limits.PoolError)
	if !ok {
		return h.err
	}
	last := ""
	if l := e.lastFault.Load(); l != nil {
		last = *l
	}
	return &poolError{pe: pe, last: last}
}

// maxRecordsWaiting bounds the records finished but not yet written: a
// slow writer holds the workers up, whatever -c is.
const maxRecordsWaiting = 256

// grace lets the work in flight go on for the grace period once admitting
// has stopped, then ends it; StopNow, or the work ending by itself, cuts it
// short.
func (e *Engine) grace(work context.Context, end context.CancelFunc) {
	over, t := e.clock().after(e.cfg.Grace)
	defer t.Stop()
	select {
	case <-over:
	case <-e.stopNow:
	case <-work.Done():
	}
	end()
}

// maxJobsQueued bounds the jobs read ahead of the workers.
const maxJobsQueued = 64

// read is the reader stage: it streams the jobs of inputs to jobs until
// admit ends, closes jobs, and sends its error (nil when every line was
// taken) to done. Run does not wait for it once admitting has stopped: a
// read from a pipe or a terminal may block for ever, and is left behind.
func (e *Engine) read(admit context.Context, inputs []input.Source, jobs *jobQueue, done chan<- error) {
	defer jobs.close()
	err := readInputs(admit, inputs, e.cfg.Shard, e.cfg.Done, &e.skipped, jobs)
	if err == nil {
		err = jobs.drained(admit)
	}
	if err == nil {
		e.sched.Drain() // every line is taken: the scheduler may plan the tail
	}
	done <- err
}

// readInputs streams the URL lines of every input, in order, to jobs, the
// lines of other shards than shard passed over and those done lists
// counted in skipped. It stops early, returning ctx.Err(), when ctx is
// done. Memory does not grow with the length of the inputs.
func readInputs(ctx context.Context, inputs []input.Source, shard input.Shard, done *results.DoneSet, skipped *atomic.Int64, jobs *jobQueue) error {
	for _, in := range inputs {
		s := input.NewScanner(in, shard, done)
		for s.Scan() {
			if s.Done() {
				skipped.Add(1)
				continue
			}
			if err := jobs.put(ctx, s.Line()); err != nil {
				return err
			}
		}
		if err := s.Err(); err != nil {
			return err
		}
	}
	return nil
}

// fetch is the fetching stage: it runs the jobs from jobs, at most
// Concurrency at once, and sends their records to records (dropping them
// once stages has ended: nothing writes them any more). Only a worker that
// is free takes a job, and none is taken once admit has ended; fetch
// returns when every worker has. Workers are started as they are needed:
// one more whenever every worker is busy, up to Concurrency, so that
// nothing is allocated per unit of Concurrency and a steady run starts no
// goroutine per job.
func (e *Engine) fetch(admit, work, stages context.Context, jobs *jobQueue, records chan<- *results.Record, coll *collector) {
	var (
		workers errgroup.Group
		idle    atomic.Int64             // workers waiting for a job
		busy    = make(chan struct{}, 1) // a worker took a job and none is left waiting
		ended   = make(chan struct{})    // no job will come: jobs is closed or admit ended
		endOnce sync.Once
	)
	worker := func() error { // counted idle when started
		tr := newTracker(&e.cfg, work) // for every attempt of this worker's
		defer tr.close()
		for {
			j, ok := jobs.take(admit)
			if idle.Add(-1) == 0 && ok {
				select {
				case busy <- struct{}{}:
				default: // the spawner has not seen the last one yet
				}
			}
			if !ok {
				endOnce.Do(func() { close(ended) })
				return nil
			}
			e.inFlight.Add(1)
			rec := e.runJob(tr.parent, admit, j, tr, coll)
			e.inFlight.Add(-1)
			select {
			case records <- rec:
			case <-stages.Done():
			}
			idle.Add(1)
		}
	}
	defer workers.Wait()
	for started := 0; started < e.cfg.Concurrency; {
		if idle.Load() == 0 {
			idle.Add(1)
			workers.Go(worker)
			started++
		}
		select {
		case <-busy:
		case <-ended:
			return
		}
	}
}

// flushDelay is how long a record may wait in the writer's buffer: output
// is never older than that, and a fast run writes its records in large
// blocks instead of one write for every few records.
const flushDelay = 50 * time.Millisecond

// write is the writing stage: it counts each record from records and
// writes it to w, flushing w within flushDelay of a record, so that output
// is never stale, and once more when records is closed. It returns w's
// first error: records can no longer be kept, and the run stops.
func (e *Engine) write(w RecordWriter, records <-chan *results.Record, coll *collector) error {
	flusher, _ := w.(interface{ Flush() error })
	clk := e.clock()
	var due <-chan struct{} // closed when buffered records are to be flushed; nil when none are
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case rec, ok := <-records:
			if !ok {
				if flusher != nil && due != nil {
					return flusher.Flush()
				}
				return nil
			}
			coll.record(rec)
			if rec.OK {
				e.ok.Add(1)
			} else {
				e.failed.Add(1)
			}
			e.done.Add(1)
			if err := w.Write(rec); err != nil {
				return err
			}
			if flusher != nil && due == nil {
				due, timer = clk.after(flushDelay)
			}
		case <-due:
			due, timer = nil, nil
			if err := flusher.Flush(); err != nil {
				return err
			}
		}
	}
}

// runJob fetches one URL line within its total deadline and returns its
// record. Attempts run under ctx (which outlives an interrupt by the grace
// period); waits for a permit or a retry end when admit does.
func (e *Engine) runJob(ctx, admit context.Context, j *input.Line, tr *tracker, coll *collector) *results.Record {
	clk := e.clock()
	start := clk.now()
	rec := &results.Record{URL: j.Shown, Input: j.Input, Line: j.Number, Tries: []results.Try{}}
	defer func() { rec.ElapsedMS = millis(clk.since(start)) }()
	if j.Invalid != "" {
		rec.Error = &results.Error{Phase: results.PhaseInput, Kind: results.KindInvalid, Message: j.Invalid}
		return rec
	}
	// The total deadline. Each attempt's context carries it, and the
	// attempt's tracker enforces it on its wait for a lease and all it
	// does; a wait before a retry must end before it.
	deadline := start.Add(e.cfg.Timeout)
	// Waits (for a lease, before a retry) also end when admitting stops.
	stop := admit.Done()

	policy := e.retryPolicy()
	var avoid []int
	for {
		res := e.attempt(ctx, deadline, stop, j, avoid, tr, coll)
		if res.proxy >= 0 {
			rec.Attempts++
		}
		left := deadline.Sub(clk.now())
		wait, again, late := policy.wait(ctx, rec.Attempts, res, left)
		if again && admit.Err() == nil && clk.sleep(ctx, stop, wait) {
			rec.Tries = append(rec.Tries, e.try(res))
			if res.proxy >= 0 {
				avoid = append(avoid, res.proxy)
			}
			continue
		}
		e.fill(rec, res)
		if late && rec.Error != nil {
			rec.Error.Message += notRetried(res, wait, left)
		}
		if again {
			// An interrupt came before the retry could start: the URL is
			// not finished, and a resumed run takes it again.
			rec.OK = false
			why := "interrupted"
			if h := e.halted.Load(); h != nil {
				why = e.haltMessage(h).Error()
			}
			rec.Error = e.newError(results.PhaseQueue, results.KindCancelled, why+" before retrying after: "+res.err.Message)
		}
		return rec
	}
}

// result is the outcome of one attempt.
type result struct {
	proxy      int // route index, or -1 when no lease was had
	status     int
	ok         bool
	bytes      int64
	file       string
	elapsed    time.Duration
	phases     results.PhaseTimes
	err        *results.Error
	retryAfter time.Duration // from a Retry-After header, or 0
	hasRetryAf bool
	final      bool   // a failure another attempt would not mend
	targetSide bool   // the proxy answered that it could not reach the target
	inTunnel   bool   // it failed inside an established tunnel (CONNECT, SOCKS): the target's doing
	rejected   bool   // the proxy refused its credentials
	banned     bool   // the response was a ban (--ban-status, --ban-match)
	body       []byte // the start of the body, with Config.KeepBody
}

func (e *Engine) fill(rec *results.Record, res result) {
	rec.OK, rec.Status, rec.Bytes, rec.File, rec.Body = res.ok, res.status, res.bytes, res.file, res.body
	rec.Phases, rec.Error = res.phases, res.err
	if res.proxy >= 0 {
		rec.Proxy, rec.Pool = e.routes[res.proxy].id, e.routes[res.proxy].pool
	}
}

func (e *Engine) try(res result) results.Try {
	t := results.Try{Status: res.status, ElapsedMS: millis(res.elapsed), Phases: res.phases, Error: res.err}
	if res.proxy >= 0 {
		t.Proxy, t.Pool = e.routes[res.proxy].id, e.routes[res.proxy].pool
	}
	return t
}

// attempt makes one attempt: it waits for a lease, sends the request through
// the leased route, reads the body, and gives the lease back only then. All
// of it runs under one context, which tr makes from ctx: it has the URL's
// deadline, and is cancelled when the attempt is over or tr stops it (the
// deadline, a per-phase limit, a lost lease).
func (e *Engine) attempt(ctx context.Context, deadline time.Time, stop <-chan struct{}, j *input.Line, avoid []int, tr *tracker, coll *collector) (res result) {
	clk := e.clock()
	start := clk.now()
	res.proxy = -1
	skip := func() bool { // the host is down: no attempt
		n, down := e.hostFails.down(j.Host)
		if down {
			res.elapsed = clk.since(start)
			res.phases = queueTimes(millis(res.elapsed))
			res.err = e.skippedError(j.Host, n)
		}
		return down
	}
	if skip() {
		return res
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // runs last, once the lease is given back
	gen := tr.begin(ctx, cancel, start, deadline)
	ctx = tr.context()
	lease, err := e.sched.Acquire(ctx, limits.Request{Host: j.Host, Avoid: avoid, Stop: stop})
	if err == nil && skip() { // it went down while this waited
		tr.finish()
		lease.Release()
		return res
	}
	if err != nil {
		tr.finish()
		res.elapsed = clk.since(start)
		res.phases = queueTimes(millis(res.elapsed))
		if h := haltFor(err); h != nil {
			e.stop(h)
		}
		switch {
		case e.halted.Load() != nil && ctx.Err() == nil:
			// Stopped for the pool or the coordinator: the URL is not
			// finished, and a resumed run (with a mended list, or Redis
			// back) takes it again.
			res.err = e.newError(results.PhaseQueue, results.KindCancelled, e.haltMessage(e.halted.Load()).Error())
		case ctx.Err() != nil || !errors.Is(err, context.Canceled):
			res.err = e.failure(err, results.PhaseQueue, ctx, tr)
			var we *limits.WaitError
			if errors.As(err, &we) && res.err.Kind == results.KindDeadline {
				res.err = e.newError(results.PhaseQueue, results.KindDeadline, fmt.Sprintf("%s: waited %s for a proxy: %s",
					res.err.Message, res.elapsed.Round(time.Millisecond), we.Waiting()))
			}
		default:
			res.err = e.newError(results.PhaseQueue, results.KindCancelled, "interrupted while waiting for a permit")
		}
		return res
	}
	return e.leased(ctx, start, j, tr, gen, lease, coll)
}

// leased is the rest of an attempt once it holds lease: the exchange on
// the leased route, then the lease given back with what the attempt says
// about the proxy. It and attempt are two functions, and the response a
// third (respond), so that each has few enough defers and returns for the
// compiler to open-code its defers: a deferred call the runtime has to
// find by unwinding the stack cost about 2,000 instructions a URL.
func (e *Engine) leased(ctx context.Context, start time.Time, j *input.Line, tr *tracker, gen uint64, lease *limits.Lease, coll *collector) (res result) {
	clk := e.clock()
	res.proxy = lease.Proxy
	rt := &e.routes[lease.Proxy]
	tr.leased(rt.handshake(j.URL), rt.via())
	defer func() { // after the body is closed and the tracker has finished
		sawByte := tr.sawByte.Load()
		switch {
		case noResponse(rt, res, sawByte):
			e.hostFails.failed(j.Host)
		case res.status != 0 || sawByte:
			e.hostFails.answered(j.Host)
		}
		if res.banned {
			coll.ban(rt, j.Host)
		}
		o := outcome(rt, res)
		if o == limits.ProxyFault || o == limits.Rejected {
			msg := res.err.Message
			e.lastFault.Store(&msg)
		}
		if o == limits.Rejected && rt.rejected.CompareAndSwap(false, true) && e.cfg.Warn != nil {
			e.cfg.Warn(fmt.Sprintf("proxy %s rejected its credentials (%s): it leaves the run", rt.id, res.err.Message))
		}
		lease.Finish(o)
		e.takeEvents(coll)
	}()

	if lease.Lost != nil { // a shared scheduler: the lease may be lost
		go func() {
			select {
			case <-lease.Lost:
				tr.stop(gen, errLeaseLost)
			case <-ctx.Done(): // the attempt is over
			}
		}()
	}
	defer func() {
		phase, phases := tr.finish()
		res.elapsed = clk.since(start)
		res.phases = phases
		if res.err != nil && res.err.Phase == "" {
			res.err.Phase = phase
		}
		coll.attempt(rt, j.Host, res.ok, lease.ProxyInFlight, lease.HostInFlight, &res.phases)
	}()

	req := e.newRequest(tr.withHooks(), j.URL)
	tr.set(results.IndexConnect)
	c := e.transports.client(rt)
	resp, err := c.Do(req)
	if err != nil {
		res.err = e.failure(err, tr.current(), ctx, tr)
		res.targetSide = targetSide(err)
		res.inTunnel = rt.tunnels(j.URL) && afterTunnel(res.err.Phase)
		res.rejected = credentialsRejected(err)
		return res
	}
	tr.gotHeaders()
	e.respond(ctx, j, tr, rt, resp, &res)
	return res
}

// respond reads resp, the answer to an attempt on rt, into res: a ban, a
// status to retry, or the body.
func (e *Engine) respond(ctx context.Context, j *input.Line, tr *tracker, rt *route, resp *http.Response, res *result) {
	clk := e.clock()
	res.status = resp.StatusCode
	body := &tr.body
	body.r = resp.Body
	defer resp.Body.Close()

	var rest io.Reader = body // the body still to be read
	if !rt.proxy() || resp.StatusCode != http.StatusProxyAuthRequired {
		b, start, err := e.checkBan(resp, body)
		if err != nil {
			res.err = e.failure(err, tr.current(), ctx, tr)
			return
		}
		if b != nil {
			res.err = e.newError(b.phase, results.KindBanned, b.why)
			res.banned = true
			return
		}
		if start != nil {
			rest = io.MultiReader(bytes.NewReader(start), body)
		}
	}
	if e.retryPolicy().retryStatus(resp.StatusCode) {
		io.Copy(io.Discard, io.LimitReader(body, 64<<10)) // let the connection be reused
		res.err = e.newError(results.PhaseHeaders, results.KindStatus, resp.Status)
		res.retryAfter, res.hasRetryAf = retryAfter(resp.Header.Get("Retry-After"), clk.now())
		return
	}
	if rt.proxy() && resp.StatusCode == http.StatusProxyAuthRequired {
		res.err = e.newError(results.PhaseProxy, results.KindProxy, "proxy answered "+resp.Status)
		res.rejected = true
		return
	}
	n, file, head, err := e.readBody(j, resp, rest)
	res.body = head
	res.bytes = n
	if err != nil {
		res.err = e.failure(err, tr.current(), ctx, tr)
		var se *saveError
		res.final = errors.As(err, &se)
		return
	}
	res.ok, res.file = true, file
}

// tunnels reports whether attempts to u through this route go through a
// tunnel to the target (CONNECT for https, or SOCKS): once it is up, the
// proxy only carries bytes, and what fails after is the target's.
func (r *route) tunnels(u *url.URL) bool {
	switch r.kind {
	case routeDirect:
		return false
	case routeHTTP, routeHTTPS:
		return u.Scheme == "https"
	}
	return true
}

// afterTunnel reports whether phase comes after a tunnel is set up: the
// target's TLS handshake, the request, its answer.
func afterTunnel(phase string) bool {
	switch phase {
	case results.PhaseTLS, results.PhaseRequest, results.PhaseHeaders, results.PhaseBody:
		return true
	}
	return false
}

// handshake reports whether attempts to u through this route have a proxy
// handshake after the TCP connect.
func (r *route) handshake(u *url.URL) bool {
	switch r.kind {
	case routeDirect:
		return false
	case routeHTTP:
		return u.Scheme == "https"
	}
	return true
}

// progressReader restarts the idle clock whenever bytes arrive.
type progressReader struct {
	r io.Reader
	t *tracker
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.t.progress()
	}
	return n, err
}

// outcome is what an attempt says about its proxy, for health and pushback.
func outcome(rt *route, res result) limits.Outcome {
	switch {
	case res.ok:
		return limits.Success
	case res.banned:
		return limits.Banned
	case res.err == nil:
		return limits.Neutral
	case res.err.Kind == results.KindStatus:
		if res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable {
			return limits.PushedBack
		}
		return limits.Success // the proxy carried it; the target answered
	case !rt.proxy(), res.targetSide, res.inTunnel:
		return limits.Neutral
	case res.rejected:
		return limits.Rejected
	}
	switch res.err.Kind {
	case results.KindRefused, results.KindProxy, results.KindDNS:
		return limits.ProxyFault
	case results.KindReset:
		if res.err.Phase != results.PhaseBody { // a body cut short may be the target's doing
			return limits.ProxyFault
		}
	case results.KindTimeout, results.KindTLS:
		switch res.err.Phase {
		case results.PhaseConnect, results.PhaseProxy, results.PhaseDNS:
			return limits.ProxyFault
		}
	}
	return limits.Neutral
}
