package h1

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/internal/connwatch"
)

// Client sends requests on kept-alive HTTP/1.1 connections, which it keeps
// idle per target or proxy between requests (see the package's doc). Make
// one with New. It is safe for concurrent use; a nil Client takes no
// request (see Takes).
type Client struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxHeader   int64
	perKey      int           // idle connections kept per target or proxy
	budget      int           // idle connections kept in all
	idleTimeout time.Duration // an idle connection older than this is closed, not used
	now         func() time.Time
	warn        func(msg string) // told of the first answer followed by bytes nobody asked for; may be nil
	warned      atomic.Bool
	onReuse     func(c net.Conn) // told of an idle connection taken again for a request; may be nil

	bufs sync.Pool // *connBufs of closed connections

	mu   sync.Mutex
	idle map[string][]*conn // by key, the most recently used last
	lru  conn               // sentinel of the idle connections, oldest first
	n    int                // idle connections
	// spare is the largest list emptied since (its entry is deleted, so
	// that a crawl of millions of hosts keeps none per host), for the next
	// key that has none: a key whose every connection is busy at times
	// would otherwise grow a new list from nothing each time.
	spare []*conn
}

// Options are what a Client is made with.
type Options struct {
	// Dial dials the connections, to a target or a proxy (host:port), in
	// the goroutine and with the context of the request that needs one.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxHeader is the most bytes of an answer's headers, status lines
	// and 1xx answers included (net/http's MaxResponseHeaderBytes).
	MaxHeader int64
	// PerKey and Budget are the most idle connections kept for one target
	// or proxy, and in all (at least 1 each).
	PerKey, Budget int
	// Now is the clock idle connections are timed by; nil is time.Now.
	Now func() time.Time
	// Warn, if set, is told of the first answer followed by bytes nobody
	// asked for.
	Warn func(msg string)
	// OnReuse, if set, is called with an idle connection taken again for a
	// request, before the request is written on it: the engine has its
	// dialer set TCP keep-alive then (see dialer.Dialer.KeepAlive).
	OnReuse func(c net.Conn)
}

// New returns a Client with the options o.
func New(o Options) *Client {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	t := &Client{dial: o.Dial, maxHeader: o.MaxHeader, perKey: max(o.PerKey, 1), budget: max(o.Budget, 1),
		idleTimeout: 90 * time.Second, now: now, warn: o.Warn, onReuse: o.OnReuse, idle: make(map[string][]*conn)}
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	return t
}

// Takes reports whether t sends req: a plain http:// request without a
// body, to an ASCII host (net/http converts other names to punycode, and
// names a missing one). A nil Client takes none.
func (t *Client) Takes(req *http.Request) bool {
	if t == nil || req.URL.Scheme != "http" || req.URL.Host == "" || (req.Body != nil && req.Body != http.NoBody) {
		return false
	}
	for i := 0; i < len(req.URL.Host); i++ {
		if req.URL.Host[i] >= 0x80 {
			return false
		}
	}
	return true
}

// RoundTrip sends req, which t takes (see Takes), through proxy when it
// is not nil (with auth, when set, as its Proxy-Authorization: see
// writeRequest), and returns its response, whose body holds the
// connection until it is read to the end or closed. When req's context
// ends, RoundTrip, and any read of the body, ends at once with the
// context's error. As http.RoundTripper's, it does not change req.
func (t *Client) RoundTrip(req *http.Request, proxy *url.URL, auth ProxyAuth) (*http.Response, error) {
	ctx := req.Context()
	trace := httptrace.ContextClientTrace(ctx)
	to := req.URL // what is dialled: the target, or the proxy
	if proxy != nil {
		to = proxy
	}
	key := canonicalAddr(to)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err // not sent: a connection is neither taken nor spent on it
		}
		if trace != nil && trace.GetConn != nil {
			trace.GetConn(key)
		}
		pc, reused, err := t.get(ctx, key, proxy != nil)
		if err != nil {
			return nil, err
		}
		if trace != nil && trace.GotConn != nil {
			info := httptrace.GotConnInfo{Conn: pc.c, Reused: reused, WasIdle: reused}
			if reused {
				info.IdleTime = t.now().Sub(pc.since)
			}
			trace.GotConn(info)
		}
		resp, err, again := t.exchange(ctx, pc, req, proxy != nil, auth, trace)
		if err == nil {
			return resp, nil
		}
		if !(reused && again && replayable(req) && ctx.Err() == nil) {
			return nil, err
		}
		// A kept-alive connection the other side had closed: the request
		// goes again on another, as net/http sends it.
	}
}

// exchange writes req on pc and reads the response's headers. On an error
// pc is closed, and again reports whether nothing of a response came, so
// that the request may go again on another connection.
func (t *Client) exchange(ctx context.Context, pc *conn, req *http.Request, proxied bool, auth ProxyAuth, trace *httptrace.ClientTrace) (resp *http.Response, err error, again bool) {
	if ctx.Err() != nil { // cancelled since RoundTrip looked: nothing is sent
		t.put(pc) // as good as it was
		return nil, ctx.Err(), false
	}
	w := connwatch.Start(ctx, pc.c)
	pc.waiter = hooksOf(ctx)
	if r, ok := pc.waiter.(RemoteHooks); ok {
		if pc.remote == "" {
			pc.remote = addrString(pc.c.RemoteAddr())
		}
		r.Remote(pc.remote)
	}
	fail := func(e error, nothing bool) (*http.Response, error, bool) {
		w.Unwatch(pc.c)
		t.close(pc)
		if ctx.Err() != nil {
			e = ctx.Err()
		}
		return nil, e, nothing
	}
	err = writeRequest(pc.bw, req, proxied, auth)
	// The request is written once it is in the buffer, as net/http's
	// transport tells it (Request.Write tells it itself, and a caller's
	// hook takes the first): the engine's headers phase, and its
	// --header-timeout, start there on every path.
	if trace != nil && trace.WroteRequest != nil {
		trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	if err == nil {
		// On a socket the request is held, and written by the first read
		// of its answer, which then waits for the answer before it reads
		// (see sock.sendThenRead): one system call less a request.
		pc.hold = pc.canSend()
		pc.get = req.Method == "" || req.Method == http.MethodGet
		pc.ends = 0
		err = pc.bw.Flush()
		pc.hold = false
	}
	if err != nil {
		return fail(err, true)
	}
	pc.limit = t.maxHeader
	_, err = pc.br.Peek(1)
	pc.waiter = nil // the caller's hooks are not kept alive by an idle connection
	if err != nil {
		if werr := pc.werr; werr != nil {
			pc.werr = nil
			return fail(werr, true) // as a failed Flush
		}
		return fail(t.readError(pc, err), true)
	}
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	for {
		resp, err = readResponse(pc.br, req, pc)
		if err != nil {
			return fail(t.readError(pc, err), false)
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// A 1xx is skipped; the 1xx answers and the final one share the
		// header limit, as in net/http.
	}
	pc.limit = unlimited
	keep := !req.Close && !resp.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &body{t: t, pc: pc, ctx: ctx, r: resp.Body, watch: w, keep: keep}
	return resp, nil, false
}

// replayable reports whether req may be sent again after a kept-alive
// connection failed under it, as net/http decides.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	// -H 'Idempotency-Key: ...' says the server takes it twice as once
	_, ok := req.Header["Idempotency-Key"]
	if !ok {
		_, ok = req.Header["X-Idempotency-Key"]
	}
	return ok
}

// canonicalAddr is u's host:port, with the scheme's port when it has
// none, as net/http dials it.
func canonicalAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if strings.EqualFold(u.Scheme, "https") {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// addrString is a.String(), in one allocation for a TCP address, not
// three: the connections of a proxy that closes each one after its
// answer are formatted once per request.
func addrString(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ap := t.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
}
