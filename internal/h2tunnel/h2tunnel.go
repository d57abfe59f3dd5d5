// Package h2tunnel gives each tunnel through a proxy whose TLS
// negotiated h2 an HTTP/2 connection of its own, its one job, so that
// only the requests of the route (proxy, identity) that opened a tunnel
// go on it.
package h2tunnel

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// HTTP/2 through proxies.
//
// net/http's own HTTP/2 keeps a transport's HTTP/2 connections in one
// pool keyed by the target's host:port alone, and tries that pool for an
// https request before it asks which proxy to use. On the transports that
// all the proxies of a scheme share (see fetch's transports), a request routed
// through one proxy (or one identity of a gateway) would then go on a
// tunnel another one opened: out of another exit, past the other's
// permits (a permit is one request, whatever the connection carries).
//
// So the proxies' transports make each tunnel whose TLS negotiated h2 an
// HTTP/2 connection of its own (Enable), which net/http keeps where it
// keeps the tunnel: under the route's proxy URL and the target. Only the
// requests of that route use it, as many at once as its permits let in.

// Enable has tr, a transport of proxies, speak HTTP/2 with the targets
// that offer it, on connections kept by route (see above). Call it before
// tr is used; tr must have a TLSClientConfig.
func Enable(tr *http.Transport) {
	p := &h2Conns{conns: map[*h2Conn]struct{}{}}
	p.maker = &http.Transport{
		// The connection is the tunnel's, its TLS done (see attach).
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			if c, ok := ctx.Value(h2ConnKey{}).(*tls.Conn); ok {
				return c, nil
			}
			return nil, errors.New("fetch: no connection to speak HTTP/2 on")
		},
		ForceAttemptHTTP2:      true,
		DisableCompression:     tr.DisableCompression,
		MaxResponseHeaderBytes: tr.MaxResponseHeaderBytes,
		IdleConnTimeout:        tr.IdleConnTimeout,
	}
	tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{"h2": p.attach}
	tr.TLSClientConfig.NextProtos = []string{"h2", "http/1.1"}
	// net/http closes the idle HTTP/2 connections of the implementation
	// registered for https, found as the one field of the round tripper
	// registered (see http.Transport.CloseIdleConnections and how it
	// finds golang.org/x/net/http2's): the transport's own renewal and
	// closing then reach these connections too.
	tr.RegisterProtocol("https", h2Closer{Conns: p})
}

// h2ConnKey is the context key of the connection attach hands maker.
type h2ConnKey struct{}

// h2Conns are the HTTP/2 connections of one transport.
type h2Conns struct {
	maker *http.Transport // makes an HTTP/2 client connection of a TLS connection (see attach)
	mu    sync.Mutex
	conns map[*h2Conn]struct{}
}

// attach makes c, a connection to the target at authority whose TLS
// negotiated h2, an HTTP/2 connection: net/http's TLSNextProto. On an
// error c is closed.
func (p *h2Conns) attach(authority string, c *tls.Conn) http.RoundTripper {
	ctx := context.WithValue(context.Background(), h2ConnKey{}, c)
	cc, err := p.maker.NewClientConn(ctx, "https", authority)
	if err != nil {
		c.Close()
		return h2Failed{err}
	}
	h := &h2Conn{cc: cc, conn: c, conns: p}
	p.mu.Lock()
	p.conns[h] = struct{}{}
	p.mu.Unlock()
	cc.SetStateHook(h.changed)
	return h
}

// CloseIdleConnections closes the connections with no request in flight,
// and the others once their last request is over: net/http has
// forgotten them all (see http.Transport.CloseIdleConnections).
func (p *h2Conns) CloseIdleConnections() {
	p.mu.Lock()
	all := make([]*h2Conn, 0, len(p.conns))
	for h := range p.conns {
		all = append(all, h)
	}
	p.mu.Unlock()
	for _, h := range all {
		h.retire()
	}
}

func (p *h2Conns) forget(h *h2Conn) {
	p.mu.Lock()
	delete(p.conns, h)
	p.mu.Unlock()
}

// h2Closer is what Enable registers for https: it leaves every request
// to the transport, and has it find Conns.
type h2Closer struct{ Conns *h2Conns }

func (h2Closer) RoundTrip(*http.Request) (*http.Response, error) { return nil, http.ErrSkipAltProtocol }

// h2Conn is one HTTP/2 connection on a tunnel (or a TLS connection
// through SOCKS), as net/http keeps it: its round tripper.
type h2Conn struct {
	cc      *http.ClientConn
	conn    *tls.Conn // for GotConn
	conns   *h2Conns
	used    atomic.Bool // a request went on it: the next ones reuse it
	retired atomic.Bool // net/http was told it takes no more requests: closed once idle
}

// RoundTrip sends req on the connection. When the connection takes no
// more requests (closed, going away, asked to close by a request, or
// all the streams the server allows busy) it says so as net/http's
// HTTP/2 does, and net/http drops it from its pool and sends req on a
// new one; this one is closed once its last request is over.
func (h *h2Conn) RoundTrip(req *http.Request) (*http.Response, error) {
	if h.cc.Reserve() != nil {
		h.retire()
		return nil, errNoCachedConn{}
	}
	// net/http tells a request its HTTP/1.1 connection, and leaves
	// HTTP/2 to say it (as its own does, from its pool).
	if trace := httptrace.ContextClientTrace(req.Context()); trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{Conn: h.conn, Reused: h.used.Swap(true)})
	}
	return h.cc.RoundTrip(req)
}

// retire closes the connection once no request is in flight on it.
func (h *h2Conn) retire() {
	h.retired.Store(true)
	h.changed(h.cc)
}

// changed is told of a change of the connection's state.
func (h *h2Conn) changed(cc *http.ClientConn) {
	switch {
	case cc.Err() != nil:
		h.conns.forget(h)
	case h.retired.Load() && cc.InFlight() == 0:
		h.conns.forget(h)
		cc.Close()
	}
}

// h2Failed is the round tripper of a connection attach could not make
// HTTP/2 of: net/http asks it for the error (RoundTripErr).
type h2Failed struct{ err error }

func (f h2Failed) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }
func (f h2Failed) RoundTripErr() error                             { return f.err }

// errNoCachedConn is an HTTP/2 connection that takes no more requests,
// as net/http's HTTP/2 says it (by this method).
type errNoCachedConn struct{}

func (errNoCachedConn) IsHTTP2NoCachedConnError() {}
func (errNoCachedConn) Error() string             { return "fetch: http2 connection takes no more requests" }
