package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/proxystatus"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// runJob fetches one URL line within its total deadline and returns its
// record. Attempts run under ctx (which outlives an interrupt by the grace
// period); waits for a permit or a retry end when admit does.
func (e *Engine) runJob(ctx, admit context.Context, j *input.Line, tr *tracker, coll *collector) *results.Record {
	clk := e.clock()
	start := clk.now()
	rec := &results.Record{URL: j.Shown, Input: j.Input, Line: j.Number, Tries: []results.Try{}}
	if r := j.Request; r != nil {
		rec.ID, rec.Meta = r.ID, r.Meta
	}
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
	facts      results.Facts

	// What the proxy said in its answer: the Proxy-Status member for the
	// record, and whose failure it reported, when fetch knows.
	proxyStatus *results.ProxyStatus
	said        proxystatus.Side
}

func (e *Engine) fill(rec *results.Record, res result) {
	rec.OK, rec.Status, rec.Bytes, rec.File, rec.Body = res.ok, res.status, res.bytes, res.file, res.body
	rec.Phases, rec.Error, rec.ProxyStatus = res.phases, res.err, res.proxyStatus
	rec.Facts = res.facts
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
		case errors.As(err, new(*limits.HostBannedError)):
			res.err = e.hostBannedError(err)
		case ctx.Err() != nil || !errors.Is(err, context.Canceled):
			res.err = e.failure(err, results.PhaseQueue, ctx, tr)
			var we *limits.WaitError
			if errors.As(err, &we) && res.err.Kind == results.KindDeadline {
				res.err = e.newError(results.PhaseQueue, results.KindDeadline, fmt.Sprintf("%s: waited %s for %s",
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
		down, answered := noResponse(rt, res, sawByte), res.status != 0 || sawByte
		if res.said != proxystatus.Unknown { // the proxy said whether the target answered
			down, answered = res.said == proxystatus.Unreached, false
		}
		switch {
		case down:
			e.hostFails.failed(j.Host)
		case answered:
			e.hostFails.answered(j.Host)
		}
		if res.banned {
			coll.ban(rt, j.Host)
		}
		o := outcome(rt, res)
		if o == limits.PushedBack && res.hasRetryAf {
			lease.RetryAfter = res.retryAfter // the host may wait as a whole
		}
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
				tr.stop(gen, errkind.ErrLeaseLost)
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
		coll.observe(rt, &res)
	}()

	req := e.newRequest(tr.withHooks(), j)
	tr.set(results.IndexConnect)
	c := e.transports.client(rt)
	c.Hops = &tr.hops
	resp, err := c.Do(req)
	res.facts.Redirects = tr.redirects()
	if err != nil {
		res.err = e.failure(err, tr.current(), ctx, tr)
		res.targetSide = errkind.TargetSide(err)
		res.inTunnel = rt.tunnels(j.URL) && afterTunnel(res.err.Phase)
		res.rejected = errkind.CredentialsRejected(err)
		if pse := (*errkind.ProxyStatusError)(nil); errors.As(err, &pse) && !res.rejected {
			e.heard(&res, &pse.Says, pse.Status)
		}
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
	e.responseFacts(&res.facts, j, tr, resp)
	body := &tr.body
	body.r = resp.Body
	defer resp.Body.Close()

	if rt.proxy() && !rt.tunnels(j.URL) && resp.StatusCode != http.StatusProxyAuthRequired {
		// The proxy's own answer: what it says may be the target's failure.
		if says := proxystatus.Read(resp.Header, resp.StatusCode); e.heard(res, &says, resp.Status) {
			io.Copy(io.Discard, io.LimitReader(body, 64<<10)) // let the connection be reused
			return
		}
	}
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
	n, file, head, err := e.readBody(j, resp, rest, &res.facts.SHA256)
	res.body = head
	res.bytes = n
	if err != nil {
		res.err = e.failure(err, tr.current(), ctx, tr)
		var se *errkind.SaveError
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
	case !rt.proxy(), res.targetSide, res.inTunnel, res.said == proxystatus.Policy:
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
