package fetch

import (
	"context"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
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

// phase positions in tracker arrays, in the order of Phases.
const (
	pInput = iota
	pQueue
	pDNS
	pConnect
	pProxy
	pTLS
	pRequest
	pHeaders
	pBody
	numPhases
	pNone = -1
)

// tracker follows one attempt through its phases and enforces the per-phase
// timeouts by cancelling the attempt's context; why it did (a
// *phaseTimeout, or errLeaseLost) is its cause.
// httptrace hooks may run concurrently and even after the attempt is over,
// so every method locks, and nothing changes once finish has been called.
type tracker struct {
	// trace is the hooks of the attempt's requests (see withHooks); sawByte
	// is set when a byte of a response arrives.
	trace   httptrace.ClientTrace
	sawByte atomic.Bool

	mu        sync.Mutex
	clock     clock
	cancel    context.CancelFunc // cancels the attempt's context
	why       error              // why the tracker cancelled it, or nil
	handshake bool               // a proxy handshake follows the TCP connect (CONNECT, SOCKS, TLS to the proxy)
	phase     int
	since     time.Time
	spent     [numPhases]time.Duration
	seen      [numPhases]bool
	done      bool
	// connected is set by GotConn and cleared by GetConn. A request can be
	// given an idle connection while the dial it started goes on in the
	// background; that dial's DNS, connect and TLS hooks still come, late,
	// and must not move the attempt back out of request, headers or body.
	connected bool

	connectLimit, headerLimit, idleLimit time.Duration
	// timer is the per-phase timer: the connect, header and idle limits
	// follow one another, never two at once, so one timer serves them all,
	// re-armed by arm for the one in force (limit and flag since armed).
	timer   Timer
	timerOn bool
	armed   time.Time
	limit   time.Duration
	flag    string
}

func newTracker(cfg *Config, handshake bool, cancel context.CancelFunc) *tracker {
	t := &tracker{
		clock:        clock{cfg.Clock},
		cancel:       cancel,
		handshake:    handshake,
		phase:        pNone,
		connectLimit: cfg.ConnectTimeout,
		headerLimit:  cfg.HeaderTimeout,
		idleLimit:    cfg.IdleTimeout,
	}
	t.trace = httptrace.ClientTrace{
		GetConn:              t.getConn,
		TLSHandshakeStart:    t.tlsHandshakeStart,
		GotConn:              t.gotConn,
		WroteRequest:         t.wroteRequest,
		GotFirstResponseByte: t.gotFirstByte,
	}
	return t
}

// queued records time spent waiting for the lease.
func (t *tracker) queued(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spent[pQueue] += d
	t.seen[pQueue] = true
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
		return PhaseQueue
	}
	return Phases[t.phase]
}

// spans are the milliseconds an attempt spent in each phase, by phase
// index, and which phases happened: PhaseTimes without the map, for the
// report's statistics.
type spans struct {
	ms   [numPhases]float64
	seen [numPhases]bool
}

// times returns s as a record shows it.
func (s *spans) times() PhaseTimes {
	n := 0
	for _, seen := range s.seen {
		if seen {
			n++
		}
	}
	pt := make(PhaseTimes, n)
	for i, seen := range s.seen {
		if seen {
			pt[Phases[i]] = s.ms[i]
		}
	}
	return pt
}

// finish stops the clocks and timers and returns the phase the attempt
// ended in and the milliseconds spent in each phase that happened.
func (t *tracker) finish() (string, spans) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.phase
	if !t.done {
		t.enter(pNone)
		t.done = true
		t.disarm()
	}
	var s spans
	for i, d := range t.spent {
		if t.seen[i] {
			s.ms[i], s.seen[i] = millis(d), true
		}
	}
	if last == pNone {
		last = pQueue
	}
	return Phases[last], s
}

// disarm stops the per-phase timer. Call with t.mu held.
func (t *tracker) disarm() {
	if t.timerOn {
		t.timer.Stop()
		t.timerOn = false
	}
}

// arm (re)starts the per-phase timer for limit, set by flag, in place of
// the limit in force, counting from the moment the phase in force began
// (every caller has just entered it: this saves reading the clock again).
// When it runs out it cancels the attempt with the phase the attempt is in
// by then. Call with t.mu held.
func (t *tracker) arm(limit time.Duration, flag string) {
	t.disarm()
	if t.done || limit <= 0 {
		return
	}
	t.limit, t.flag, t.armed, t.timerOn = limit, flag, t.since, true
	if t.timer != nil {
		t.timer.Reset(limit)
		return
	}
	t.timer = t.clock.afterFunc(limit, t.fire)
}

// fire is the per-phase timer running out. A timer that went off as it
// was stopped or re-armed finds timerOn cleared, or less than the new
// limit gone since it was armed, and does nothing.
func (t *tracker) fire() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || !t.timerOn || t.clock.since(t.armed) < t.limit {
		return
	}
	t.timerOn = false
	t.stopLocked(&phaseTimeout{phase: Phases[max(t.phase, pQueue)], limit: t.limit, flag: t.flag})
}

// stop cancels the attempt with cause, unless it is over or was already
// cancelled: the first cause stays.
func (t *tracker) stop(cause error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopLocked(cause)
}

func (t *tracker) stopLocked(cause error) {
	if t.done || t.why != nil {
		return
	}
	t.why = cause
	t.cancel()
}

// cause is why the tracker cancelled the attempt, or nil when it did not.
// An attempt's error comes after its context is cancelled, and so after
// the cause is set.
func (t *tracker) cause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.why
}

// progress notes bytes moving and restarts the idle clock.
func (t *tracker) progress() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done && t.timerOn && t.flag == idleFlag {
		t.armed = t.clock.now()
		t.timer.Reset(t.idleLimit)
	}
}

// gotHeaders marks the start of the body phase.
func (t *tracker) gotHeaders() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.enter(pBody)
	t.arm(t.idleLimit, idleFlag)
}

// trackerKey is the context key under which a request carries its tracker,
// for the dialer (see traceDial).
type trackerKey struct{}

// withHooks returns ctx carrying the tracker and its request hooks. Redirects
// run more requests in the same attempt; their phases add up. The hooks
// are methods, made once per tracker, so that a hook costs a lock and no
// allocation.
//
// The hooks of a dial (DNS, connect) are not among them: net/http would
// make a closure for each on every request, though most requests reuse a
// connection. The dialer asks for them, for the dials it makes (traceDial).
func (t *tracker) withHooks(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(context.WithValue(ctx, trackerKey{}, t), &t.trace)
}

// dialTrace returns the hooks of one dial: its DNS lookup and TCP connect.
func (t *tracker) dialTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		DNSStart:     t.dnsStart,
		DNSDone:      t.dnsDone,
		ConnectStart: t.connectStart,
		ConnectDone:  t.connectDone,
	}
}

// traceDial has dial report its DNS lookup and connect to the tracker of
// the request that started it, when there is one. net/http dials with the
// values of that request's context, and goes on with a dial in the
// background when the request took another connection: the tracker's
// hooks then come late, and it ignores them (see tracker.connected).
func traceDial(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if t, ok := ctx.Value(trackerKey{}).(*tracker); ok {
			ctx = httptrace.WithClientTrace(ctx, t.dialTrace())
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
	t.enter(pConnect)
	t.arm(t.connectLimit, "--connect-timeout")
}

// setup moves to phase p from a connection-setup hook, unless the request
// already has its connection: a dial it started may go on in the
// background, and its hooks come late.
func (t *tracker) setup(p int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done && !t.connected {
		t.enter(p)
	}
}

func (t *tracker) dnsStart(httptrace.DNSStartInfo) { t.setup(pDNS) }
func (t *tracker) dnsDone(httptrace.DNSDoneInfo)   { t.setup(pConnect) }
func (t *tracker) tlsHandshakeStart()              { t.setup(pTLS) }

func (t *tracker) connectStart(string, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done && !t.connected && t.phase != pDNS {
		t.enter(pConnect)
	}
}

func (t *tracker) connectDone(_, _ string, err error) {
	if err != nil {
		return
	}
	if t.handshake {
		t.setup(pProxy)
	} else {
		t.setup(pRequest)
	}
}

func (t *tracker) gotConn(info httptrace.GotConnInfo) {
	// The connection is set up: lift the deadline handshakeDeadline put on
	// it, or it would cut the body (and the connection's later reuse) at
	// --connect-timeout after the dial. From here the idle, header and
	// total timers bound the attempt.
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
	if info.Reused && t.phase == pConnect {
		// A kept-alive connection: no connect happened, and none is
		// recorded (the contract omits it).
		t.phase, t.since = pRequest, t.clock.now()
	}
	t.enter(pRequest)
	t.arm(t.idleLimit, idleFlag)
}

func (t *tracker) wroteRequest(httptrace.WroteRequestInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done || t.phase != pRequest {
		return // too late, or not this request's
	}
	t.enter(pHeaders)
	t.arm(t.headerLimit, "--header-timeout")
}

// millis converts d to milliseconds rounded to a hundredth.
func millis(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}
