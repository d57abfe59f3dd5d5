package fetch

import (
	"context"
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/internal/connwatch"
	"github.com/fetch-dev/fetch/internal/h1"
)

const idleFlag = "--idle-timeout"

// pNone is the tracker's phase when no attempt is being tracked: before
// the first begins, and once it has finished.
const pNone = -1

// tracker follows an attempt through its phases and enforces the per-phase
// timeouts and the URL's deadline by cancelling the attempt's context; why
// it did (a *errkind.PhaseTimeout, context.DeadlineExceeded, or errkind.ErrLeaseLost) is its
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
	// remote is the connection the last request went on, as GotConn
	// told it, and remoteShown its address once known (see remoteAddr);
	// tlsState and tlsShown the last TLS facts made (see tlsFacts).
	remote      net.Conn
	remoteShown string
	tlsState    *tls.ConnectionState
	tlsShown    *results.TLS
	// hops are the redirects the attempt's client followed (see
	// redirects), in the tracker so that an attempt's result is not
	// moved to the heap for them; only the attempt's goroutine uses it.
	hops []results.Redirect

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
	_ h1.RemoteHooks    = (*tracker)(nil)
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
	t.remote, t.remoteShown = nil, ""
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
			t.stopLocked(&errkind.PhaseTimeout{Phase: results.Phases[max(t.phase, results.IndexQueue)], Limit: t.limit, Flag: t.flag})
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
