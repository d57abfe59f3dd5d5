package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// Input is one source of URL lines: a file as named on the command line, or
// "-" for standard input.
type Input struct {
	Name string
	R    io.Reader
}

// RecordWriter receives each finished record exactly once. Write is called
// from one goroutine at a time. If it also has a Flush() error method, the
// engine flushes whenever no record is waiting, so output is never stale.
type RecordWriter interface {
	Write(r *Record) error
}

// Stats is a snapshot of a run's progress.
type Stats struct {
	Done, OK, Failed int64
	InFlight         int64
}

// Engine runs jobs. Create one with New; it runs one Run at a time.
type Engine struct {
	cfg      Config
	routes   []*route
	sched    limits.Scheduler
	redactor *proxies.Redactor
	retry    map[int]bool

	stopNow                    chan struct{} // closed by StopNow
	stopOnce                   sync.Once
	done, ok, failed, inFlight atomic.Int64
	coll                       atomic.Pointer[collector] // the running Run's
}

// New checks cfg and builds an Engine with an in-process scheduler.
func New(cfg Config) (*Engine, error) {
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("fetch: concurrency must be at least 1, not %d", cfg.Concurrency)
	}
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("fetch: timeout must be positive")
	}
	policy, err := limits.ParsePolicy(cfg.Policy)
	if err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, redactor: proxies.NewRedactor(cfg.Proxies), retry: map[int]bool{}, stopNow: make(chan struct{})}
	for _, s := range cfg.RetryStatus {
		e.retry[s] = true
	}
	lc := limits.Config{
		Host:   limits.Spec{Concurrency: cfg.HostConcurrency, Rate: cfg.HostRate, Burst: cfg.HostBurst},
		Global: cfg.Rate,
		Policy: policy,
	}
	if len(cfg.Proxies) == 0 {
		e.routes = []*route{newRoute(&e.cfg, nil)}
		lc.Budgets = []limits.Spec{{}} // direct: only -c, host and global limits
		lc.BudgetOf = []int{0}
	} else {
		budgets, of, err := proxies.Budgets(cfg.Proxies, cfg.ProxyConcurrency, cfg.ProxyRate, cfg.ProxyBurst)
		if err != nil {
			return nil, err
		}
		for i := range cfg.Proxies {
			e.routes = append(e.routes, newRoute(&e.cfg, &cfg.Proxies[i]))
		}
		for _, b := range budgets {
			lc.Budgets = append(lc.Budgets, limits.Spec{Concurrency: b.Concurrency, Rate: b.Rate, Burst: b.Burst})
		}
		lc.BudgetOf = of
	}
	lc.Health = limits.Health{MaxFailures: cfg.ProxyMaxFailures, Cooldown: cfg.ProxyCooldown, MaxCooldown: cfg.ProxyCooldownMax}
	lc.Throttle = limits.Throttle{Base: cfg.ThrottleBase, Max: cfg.ThrottleMax}
	if len(cfg.Proxies) == 0 {
		lc.Health = limits.Health{} // direct is never benched
	}
	lc.OnHealth = func(ev limits.HealthEvent) {
		if c := e.coll.Load(); c != nil {
			c.health(e.routes[ev.Proxy].id, ev)
		}
	}
	e.sched = cfg.Scheduler
	if e.sched == nil {
		e.sched = limits.NewLocal(lc)
	}
	return e, nil
}

// Stats returns the progress so far. It is safe to call while Run runs.
func (e *Engine) Stats() Stats {
	return Stats{Done: e.done.Load(), OK: e.ok.Load(), Failed: e.failed.Load(), InFlight: e.inFlight.Load()}
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
func (e *Engine) Run(ctx context.Context, inputs []Input, w RecordWriter) (*Report, error) {
	start := time.Now()
	coll := newCollector(e.routes, start)
	e.coll.Store(coll)
	defer e.coll.Store(nil)

	// admit ends on an interrupt (or a failed write): no line is taken and
	// no attempt starts after it. work ends the grace period later: the
	// attempts already under way may finish until then.
	admit, stopAdmit := context.WithCancel(ctx)
	defer stopAdmit()
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopGrace := context.AfterFunc(admit, func() {
		t := time.NewTimer(e.cfg.Grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-e.stopNow:
		case <-work.Done():
		}
		cancelWork()
	})
	defer stopGrace()

	// The reader is not waited for once admitting has stopped: a read from
	// a pipe or a terminal may block for ever, and is left behind.
	jobs := make(chan *job)
	readDone := make(chan error, 1)
	go func() {
		defer close(jobs)
		err := readInputs(admit, inputs, e.cfg.Done, jobs)
		if d, ok := e.sched.(interface{ Drain() }); ok && err == nil {
			d.Drain() // every line is taken: the scheduler may plan the tail
		}
		readDone <- err
	}()

	records := make(chan *Record, e.cfg.Concurrency)
	var workers sync.WaitGroup
	for range e.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for admit.Err() == nil {
				var j *job
				var ok bool
				select {
				case j, ok = <-jobs:
				case <-admit.Done():
				}
				if !ok {
					return
				}
				e.inFlight.Add(1)
				rec := e.runJob(work, admit, j, coll)
				e.inFlight.Add(-1)
				records <- rec
			}
		}()
	}
	var writeErr error
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		flusher, _ := w.(interface{ Flush() error })
		for rec := range records {
			if writeErr != nil {
				continue // nowhere to write: drop what is still coming in
			}
			coll.record(rec)
			if rec.OK {
				e.ok.Add(1)
			} else {
				e.failed.Add(1)
			}
			e.done.Add(1)
			writeErr = w.Write(rec)
			if flusher != nil && len(records) == 0 && writeErr == nil {
				writeErr = flusher.Flush()
			}
			if writeErr != nil {
				stopAdmit() // records can no longer be kept: stop fetching
				cancelWork()
			}
		}
	}()
	workers.Wait()
	close(records)
	<-writerDone
	cancelWork() // ends the grace timer
	for _, r := range e.routes {
		r.tr.CloseIdleConnections()
	}

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
	rep := coll.report(millis(time.Since(start)))
	interrupted := ctx.Err() != nil && (!readAll || rep.ByKind[KindCancelled] > 0)
	rep.Interrupted = interrupted
	switch {
	case writeErr != nil:
		return rep, writeErr
	case readErr != nil:
		return rep, readErr
	case interrupted:
		return rep, fmt.Errorf("%w: %w", ErrInterrupted, context.Canceled)
	}
	return rep, nil
}

// runJob fetches one URL line within its total deadline and returns its
// record. Attempts run under ctx (which outlives an interrupt by the grace
// period); waits for a permit or a retry end when admit does.
func (e *Engine) runJob(ctx, admit context.Context, j *job, coll *collector) *Record {
	start := time.Now()
	rec := &Record{URL: j.shown, Input: j.input, Line: j.line, Phases: PhaseTimes{}, Tries: []Try{}}
	defer func() { rec.ElapsedMS = millis(time.Since(start)) }()
	if j.invalid != "" {
		rec.Error = &Error{Phase: PhaseInput, Kind: KindInvalid, Message: j.invalid}
		return rec
	}
	jobCtx, cancel := context.WithTimeoutCause(ctx, e.cfg.Timeout, context.DeadlineExceeded)
	defer cancel()
	// waitCtx is jobCtx that also ends when admitting stops.
	waitCtx, cancelWait := context.WithCancel(jobCtx)
	defer cancelWait()
	defer context.AfterFunc(admit, cancelWait)()

	var avoid []int
	for {
		res := e.attempt(jobCtx, waitCtx, j, avoid, coll)
		if res.proxy >= 0 {
			rec.Attempts++
			avoid = append(avoid, res.proxy)
		}
		wait, again := e.retryWait(jobCtx, rec.Attempts, res)
		if again && admit.Err() == nil && sleep(waitCtx, wait) {
			rec.Tries = append(rec.Tries, e.try(res))
			continue
		}
		e.fill(rec, res)
		if again {
			// An interrupt came before the retry could start: the URL is
			// not finished, and a resumed run takes it again.
			rec.OK = false
			rec.Error = &Error{Phase: PhaseQueue, Kind: KindCancelled, Message: "interrupted before retrying after: " + res.err.Message}
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
	phases     PhaseTimes
	err        *Error
	retryAfter time.Duration // from a Retry-After header, or 0
	hasRetryAf bool
	final      bool // a failure another attempt would not mend
	targetSide bool // the proxy answered that it could not reach the target
}

// retryWait decides whether the URL gets another attempt after res and how
// long to wait first. A wait that does not fit in what is left of the
// deadline means no retry: the URL fails now with this attempt's error.
func (e *Engine) retryWait(ctx context.Context, n int, res result) (time.Duration, bool) {
	if res.ok || res.err == nil || res.final || res.proxy < 0 || n > e.cfg.Retries || !retryable(res.err.Kind) || ctx.Err() != nil {
		return 0, false
	}
	wait := fullJitter(e.cfg.RetryBackoff, n)
	if res.hasRetryAf {
		wait = res.retryAfter
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
		return 0, false
	}
	return wait, true
}

// fullJitter is the n-th back-off (n from 1): a random duration up to
// base·2^(n-1).
func fullJitter(base time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	ceil := base << min(n-1, 20)
	if ceil <= 0 {
		ceil = base
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (e *Engine) fill(rec *Record, res result) {
	rec.OK, rec.Status, rec.Bytes, rec.File = res.ok, res.status, res.bytes, res.file
	rec.Phases, rec.Error = res.phases, res.err
	if res.proxy >= 0 {
		rec.Proxy, rec.Pool = e.routes[res.proxy].id, e.routes[res.proxy].pool
	}
}

func (e *Engine) try(res result) Try {
	t := Try{Status: res.status, ElapsedMS: millis(res.elapsed), Phases: res.phases, Error: res.err}
	if res.proxy >= 0 {
		t.Proxy, t.Pool = e.routes[res.proxy].id, e.routes[res.proxy].pool
	}
	return t
}

// attempt makes one attempt: it waits for a lease, sends the request through
// the leased route, reads the body, and gives the lease back only then.
func (e *Engine) attempt(jobCtx, waitCtx context.Context, j *job, avoid []int, coll *collector) (res result) {
	start := time.Now()
	res.proxy = -1
	lease, err := e.sched.Acquire(waitCtx, limits.Request{Host: j.host, Avoid: avoid})
	if err != nil {
		res.elapsed = time.Since(start)
		res.phases = PhaseTimes{PhaseQueue: millis(res.elapsed)}
		kind, msg := KindCancelled, "interrupted while waiting for a permit"
		if jobCtx.Err() != nil || !errors.Is(err, context.Canceled) {
			kind, msg = classify(err, PhaseQueue, jobCtx, jobCtx), e.message(err, jobCtx, jobCtx)
		}
		res.err = &Error{Phase: PhaseQueue, Kind: kind, Message: msg}
		return res
	}
	res.proxy = lease.Proxy
	rt := e.routes[lease.Proxy]
	defer func() { lease.Finish(outcome(rt, res)) }() // runs last: after the body is closed

	attemptCtx, cancel := context.WithCancelCause(jobCtx)
	defer cancel(nil)
	tr := newTracker(&e.cfg, rt.handshake(j.url), cancel)
	tr.queued(time.Since(start))
	defer func() {
		phase, phases := tr.finish()
		res.elapsed = time.Since(start)
		res.phases = phases
		if res.err != nil && res.err.Phase == "" {
			res.err.Phase = phase
		}
		coll.attempt(rt.id, j.host, res.ok, lease.ProxyInFlight, lease.HostInFlight, phases)
	}()

	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(attemptCtx, tr.clientTrace()), e.cfg.Method, j.url.String(), nil)
	if err != nil {
		res.err = &Error{Phase: PhaseRequest, Kind: KindOther, Message: e.redactor.String(err.Error())}
		return res
	}
	req.Header.Set("User-Agent", UserAgent)
	req.Header.Set("Accept", "*/*")
	for k, vs := range e.cfg.Header { // -H replaces a default of the same name, as in curl
		req.Header[k] = slices.Clone(vs)
	}
	if hs := e.cfg.Header.Get("Host"); hs != "" {
		req.Host = hs
	}
	tr.set(pConnect)
	resp, err := rt.client.Do(req)
	if err != nil {
		phase := tr.current()
		res.err = &Error{Phase: phase, Kind: classify(err, phase, attemptCtx, jobCtx), Message: e.message(err, attemptCtx, jobCtx)}
		res.targetSide = targetSide(err)
		return res
	}
	tr.gotHeaders()
	res.status = resp.StatusCode
	body := &progressReader{r: resp.Body, t: tr}
	defer resp.Body.Close()

	if e.retry[resp.StatusCode] {
		io.Copy(io.Discard, io.LimitReader(body, 64<<10)) // let the connection be reused
		res.err = &Error{Phase: PhaseHeaders, Kind: KindStatus, Message: resp.Status}
		res.retryAfter, res.hasRetryAf = retryAfter(resp.Header.Get("Retry-After"), time.Now())
		return res
	}
	if rt.proxy != nil && resp.StatusCode == http.StatusProxyAuthRequired {
		res.err = &Error{Phase: PhaseProxy, Kind: KindProxy, Message: "proxy answered " + resp.Status}
		return res
	}
	n, file, err := e.readBody(j, resp, body)
	res.bytes = n
	if err != nil {
		phase := tr.current()
		res.err = &Error{Phase: phase, Kind: classify(err, phase, attemptCtx, jobCtx), Message: e.message(err, attemptCtx, jobCtx)}
		var se *saveError
		res.final = errors.As(err, &se)
		return res
	}
	res.ok, res.file = true, file
	return res
}

// handshake reports whether attempts to u through this route have a proxy
// handshake after the TCP connect.
func (r *route) handshake(u *url.URL) bool {
	if r.proxy == nil {
		return false
	}
	return r.proxy.Scheme != "http" || u.Scheme == "https"
}

// message is the error text for a record: the cause of a timeout or
// deadline where there is one, never credentials.
func (e *Engine) message(err error, attemptCtx, jobCtx context.Context) string {
	if c := context.Cause(attemptCtx); c != nil && !errors.Is(c, context.Canceled) {
		var pt *phaseTimeout
		if errors.As(c, &pt) {
			return pt.Error()
		}
	}
	if jobCtx.Err() != nil {
		if errors.Is(context.Cause(jobCtx), context.DeadlineExceeded) {
			return fmt.Sprintf("total deadline of %s (-t) exceeded", e.cfg.Timeout)
		}
		return "interrupted"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return e.redactor.String(err.Error())
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

// retryAfter parses a Retry-After value: seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var secs int64
	if _, err := fmt.Sscanf(v, "%d", &secs); err == nil && fmt.Sprint(secs) == v {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 1<<31)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// outcome is what an attempt says about its proxy, for health and pushback.
func outcome(rt *route, res result) limits.Outcome {
	switch {
	case res.ok:
		return limits.Success
	case res.err == nil:
		return limits.Neutral
	case res.err.Kind == KindStatus:
		if res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable {
			return limits.Pushback
		}
		return limits.Success // the proxy carried it; the target answered
	case rt.proxy == nil, res.targetSide:
		return limits.Neutral
	}
	switch res.err.Kind {
	case KindRefused, KindProxy, KindDNS:
		return limits.ProxyFault
	case KindReset:
		if res.err.Phase != PhaseBody { // a body cut short may be the target's doing
			return limits.ProxyFault
		}
	case KindTimeout, KindTLS:
		switch res.err.Phase {
		case PhaseConnect, PhaseProxy, PhaseDNS:
			return limits.ProxyFault
		}
	}
	return limits.Neutral
}

// targetSide reports whether err is a proxy saying that it could not reach
// the target: a CONNECT answered 5xx (502 Bad Gateway, 504), or a SOCKS
// reply that the target's host or network is unreachable or refused. That
// is news about the target, and must not bench a proxy that did its job.
func targetSide(err error) bool {
	var pse *proxyStatusError
	if errors.As(err, &pse) {
		return pse.code >= 500
	}
	msg := err.Error()
	if !strings.Contains(msg, "socks connect") {
		return false
	}
	for _, reply := range []string{"network unreachable", "host unreachable", "connection refused", "TTL expired"} {
		if strings.HasSuffix(msg, "unknown error "+reply) {
			return true
		}
	}
	return false
}
