package fetch

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"sync"
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
// timeouts by cancelling the attempt's context with a *phaseTimeout cause.
// httptrace hooks may run concurrently and even after the attempt is over,
// so every method locks, and nothing changes once finish has been called.
type tracker struct {
	mu        sync.Mutex
	clock     clock
	cancel    context.CancelCauseFunc
	handshake bool // a proxy handshake follows the TCP connect (CONNECT, SOCKS, TLS to the proxy)
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
	connectTimer, headerTimer, idleTimer Timer
}

func newTracker(cfg *Config, handshake bool, cancel context.CancelCauseFunc) *tracker {
	return &tracker{
		clock:        clock{cfg.Clock},
		cancel:       cancel,
		handshake:    handshake,
		phase:        pNone,
		connectLimit: cfg.ConnectTimeout,
		headerLimit:  cfg.HeaderTimeout,
		idleLimit:    cfg.IdleTimeout,
	}
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

// finish stops the clocks and timers and returns the phase the attempt
// ended in and the milliseconds spent in each phase that happened.
func (t *tracker) finish() (string, PhaseTimes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := t.phase
	if !t.done {
		t.enter(pNone)
		t.done = true
		stop(t.connectTimer)
		stop(t.headerTimer)
		stop(t.idleTimer)
	}
	ms := make(PhaseTimes, 6)
	for i, d := range t.spent {
		if t.seen[i] {
			ms[Phases[i]] = millis(d)
		}
	}
	if last == pNone {
		last = pQueue
	}
	return Phases[last], ms
}

func stop(tm Timer) {
	if tm != nil {
		tm.Stop()
	}
}

// arm (re)starts a phase timer. When it fires it cancels the attempt with
// the phase the attempt is in by then. Call with t.mu held.
func (t *tracker) arm(tm *Timer, limit time.Duration, flag string) {
	if t.done || limit <= 0 {
		return
	}
	if *tm != nil {
		(*tm).Reset(limit)
		return
	}
	*tm = t.clock.afterFunc(limit, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.done {
			return
		}
		t.cancel(&phaseTimeout{phase: Phases[max(t.phase, pQueue)], limit: limit, flag: flag})
	})
}

// progress notes bytes moving and restarts the idle clock.
func (t *tracker) progress() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done && t.idleTimer != nil {
		t.idleTimer.Reset(t.idleLimit)
	}
}

// gotHeaders marks the start of the body phase.
func (t *tracker) gotHeaders() {
	t.mu.Lock()
	defer t.mu.Unlock()
	stop(t.headerTimer)
	t.enter(pBody)
	t.arm(&t.idleTimer, t.idleLimit, "--idle-timeout")
}

// clientTrace returns the hooks that drive the tracker. Redirects run more
// requests in the same attempt; their phases add up.
func (t *tracker) clientTrace() *httptrace.ClientTrace {
	with := func(f func()) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.done {
			f()
		}
	}
	// setup runs a connection-setup hook, unless the request already has
	// its connection.
	setup := func(f func()) {
		with(func() {
			if !t.connected {
				f()
			}
		})
	}
	return &httptrace.ClientTrace{
		GetConn: func(string) {
			with(func() {
				t.connected = false
				stop(t.headerTimer)
				stop(t.idleTimer)
				t.enter(pConnect)
				t.arm(&t.connectTimer, t.connectLimit, "--connect-timeout")
			})
		},
		DNSStart: func(httptrace.DNSStartInfo) { setup(func() { t.enter(pDNS) }) },
		DNSDone:  func(httptrace.DNSDoneInfo) { setup(func() { t.enter(pConnect) }) },
		ConnectStart: func(string, string) {
			setup(func() {
				if t.phase != pDNS {
					t.enter(pConnect)
				}
			})
		},
		ConnectDone: func(_, _ string, err error) {
			if err != nil {
				return
			}
			setup(func() {
				if t.handshake {
					t.enter(pProxy)
				} else {
					t.enter(pRequest)
				}
			})
		},
		TLSHandshakeStart: func() { setup(func() { t.enter(pTLS) }) },
		GotConn: func(info httptrace.GotConnInfo) {
			// The connection is set up: lift the deadline handshakeDeadline
			// put on it, or it would cut the body (and the connection's
			// later reuse) at --connect-timeout after the dial. From here
			// the idle, header and total timers bound the attempt.
			if info.Conn != nil {
				info.Conn.SetDeadline(time.Time{})
			}
			with(func() {
				t.connected = true
				stop(t.connectTimer)
				if info.Reused && t.phase == pConnect && !t.done {
					// A kept-alive connection: no connect happened, and
					// none is recorded (the contract omits it).
					t.phase, t.since = pRequest, t.clock.now()
				}
				t.enter(pRequest)
				t.arm(&t.idleTimer, t.idleLimit, "--idle-timeout")
			})
		},
		WroteRequest: func(httptrace.WroteRequestInfo) {
			with(func() {
				if t.phase != pRequest {
					return // not this request's, or too late to matter
				}
				stop(t.idleTimer)
				t.enter(pHeaders)
				t.arm(&t.headerTimer, t.headerLimit, "--header-timeout")
			})
		},
	}
}

// millis converts d to milliseconds rounded to a hundredth.
func millis(d time.Duration) float64 {
	return float64(d.Round(10*time.Microsecond)) / float64(time.Millisecond)
}
