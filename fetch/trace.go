package fetch

import (
	"context"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/internal/connwatch"
	"github.com/fetch-dev/fetch/internal/h1"
)

// phaseTimeout is the cancellation cause when a per-phase limit runs out.
type phaseTimeout struct {
	phase string
	limit time.Duration
	flag  string // the flag that set the limit
}

func (e *phaseTimeout) Error() string {
	return fmt.Sprintf("no progress in %s for %s (%s)", e.phase, e.limit, e.flag)
}

const idleFlag = "--idle-timeout"

// pNone is the tracker's phase when no attempt is being tracked: before
// the first begins, and once it has finished.
const pNone = -1

// tracker follows an attempt through its phases and enforces the per-phase
// timeouts and the URL's deadline by cancelling the attempt's context; why
// it did (a *phaseTimeout, context.DeadlineExceeded, or errLeaseLost) is its
// cause. A worker keeps one tracker
// for all its attempts, one after the other (begin starts each), so that
// an attempt allocates no hooks and no timer.
// httptrace hooks may run concurrently and even after the attempt is over,
// so every method locks, and nothing changes once finish has been called.
type tracker struct {
	// trace is the hooks of the attempt's requests (see withHooks); sawByte
	// is set when a byte of a response arrives.
	trace   httptrace.ClientTrace
	sawByte atomic.Bool
	body    progressReader // the attempt's response body

	mu     sync.Mutex
	clock  engineClock
	gen    uint64             // counts begin: which attempt is being tracked
	ctx    *hooked            // the attempt's context: its deadline, its route
	cancel context.CancelFunc // cancels the attempt's context
	why    error              // why the tracker cancelled it, or nil
	phase  int
	since  time.Time
	spent  [results.NumPhases]time.Duration
	seen   [results.NumPhases]bool
	done   bool
	// connected is set by GotConn and cleared by GetConn. A request can be
	// given an idle connection while the dial it started goes on in the
	// background; that dial's DNS, connect and TLS hooks still come, late,
	// and must not move the attempt back out of request, headers or body.
	connected bool

	// cfg is the run's, never changed: the per-phase limits, and what
	// decides an answer on its head (see BodyWanted).
	cfg *Config

	// The per-phase limit in force, if timerOn: limit, set by flag, counts
	// from armed. The connect, header and idle limits follow one another,
	// never two at once, so one timer serves them all, and lazily: it is
	// moved only when a limit runs out sooner than it is set for (at). When
	// it goes off early, as it does when the idle clock restarts, it is set
	// again for what is left.
	timer   clock.Timer
	running bool // timer is set, for at
	at      time.Time
	timerOn bool
	armed   time.Time
	limit   time.Duration
	flag    string

	// conn is the connection an exchange of the attempt reads and writes
	// (see Watch), cut once the attempt is cancelled; unhook ends the
	// watch on the attempts' parent context.
	conn   net.Conn
	cut    bool
	unhook func() bool

	// parent is the context the worker's attempts are made from: its
	// parent, carrying the tracker as the watcher of their connections
	// (connwatch.With) and as the HTTP/1.1 client's hooks (h1.WithHooks),
	// which the client and its dialer find there. Both run in the
	// attempt's goroutine, so that the tracker speaks for whichever
	// attempt is under way; put there once, for all the attempts, it
	// costs an attempt no allocation.
	parent context.Context
}

var (
	_ connwatch.Watcher = (*tracker)(nil)
	_ h1.Hooks          = (*tracker)(nil)
)

// newTracker returns a tracker for the attempts of one worker, whose
// contexts are all made from parent: when parent ends, the connection an
// attempt's exchange is waiting on is cut (see Watch).
func newTracker(cfg *Config, parent context.Context) *tracker {
	t := &tracker{
		clock: engineClock{cfg.Clock},
		done:  true,
		cfg:   cfg,
	}
	t.body.t = t
	t.trace = httptrace.ClientTrace{
		GetConn:              t.getConn,
		TLSHandshakeStart:    t.tlsHandshakeStart,
		GotConn:              t.gotConn,
		WroteRequest:         t.wroteRequest,
		GotFirstResponseByte: t.gotFirstByte,
	}
	t.unhook = context.AfterFunc(parent, t.interrupt)
	t.parent = connwatch.With(h1.WithHooks(parent, t), t)
	return t
}

// begin starts tracking an attempt that starts at start (in the queue,
// waiting for a lease), once the last one has finished, and returns its
// generation, for stop. ctx is the attempt's context, cancel cancels it,
// and the attempt ends at deadline (the URL's total deadline; zero for
// none): then the tracker cancels it with context.DeadlineExceeded.
func (t *tracker) begin(ctx context.Context, cancel context.CancelFunc, start, deadline time.Time) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gen++
	t.ctx = &hooked{Context: ctx, t: t, gen: t.gen, deadline: deadline}
	t.cancel, t.why = cancel, nil
	t.phase, t.since, t.done, t.connected, t.timerOn = results.IndexQueue, start, false, false, false
	t.spent, t.seen = [results.NumPhases]time.Duration{}, [results.NumPhases]bool{}
	t.sawByte.Store(false)
	if !deadline.IsZero() {
		t.setTimer(deadline)
	}
	return t.gen
}

// context is the attempt's context as its waits and requests see it: it
// has the URL's deadline, and its Err is context.DeadlineExceeded once
// that has passed.
func (t *tracker) context() context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctx
}

// leased notes the route the attempt was given: whether a proxy handshake
// follows the TCP connect, and its proxy's round tripper (nil for direct).
func (t *tracker) leased(handshake bool, via *routeTransport) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ctx.handshake, t.ctx.via = handshake, via // before any request carries ctx
}

// enter moves to phase p, charging the time since the last move to the
// phase being left. Call with t.mu held.
func (t *tracker) enter(p int) {
	if t.done || p == t.phase {
		return
	}
	now := t.clock.now()
	if t.phase != pNone {
		t.spent[t.phase] += now.Sub(t.since)
		t.seen[t.phase] = true
	}
	t.phase, t.since = p, now
}

func (t *tracker) set(p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.enter(p)
}

// current returns the phase the attempt is in, or queue before it began.
func (t *tracker) current() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase == pNone {
		return results.PhaseQueue
	}
	return results.Phases[t.phase]
}

// finish stops the clocks and timers and returns the phase the attempt
// ended in and the milliseconds spent in each phase that happened.
func (t *tracker) finish() (string, results.PhaseTimes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.phase
	t.body.r = nil
	if !t.done {
		t.enter(pNone)
		t.done = true
		t.disarm()
	}
	var s results.PhaseTimes
	for i, d := range t.spent {
		if t.seen[i] {
			s.SetAt(i, millis(d))
		}
	}
	if last == pNone {
		last = results.IndexQueue
	}
	return results.Phases[last], s
}

// close stops the timer for good; call it once the tracker's last attempt
// has finished. The timer stays set between attempts (see disarm), for up to
// a URL's deadline: left set, it would keep the tracker, its last attempt's
// context and the Engine that context leads to alive until it went off.
func (t *tracker) close() {
	t.unhook()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
	}
	t.running = false
}

// disarm lifts the per-phase limit in force. The timer stays set: it goes
// off for nothing, or for the next limit (see arm). Call with t.mu held.
func (t *tracker) disarm() { t.timerOn = false }

// arm puts the per-phase limit, set by flag, in force in place of the one
// in force, counting from the moment the phase in force began (every caller
// has just entered it: this saves reading the clock again). When it runs
// out it cancels the attempt with the phase the attempt is in by then.
// Call with t.mu held.
func (t *tracker) arm(limit time.Duration, flag string) {
	t.timerOn = false
	if t.done || limit <= 0 {
		return
	}
	t.limit, t.flag, t.armed, t.timerOn = limit, flag, t.since, true
	t.setTimer(t.since.Add(limit))
}

// setTimer has the timer go off by due. Call with t.mu held.
func (t *tracker) setTimer(due time.Time) {
	switch {
	case t.timer == nil:
		t.timer = t.clock.afterFunc(due.Sub(t.clock.now()), t.fire)
	case t.running && !due.Before(t.at):
		return // it goes off in time, and fire sets it again if need be
	default:
		t.timer.Reset(due.Sub(t.clock.now()))
	}
	t.running, t.at = true, due
}

// fire is the timer going off. When the URL's deadline has passed, or the
// per-phase limit in force has run out, it cancels the attempt; otherwise
// (the idle clock restarted since, or a limit that ends later took over)
// it sets the timer again for the next of the two.
func (t *tracker) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running = false
	if t.done {
		return
	}
	now, deadline := t.clock.now(), t.ctx.deadline
	if !deadline.IsZero() && !now.Before(deadline) {
		t.ctx.expired.Store(true)
		t.stopLocked(context.DeadlineExceeded)
		return
	}
	next := deadline
	if t.timerOn {
		end := t.armed.Add(t.limit)
		if !now.Before(end) {
			t.timerOn = false
			t.stopLocked(&phaseTimeout{phase: results.Phases[max(t.phase, results.IndexQueue)], limit: t.limit, flag: t.flag})
			return
		}
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	if !next.IsZero() {
		t.setTimer(next)
	}
}

// stop cancels attempt gen with cause, unless it is over or was already
// cancelled: the first cause stays.
func (t *tracker) stop(gen uint64, cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen == t.gen {
		t.stopLocked(cause)
	}
}

func (t *tracker) stopLocked(cause error) {
	if t.done || t.why != nil {
		return
	}
	t.why = cause
	t.cancel()
	t.cutLocked()
}

// Watch has c's reads and writes cut short (its deadline set in the past)
// once the attempt under way is cancelled, by the tracker or with its
// parent context, until Unwatch: what context.AfterFunc on the attempt's
// context would do, without adding to that context's children and making
// its Done channel for every request. The HTTP/1.1 client and the dialer
// ask it (see connwatch), from the attempt's goroutine: the connection is
// the attempt's. It returns false, and watches nothing, when no attempt is
// under way.
func (t *tracker) Watch(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return false
	}
	t.conn, t.cut = c, false
	if t.why != nil || t.ctx.Context.Err() != nil {
		t.cutLocked()
	}
	return true
}

// Unwatch ends the watch of c and reports whether c was left alone: false
// when it was cut, and so has its deadline in the past.
func (t *tracker) Unwatch(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn != c {
		// Not the connection watched (no exchange does this): whether it
		// was cut cannot be told, so it is closed rather than kept.
		return false
	}
	cut := t.cut
	t.conn, t.cut = nil, false
	return !cut
}

// interrupt cuts the watched connection: the parent context ended, and
// with it the attempt's. The attempt's is cancelled here first, as the
// parent's end may not have reached it yet (a context cancels its children
// in no set order, this AfterFunc's among them), so that a read or write
// the cut ends finds its context done, and its error is the context's.
func (t *tracker) interrupt() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		t.cancel()
	}
	t.cutLocked()
}

func (t *tracker) cutLocked() {
	if t.conn != nil && !t.cut {
		t.cut = true
		connwatch.Cut(t.conn)
	}
}

// cause is why the tracker cancelled the attempt, or nil when it did not.
// An attempt's error comes after its context is cancelled, and so after
// the cause is set.
func (t *tracker) cause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.why
}

// progress notes bytes moving and restarts the idle clock. It leaves the
// timer be: set for the old end, it goes off early and is set again.
func (t *tracker) progress() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		t.touch()
	}
}

// touch restarts the idle limit's clock, when that limit is in force: bytes
// moved. Call with t.mu held.
func (t *tracker) touch() {
	if t.timerOn && t.flag == idleFlag {
		t.armed = t.clock.now()
	}
}

// startBody moves the attempt into the body phase, under --idle-timeout.
// Call with t.mu held.
func (t *tracker) startBody() {
	t.enter(results.IndexBody)
	t.arm(t.cfg.IdleTimeout, idleFlag)
}

// gotHeaders marks the start of the body phase, unless the first read of
// the answer marked it already (see BodyBytes): its idle clock runs from
// the last bytes that read took.
func (t *tracker) gotHeaders() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.phase != results.IndexBody {
		t.startBody()
	}
}

// BodyWanted reports whether an attempt reads the body of an answer with
// status code and a body of length, rather than deciding on its head
// alone (see Config.decidesOnHead). The HTTP/1.1 client asks it.
func (t *tracker) BodyWanted(code int, length int64) bool {
	return !t.cfg.decidesOnHead(code, length)
}

// BodyBytes is the HTTP/1.1 client's word, in the attempt under way, that
// the first read of an answer has its head whole and waits on for the
// body, and again after each read of the body that leaves more to wait
// for: the attempt is in the body phase from the first, under
// --idle-timeout, and each later one is progress.
func (t *tracker) BodyBytes() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || t.why != nil { // over, or being stopped in the phase it is in
		return
	}
	if t.phase != results.IndexBody {
		t.startBody()
	} else {
		t.touch()
	}
}

// trackerKey is the context key under which a request carries its attempt
// (a *hooked), for the dialer (see traceDial).
type trackerKey struct{}

// hooked is the context of an attempt: the context it was begun with, with
// the URL's deadline (which the tracker enforces), the tracker and which of
// its attempts this is. A dial goes on with the context of the request
// that started it, perhaps into a later attempt: its hooks are for this
// one only.
type hooked struct {
	context.Context
	t         *tracker
	gen       uint64
	deadline  time.Time
	expired   atomic.Bool     // the deadline passed: set before the context is cancelled
	handshake bool            // a proxy handshake (CONNECT, SOCKS, TLS to the proxy) follows the TCP connect
	via       *routeTransport // the route's proxy, for proxyOfRequest; nil for direct
}

func (h *hooked) Deadline() (time.Time, bool) {
	if h.deadline.IsZero() {
		return h.Context.Deadline()
	}
	return h.deadline, true
}

func (h *hooked) Err() error {
	err := h.Context.Err()
	if err != nil && h.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

func (h *hooked) Value(key any) any {
	if key == (trackerKey{}) {
		return h
	}
	return h.Context.Value(key)
}

// withHooks returns the attempt's context with its request hooks.
// Redirects run more requests in the same attempt; their phases add up.
// The hooks are methods, made once per tracker, so that a hook costs a
// lock and no allocation.
//
// The hooks of a dial (DNS, connect) are not among them: net/http would
// make a closure for each on every request, though most requests reuse a
// connection. The dialer asks for them, for the dials it makes (traceDial).
func (t *tracker) withHooks() context.Context {
	return httptrace.WithClientTrace(t.context(), &t.trace)
}

// dialHooks are the hooks of one dial, for attempt gen of t: its DNS
// lookup and TCP connect. A dial's hooks may come late, when its attempt is
// over and the next one has begun; they are ignored then.
type dialHooks struct {
	t   *tracker
	gen uint64
}

// dialTrace returns the hooks of a dial for attempt gen.
func (t *tracker) dialTrace(gen uint64) *httptrace.ClientTrace {
	d := &dialHooks{t: t, gen: gen}
	return &httptrace.ClientTrace{
		DNSStart:     d.dnsStart,
		DNSDone:      d.dnsDone,
		ConnectStart: d.connectStart,
		ConnectDone:  d.connectDone,
	}
}

// traceDial has dial report its DNS lookup and connect to the tracker of
// the request that started it, when there is one. net/http dials with the
// values of that request's context, and goes on with a dial in the
// background when the request took another connection: the tracker's
// hooks then come late, and it ignores them (see tracker.connected and
// dialHooks).
func traceDial(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h, ok := ctx.Value(trackerKey{}).(*hooked); ok {
			ctx = httptrace.WithClientTrace(ctx, h.t.dialTrace(h.gen))
		}
		return dial(ctx, network, addr)
	}
}

// gotFirstByte notes that a byte of a response arrived.
func (t *tracker) gotFirstByte() { t.sawByte.Store(true) }

func (t *tracker) getConn(string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.connected = false
	t.enter(results.IndexConnect)
	t.arm(t.cfg.ConnectTimeout, "--connect-timeout")
}

// setup moves to phase p from a connection-setup hook of attempt gen,
// unless the request already has its connection: a dial it started may go
// on in the background, and its hooks come late. Call with t.mu held.
func (t *tracker) setup(gen uint64, p int) {
	if gen == t.gen && !t.done && !t.connected {
		t.enter(p)
	}
}

// tlsHandshakeStart is a request hook, for whichever attempt is being
// tracked: a handshake of a dial that outlived its attempt moves the next
// one to tls only while that one waits for a connection, and net/http
// gives the connection to the first request waiting for one.
func (t *tracker) tlsHandshakeStart() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.setup(t.gen, results.IndexTLS)
}

func (d *dialHooks) dnsStart(httptrace.DNSStartInfo) { d.move(results.IndexDNS) }
func (d *dialHooks) dnsDone(httptrace.DNSDoneInfo)   { d.move(results.IndexConnect) }

func (d *dialHooks) move(p int) {
	d.t.mu.Lock()
	defer d.t.mu.Unlock()
	d.t.setup(d.gen, p)
}

func (d *dialHooks) connectStart(string, string) {
	d.t.mu.Lock()
	defer d.t.mu.Unlock()
	if d.t.phase != results.IndexDNS {
		d.t.setup(d.gen, results.IndexConnect)
	}
}

func (d *dialHooks) connectDone(_, _ string, err error) {
	if err != nil {
		return
	}
	d.t.mu.Lock()
	defer d.t.mu.Unlock()
	if d.t.ctx.handshake {
		d.t.setup(d.gen, results.IndexProxy)
	} else {
		d.t.setup(d.gen, results.IndexRequest)
	}
}

func (t *tracker) gotConn(info httptrace.GotConnInfo) {
	// The connection is set up: lift the deadline handshakeDeadline put on
	// it, or it would cut the body (and the connection's later reuse) at
	// --connect-timeout after the dial. From here the idle, header and
	// total timers bound the attempt. Every time, a reused connection's
	// too: net/http pools a connection whose dial went on in the
	// background, after its request took another, as one reused, though
	// no request has had it yet.
	if info.Conn != nil {
		info.Conn.SetDeadline(time.Time{})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	t.connected = true
	t.disarm()
	if info.Reused && t.phase == results.IndexConnect {
		// A kept-alive connection: no connect happened, and none is
		// recorded (the contract omits it).
		t.phase, t.since = results.IndexRequest, t.clock.now()
	}
	t.enter(results.IndexRequest)
	t.arm(t.cfg.IdleTimeout, idleFlag)
}

func (t *tracker) wroteRequest(httptrace.WroteRequestInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || t.phase != results.IndexRequest {
		return // too late, or not this request's
	}
	t.enter(results.IndexHeaders)
	t.arm(t.cfg.HeaderTimeout, "--header-timeout")
}

// queueTimes are the phases of an attempt that ended waiting for its turn.
func queueTimes(ms float64) results.PhaseTimes {
	var p results.PhaseTimes
	p.SetAt(results.IndexQueue, ms)
	return p
}

// millis converts d to milliseconds rounded to a hundredth.
func millis(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}
