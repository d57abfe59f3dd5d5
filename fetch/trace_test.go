package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock/clocktest"
)

// trackerStep is one step of a tracker row: call a hook (or none), then
// move the fake clock, then check the phase and the attempt's cancellation.
type trackerStep struct {
	hook    string        // see (*trackerRun).call; "" for none
	advance time.Duration // after the hook
	phase   string        // the phase after the step
	cause   string        // the attempt's cancellation cause after it, "" for none
}

// trackerRun drives one tracker on a fake clock.
type trackerRun struct {
	clock *clocktest.Clock
	ctx   context.Context
	tr    *tracker
	ct    *httptrace.ClientTrace // the request's hooks
	dt    *httptrace.ClientTrace // a dial's
}

func newTrackerRun(t *testing.T, cfg Config, handshake bool) *trackerRun {
	r := &trackerRun{clock: clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))}
	cfg.Clock = r.clock
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.ctx, r.tr = ctx, newTracker(&cfg, context.Background())
	gen := r.tr.begin(ctx, cancel, r.clock.Now(), time.Time{})
	r.tr.leased(handshake, nil)
	r.ct, r.dt = &r.tr.trace, r.tr.dialTrace(gen)
	return r
}

func (r *trackerRun) call(t *testing.T, hook string) {
	const addr = "127.0.0.1:80"
	switch hook {
	case "":
	case "GetConn":
		r.ct.GetConn(addr)
	case "DNSStart":
		r.dt.DNSStart(httptrace.DNSStartInfo{Host: "a.example"})
	case "DNSDone":
		r.dt.DNSDone(httptrace.DNSDoneInfo{})
	case "ConnectStart":
		r.dt.ConnectStart("tcp", addr)
	case "ConnectDone":
		r.dt.ConnectDone("tcp", addr, nil)
	case "TLSHandshakeStart":
		r.ct.TLSHandshakeStart()
	case "GotConn":
		r.ct.GotConn(httptrace.GotConnInfo{})
	case "GotConn reused":
		r.ct.GotConn(httptrace.GotConnInfo{Reused: true})
	case "WroteRequest":
		r.ct.WroteRequest(httptrace.WroteRequestInfo{})
	case "gotHeaders":
		r.tr.gotHeaders()
	case "progress":
		r.tr.progress()
	case "finish":
		r.tr.finish()
	default:
		t.Fatalf("no hook %q", hook)
	}
}

func (r *trackerRun) run(t *testing.T, steps []trackerStep) {
	t.Helper()
	for i, s := range steps {
		r.call(t, s.hook)
		r.clock.Advance(s.advance)
		cause := ""
		if c := r.tr.cause(); c != nil {
			cause = c.Error()
		}
		if (r.ctx.Err() != nil) != (cause != "") {
			t.Fatalf("step %d (%s, +%s): context error %v with cause %q", i, s.hook, s.advance, r.ctx.Err(), cause)
		}
		if cause != s.cause {
			t.Fatalf("step %d (%s, +%s): cause %q, want %q", i, s.hook, s.advance, cause, s.cause)
		}
		if s.phase != "" {
			if got := r.tr.current(); got != s.phase {
				t.Fatalf("step %d (%s, +%s): phase %s, want %s", i, s.hook, s.advance, got, s.phase)
			}
		}
	}
}

// TestTrackerTimeouts runs the tracker on a fake clock: each per-phase
// timeout fires exactly at its limit (not a nanosecond before), in the
// phase the attempt is in by then, and progress or the next phase moves
// the clocks as the flags say.
func TestTrackerTimeouts(t *testing.T) {
	const limit = 300 * time.Millisecond
	const ns = time.Nanosecond
	connect := "no progress in %s for 300ms (--connect-timeout)"
	msg := func(f, phase string) string { return fmt.Sprintf(f, phase) }
	for _, tc := range []struct {
		name      string
		handshake bool // a proxy handshake follows the connect
		steps     []trackerStep
		phases    map[string]float64 // after finish; nil: not checked
	}{
		{
			name: "connect timeout at its limit",
			steps: []trackerStep{
				{hook: "GetConn", advance: limit - ns, phase: results.PhaseConnect},
				{advance: ns, phase: results.PhaseConnect, cause: msg(connect, results.PhaseConnect)},
			},
		},
		{
			name: "connect timeout covers dns",
			steps: []trackerStep{
				{hook: "GetConn", advance: 0},
				{hook: "DNSStart", advance: limit - ns, phase: results.PhaseDNS},
				{advance: ns, cause: msg(connect, results.PhaseDNS)},
			},
		},
		{
			name:      "connect timeout covers the proxy handshake and tls",
			handshake: true,
			steps: []trackerStep{
				{hook: "GetConn", advance: 100 * time.Millisecond},
				{hook: "ConnectStart", advance: 0, phase: results.PhaseConnect},
				{hook: "ConnectDone", advance: 100 * time.Millisecond, phase: results.PhaseProxy},
				{hook: "TLSHandshakeStart", advance: 100*time.Millisecond - ns, phase: results.PhaseTLS},
				{advance: ns, cause: msg(connect, results.PhaseTLS)},
			},
		},
		{
			name: "header timeout at its limit, from the request written",
			steps: []trackerStep{
				{hook: "GetConn", advance: 100 * time.Millisecond},
				{hook: "GotConn", advance: 200 * time.Millisecond, phase: results.PhaseRequest},
				{hook: "WroteRequest", advance: limit - ns, phase: results.PhaseHeaders}, // past the connect limit: that timer stopped
				{advance: ns, cause: "no progress in headers for 300ms (--header-timeout)"},
			},
		},
		{
			name: "idle timeout while sending the request",
			steps: []trackerStep{
				{hook: "GetConn", advance: 0},
				{hook: "GotConn", advance: limit - ns, phase: results.PhaseRequest},
				{advance: ns, cause: "no progress in request for 300ms (--idle-timeout)"},
			},
		},
		{
			name: "idle timeout in the body, restarted by progress",
			steps: []trackerStep{
				{hook: "GetConn", advance: 10 * time.Millisecond},
				{hook: "GotConn", advance: 20 * time.Millisecond},
				{hook: "WroteRequest", advance: 100 * time.Millisecond},
				{hook: "gotHeaders", advance: limit - ns, phase: results.PhaseBody}, // past the header limit: that timer stopped
				{hook: "progress", advance: limit - ns},
				{hook: "progress", advance: limit - ns},
				{advance: ns, cause: "no progress in body for 300ms (--idle-timeout)"},
			},
			phases: map[string]float64{results.PhaseQueue: 0, results.PhaseConnect: 10, results.PhaseRequest: 20, results.PhaseHeaders: 100, results.PhaseBody: 900},
		},
		{
			name: "a reused connection records no connect",
			steps: []trackerStep{
				{hook: "GetConn", advance: 0},
				{hook: "GotConn reused", advance: 5 * time.Millisecond, phase: results.PhaseRequest},
				{hook: "WroteRequest", advance: 50 * time.Millisecond, phase: results.PhaseHeaders},
				{hook: "gotHeaders", advance: 7 * time.Millisecond, phase: results.PhaseBody},
			},
			phases: map[string]float64{results.PhaseQueue: 0, results.PhaseRequest: 5, results.PhaseHeaders: 50, results.PhaseBody: 7},
		},
		{
			name: "finish stops every timer",
			steps: []trackerStep{
				{hook: "GetConn", advance: 0},
				{hook: "GotConn", advance: 0},
				{hook: "WroteRequest", advance: 0},
				{hook: "finish", advance: time.Hour},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ConnectTimeout, cfg.HeaderTimeout, cfg.IdleTimeout = limit, limit, limit
			r := newTrackerRun(t, cfg, tc.handshake)
			r.run(t, tc.steps)
			if tc.phases == nil {
				return
			}
			if _, phases := r.tr.finish(); phases != phaseTimes(tc.phases) {
				t.Errorf("phases %v, want %v", phases, phaseTimes(tc.phases))
			}
		})
	}
}

// TestTrackerIgnoresLateHooks replays the hooks of a request that was given
// an idle connection while its own dial went on: the dial's hooks come after
// GotConn, and a WroteRequest may come after the headers. Neither may move
// the attempt back a phase or restart the header timer during the body.
func TestTrackerIgnoresLateHooks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HeaderTimeout = 20 * time.Millisecond
	r := newTrackerRun(t, cfg, true)
	r.run(t, []trackerStep{
		{hook: "GetConn"},
		{hook: "ConnectStart"},
		{hook: "GotConn reused"},
		{hook: "ConnectDone", phase: results.PhaseRequest}, // the background dial ends
		{hook: "TLSHandshakeStart", phase: results.PhaseRequest},
		{hook: "WroteRequest", phase: results.PhaseHeaders},
		{hook: "gotHeaders", phase: results.PhaseBody},
		{hook: "WroteRequest", phase: results.PhaseBody}, // late
		{advance: 3 * cfg.HeaderTimeout, phase: results.PhaseBody},
	})
	phase, phases := r.tr.finish()
	if phase != results.PhaseBody {
		t.Errorf("finished in %s, want body", phase)
	}
	if _, ok := phases.Get(results.PhaseTLS); ok {
		t.Errorf("a late TLS hook was counted: %v", phases)
	}
}

// TestTrackerShorterLimitAfterLonger has a short limit follow a long one:
// the timer, set lazily, must be moved sooner for it; and a long limit
// after a short one must not fire at the short one's end.
func TestTrackerShorterLimitAfterLonger(t *testing.T) {
	const ns = time.Nanosecond
	cfg := DefaultConfig()
	cfg.ConnectTimeout, cfg.IdleTimeout, cfg.HeaderTimeout = 50*time.Millisecond, time.Second, 100*time.Millisecond
	r := newTrackerRun(t, cfg, false)
	r.run(t, []trackerStep{
		{hook: "GetConn", advance: 40 * time.Millisecond},          // connect: 50ms
		{hook: "GotConn", advance: 10 * time.Millisecond},          // idle: 1s, past the connect limit's end
		{hook: "WroteRequest", advance: 100*time.Millisecond - ns}, // headers: 100ms, sooner than the idle end
		{advance: ns, cause: "no progress in headers for 100ms (--header-timeout)"},
	})
}

// TestTrackerReused runs two attempts on one tracker, as a worker does:
// what is left of the first (its timer, a dial of its own still going on,
// a lost lease told late) must not touch the second.
func TestTrackerReused(t *testing.T) {
	const limit = 300 * time.Millisecond
	cfg := DefaultConfig()
	cfg.ConnectTimeout, cfg.HeaderTimeout, cfg.IdleTimeout = limit, limit, limit
	r := newTrackerRun(t, cfg, false)
	first := r.tr.gen
	oldDial := r.dt
	r.run(t, []trackerStep{
		{hook: "GetConn", advance: 10 * time.Millisecond},
		{hook: "GotConn reused", advance: 20 * time.Millisecond},
		{hook: "WroteRequest", advance: limit / 2}, // the timer is set for the header limit
	})
	r.tr.finish()

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	r.ctx = ctx
	r.tr.begin(ctx, cancel, r.clock.Now(), time.Time{})
	if r.tr.current() != results.PhaseQueue || r.tr.cause() != nil || r.tr.sawByte.Load() {
		t.Fatalf("a new attempt starts in %s, cause %v, sawByte %v", r.tr.current(), r.tr.cause(), r.tr.sawByte.Load())
	}
	r.tr.stop(first, errkind.ErrLeaseLost) // the first attempt's lease, lost too late
	r.run(t, []trackerStep{
		{hook: "GetConn", advance: 5 * time.Millisecond, phase: results.PhaseConnect},
	})
	oldDial.ConnectStart("tcp", "127.0.0.1:80") // the first attempt's dial
	oldDial.ConnectDone("tcp", "127.0.0.1:80", nil)
	r.run(t, []trackerStep{
		// The first attempt's header limit would end here: nothing happens.
		{advance: limit/2 + 5*time.Millisecond, phase: results.PhaseConnect},
		{advance: limit - limit/2 - 10*time.Millisecond - time.Nanosecond, phase: results.PhaseConnect},
		{advance: time.Nanosecond, cause: "no progress in connect for 300ms (--connect-timeout)"},
	})
	_, phases := r.tr.finish()
	if want := phaseTimes(map[string]float64{results.PhaseQueue: 0, results.PhaseConnect: 300}); phases != want {
		t.Errorf("second attempt's phases %v, want only its own connect of 300ms", phases)
	}
}

// TestTrackerDeadline: the URL's deadline ends the attempt at its time,
// whatever phase it is in and whatever limit is in force, from the wait
// for a lease on; the context says so (Deadline, Err).
func TestTrackerDeadline(t *testing.T) {
	const ns = time.Nanosecond
	for _, tc := range []struct {
		name  string
		steps []trackerStep // the deadline is 100ms after begin
	}{
		{name: "waiting for a lease", steps: []trackerStep{
			{advance: 100*time.Millisecond - ns, phase: results.PhaseQueue},
			{advance: ns, cause: context.DeadlineExceeded.Error()},
		}},
		{name: "in the body, sooner than the idle limit", steps: []trackerStep{
			{advance: 10 * time.Millisecond},
			{hook: "GetConn", advance: 10 * time.Millisecond},
			{hook: "GotConn"},
			{hook: "WroteRequest", advance: 10 * time.Millisecond},
			{hook: "gotHeaders", advance: 60 * time.Millisecond},
			{hook: "progress", advance: 10*time.Millisecond - ns, phase: results.PhaseBody},
			{advance: ns, cause: context.DeadlineExceeded.Error()},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ConnectTimeout, cfg.HeaderTimeout, cfg.IdleTimeout = time.Second, time.Second, time.Second
			r := newTrackerRun(t, cfg, false)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			deadline := r.clock.Now().Add(100 * time.Millisecond)
			r.tr.finish()
			r.tr.begin(ctx, cancel, r.clock.Now(), deadline)
			r.ctx = r.tr.context()
			if d, ok := r.ctx.Deadline(); !ok || !d.Equal(deadline) {
				t.Fatalf("context deadline %v %v, want %v", d, ok, deadline)
			}
			r.run(t, tc.steps)
			if err := r.ctx.Err(); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("context error %v, want context.DeadlineExceeded", err)
			}
		})
	}
}

// timerBetween is an attempt's context whose Err is where its tracker's
// connect timer goes off: the timer that fires just as the dialer's own
// connect timeout came back, between failure's reads of the context and of
// the tracker's cause.
type timerBetween struct {
	context.Context
	fire func()
}

func (c *timerBetween) Err() error {
	if c.fire != nil {
		c.fire()
		c.fire = nil
	}
	return c.Context.Err()
}

// TestFailureSeesTimerThatFiresBetween: a connect that failed by the
// dialer's timeout as the tracker's connect timer fired is a timeout, not
// an interrupt, whichever of the two reads the timer lands between.
func TestFailureSeesTimerThatFiresBetween(t *testing.T) {
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cfg := DefaultConfig()
	r := newTrackerRun(t, cfg, false)
	r.tr.set(results.IndexConnect)
	ctx := &timerBetween{Context: r.ctx, fire: func() {
		r.tr.stop(r.tr.gen, &errkind.PhaseTimeout{Phase: results.PhaseConnect, Limit: cfg.ConnectTimeout, Flag: "--connect-timeout"})
	}}
	dialErr := fmt.Errorf("dial tcp 127.0.0.1:9: %w", context.DeadlineExceeded) // what the dialer's own timeout returns
	got := e.failure(dialErr, r.tr.current(), ctx, r.tr)
	if got.Phase != results.PhaseConnect || got.Kind != results.KindTimeout {
		t.Fatalf("%s/%s (%s), want connect/timeout", got.Phase, got.Kind, got.Message)
	}
}
