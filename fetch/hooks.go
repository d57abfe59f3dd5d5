package fetch

import (
	"context"
	"net"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/connwatch"
)

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

// dnsDone moves to connect once a name is resolved; a lookup that failed
// leaves the attempt in dns, where it failed.
func (d *dialHooks) dnsDone(info httptrace.DNSDoneInfo) {
	if info.Err == nil {
		d.move(results.IndexConnect)
	}
}

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
	t.remote, t.remoteShown = info.Conn, ""
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
