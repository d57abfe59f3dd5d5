package fetch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/internal/connwatch"
)

// h1 is fetch's own HTTP/1.1 client for plain http:// requests without a
// body, sent direct or through an http:// proxy (in absolute form), on
// kept-alive connections. Everything else (https, SOCKS, CONNECT tunnels,
// HTTP/2) goes through net/http.
//
// Why: net/http's transport hands every request to two goroutines of its
// connection (one writes it, one reads the answer) and back, over channels
// it makes for each request. Here the goroutine of the attempt writes the
// request and reads the answer itself, on a connection it holds until
// the body is read or closed, as it holds its permit. On loopback that is
// about a third of fetch's CPU per URL. What it reads and writes is
// net/http's own, or byte for byte what it writes and reads (see
// writeRequest and readResponse): http.ReadResponse does the framing
// (Content-Length, chunked, to the end of the connection, none for HEAD,
// 204 and 304).
//
// It does what the transport does for such requests: the trace hooks
// (GetConn, GotConn, WroteRequest, GotFirstResponseByte; the dialer calls
// the dial hooks), response headers bounded by maxHeader (1xx answers
// skipped, within the same bound), a look at an idle connection before it
// is used again (see take), a request sent again on a new connection when
// a kept-alive one closes under it before any byte of the answer (see
// replayable), no request sent once its context is done, a done context
// that ends any wait at once, and idle connections bounded per key (target
// or proxy) and in all, the least recently used closed first. A connection
// is kept only when its answer was read to the end and neither side asked
// to close it.
type h1 struct {
	dial        dialFunc
	maxHeader   int64
	perKey      int           // idle connections kept per target or proxy
	budget      int           // idle connections kept in all
	idleTimeout time.Duration // an idle connection older than this is closed, not used
	now         func() time.Time
	warn        func(msg string) // told of the first answer followed by bytes nobody asked for; may be nil
	warned      atomic.Bool
	onReuse     func(c net.Conn) // told of an idle connection taken again for a request; may be nil

	bufs sync.Pool // *h1Bufs of closed connections

	mu   sync.Mutex
	idle map[string][]*h1Conn // by key, the most recently used last
	lru  h1Conn               // sentinel of the idle connections, oldest first
	n    int                  // idle connections
	// spare is the largest list emptied since (its entry is deleted, so
	// that a crawl of millions of hosts keeps none per host), for the next
	// key that has none: a key whose every connection is busy at times
	// would otherwise grow a new list from nothing each time.
	spare []*h1Conn
}

func newH1(dial dialFunc, maxHeader int64, perKey, budget int, now func() time.Time, warn func(string), onReuse func(net.Conn)) *h1 {
	t := &h1{dial: dial, maxHeader: maxHeader, perKey: max(perKey, 1), budget: max(budget, 1),
		idleTimeout: 90 * time.Second, now: now, warn: warn, onReuse: onReuse, idle: make(map[string][]*h1Conn)}
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	return t
}

// takes reports whether h1 sends req: a plain http:// request without a
// body, to an ASCII host (net/http converts other names to punycode, and
// names a missing one).
func (t *h1) takes(req *http.Request) bool {
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

// h1Conn is a connection of h1, and its place among the idle ones.
type h1Conn struct {
	key   string
	c     net.Conn
	br    *bufio.Reader
	bw    *bufio.Writer
	bufs  *h1Bufs // br and bw, given back when the connection is closed
	limit int64   // bytes that may still be read: bounds the response headers
	rerr  error   // the last Read's error (nil when it had none)
	again bool    // the next Read returns rerr, without reading (see replayError)
	hold  bool    // Write keeps what bw flushes in out, for the next Read to send (see exchange)
	out   []byte  // a request held by Write: bw's own buffer, untouched until out is sent
	werr  error   // the error of the write of out, from the Read that sent it
	get   bool    // the request is a GET: its answer is judged while it comes (see owedAnswer)
	// waiter is the request's, asked and told of a wait for the body in
	// the first read of its answer (nil: none, and a body is always
	// waited for); it is dropped once that read is over. ends is where the
	// answer ends in that read's buffer, once its head has come: 0 before,
	// -1 when the read does not wait for its body.
	waiter bodyWaiter
	ends   int
	since  time.Time
	prev   *h1Conn
	next   *h1Conn
	sock
}

// Write writes for bw, or keeps p in out when hold is set.
func (pc *h1Conn) Write(p []byte) (int, error) {
	if pc.hold {
		pc.out = p
		return len(p), nil
	}
	return pc.c.Write(p)
}

// Read reads from the connection for br, within limit.
func (pc *h1Conn) Read(p []byte) (int, error) {
	if pc.again {
		pc.again = false
		return 0, pc.rerr
	}
	if pc.limit <= 0 {
		pc.rerr = errHeaderLimit
		return 0, errHeaderLimit
	}
	if int64(len(p)) > pc.limit {
		p = p[:pc.limit]
	}
	var n int
	var err error
	switch {
	case pc.out != nil:
		n, err = pc.send(p)
	case pc.canSend():
		// The read alone (see sock.read).
		n, err = pc.read(pc.c, p)
	default:
		n, err = pc.c.Read(p)
	}
	pc.limit -= int64(n)
	pc.rerr = err // nil after a read that went well: never an older read's error
	if n > 0 && err != nil {
		// An error after bytes (send reads on past the first): the next
		// Read's, as a socket tells it.
		pc.again = true
		return n, nil
	}
	return n, err
}

// send writes out and reads the start of its answer into p (see
// sock.sendThenRead). A write's error is kept in werr, for exchange to
// tell from a read's, and Read returns it too.
func (pc *h1Conn) send(p []byte) (int, error) {
	out := pc.out
	pc.out = nil
	var more owing
	if pc.get {
		more = pc
	}
	n, rest, werr, err := pc.sendThenRead(pc.c, out, p, more)
	if werr == nil && err == nil && len(rest) > 0 {
		// The socket took only part: the rest as any write, the answer
		// as any read.
		if _, werr = pc.c.Write(rest); werr == nil {
			n, err = pc.c.Read(p)
		}
	}
	if werr != nil {
		pc.werr = werr
		return 0, werr
	}
	return n, err
}

// owing is what the first read of an answer asks whether the bytes read
// so far must be followed by more, before it returns them (see
// sock.sendThenRead): an *h1Conn, for the answer to a GET on it.
type owing interface{ owedAnswer(buf []byte) bool }

// bodyWaiter is the request whose answer's first read may wait on for
// the body (see owedAnswer): bodyWanted says whether its reader reads a
// body of length with status code to its end, rather than deciding on the
// head alone (a ban, a body over --max-body); bodyBytes is told when the
// read begins to wait for the body, and after each read of it that leaves
// more to wait for.
type bodyWaiter interface {
	bodyWanted(code int, length int64) bool
	bodyBytes()
}

// owedAnswer reports whether buf, the start of the answer to a GET on pc,
// must be followed by more bytes before the read returns them:
//   - a head not yet ended that readResponse waits on (every line so far
//     one it takes, see headSoFar), the headers phase's wait;
//   - past the head, the body, when the head came alone with a 2xx status
//     and a Content-Length whose body fits the read's room (buf's
//     capacity) and is wanted (pc.waiter); the read tells pc.waiter that
//     the wait is the body's from then.
//
// squid writes an answer's head and body apart; the read of the body after
// the head would try the socket before it waited (see sock.sendThenRead):
// one system call that finds nothing, an answer. A body that came with its
// head (as nginx and Go servers send small answers) has most often come
// whole: a look at the head would cost every such answer what it saves the
// few.
func (pc *h1Conn) owedAnswer(buf []byte) bool {
	if pc.ends == 0 { // the head is read once
		end := headEnd(buf, 0)
		if end < 0 {
			return headSoFar(buf, 0) >= 0
		}
		pc.ends = -1
		if end+4 == len(buf) {
			code, length := plainLength(buf, end)
			if code/100 == 2 && length > 0 && length <= int64(cap(buf)-len(buf)) &&
				(pc.waiter == nil || pc.waiter.bodyWanted(code, length)) {
				pc.ends = len(buf) + int(length)
			}
		}
	}
	if pc.ends < 0 || len(buf) >= pc.ends {
		return false
	}
	if pc.waiter != nil {
		pc.waiter.bodyBytes()
	}
	return true
}

// replayError has the next Read return the last read's error again, once:
// readResponse took it while it waited for the rest of a head, and
// net/http, which reads the answer then, must meet it as it would have
// (a socket tells a reset once, and then an end of file).
func (pc *h1Conn) replayError() { pc.again = pc.rerr != nil }

var errHeaderLimit = errors.New("h1: header limit")

const unlimited = 1<<63 - 1

// roundTrip sends req, through proxy when it is not nil (with auth, when
// set, as its Proxy-Authorization: see writeRequest), and returns its
// response, whose body holds the connection until it is read to the end
// or closed.
func (t *h1) roundTrip(req *http.Request, proxy *url.URL, auth proxyAuth) (*http.Response, error) {
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
		pc, reused, err := t.conn(ctx, key, proxy != nil)
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
func (t *h1) exchange(ctx context.Context, pc *h1Conn, req *http.Request, proxied bool, auth proxyAuth, trace *httptrace.ClientTrace) (resp *http.Response, err error, again bool) {
	if ctx.Err() != nil { // cancelled since roundTrip looked: nothing is sent
		t.put(pc) // as good as it was
		return nil, ctx.Err(), false
	}
	h, _ := ctx.Value(trackerKey{}).(*hooked)
	w := connwatch.Start(ctx, pc.c)
	pc.waiter = nil // not h itself when nil: a nil *hooked in an interface is not nil
	if h != nil {
		pc.waiter = h
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
	// transport tells it (Request.Write tells it itself, and the tracker
	// takes the first): the headers phase, and --header-timeout, start
	// there on every path.
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
	pc.waiter = nil // its attempt is not kept alive by an idle connection
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
	resp.Body = &h1Body{t: t, pc: pc, ctx: ctx, r: resp.Body, watch: w, keep: keep}
	return resp, nil, false
}

// readError is err, met reading a response's headers on pc, as net/http
// words it. A read cut at the header limit may show as another error (a
// header line cut short), so the limit is read, as net/http does.
func (t *h1) readError(pc *h1Conn, err error) error {
	if pc.limit <= 0 || errors.Is(err, errHeaderLimit) {
		return fmt.Errorf("net/http: server response headers exceeded %d bytes; aborted", t.maxHeader)
	}
	return fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
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

// conn returns an idle connection for key, or dials one (to a proxy when
// proxied).
func (t *h1) conn(ctx context.Context, key string, proxied bool) (*h1Conn, bool, error) {
	if pc := t.take(key); pc != nil {
		return pc, true, nil
	}
	c, err := t.dial(ctx, "tcp", key)
	if err != nil {
		if proxied {
			// as net/http names the dial of a proxy
			err = &net.OpError{Op: "proxyconnect", Net: "tcp", Err: err}
		}
		return nil, false, err
	}
	pc := &h1Conn{key: key, c: c, limit: unlimited}
	pc.sock.init(c)
	b, ok := t.bufs.Get().(*h1Bufs)
	if ok {
		b.br.Reset(pc)
		b.bw.Reset(pc)
	} else {
		b = &h1Bufs{br: bufio.NewReaderSize(pc, 4<<10), bw: bufio.NewWriterSize(pc, 4<<10)}
	}
	pc.bufs, pc.br, pc.bw = b, b.br, b.bw
	return pc, false, nil
}

// take returns the most recently used idle connection for key that is not
// too old and still quiet, or nil. Nothing reads a connection while it is
// idle, so what its server did meanwhile is looked at now (see quiet): a
// connection the server closed, or one with bytes on it that no request
// asked for (an answer sent late, a 408 before closing), would otherwise
// give the next request a failure, or another request's answer. The look
// narrows that window, no more: what comes after it, while the request
// goes out, still meets the request (see roundTrip for a close).
func (t *h1) take(key string) *h1Conn {
	now := t.now()
	for {
		t.mu.Lock()
		list := t.idle[key]
		if len(list) == 0 {
			t.mu.Unlock()
			return nil
		}
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		t.forget(pc, list[:len(list)-1])
		t.mu.Unlock()
		if now.Sub(pc.since) < t.idleTimeout && t.quiet(pc) {
			if t.onReuse != nil {
				t.onReuse(pc.c)
			}
			return pc
		}
		t.close(pc)
	}
}

// quiet reports whether pc's server has neither closed it nor sent
// anything since its last answer, from a look at its socket that does not
// wait (the socket is non-blocking, as Go makes every one). Bytes nobody
// asked for are warned about once, except a 408: servers send one before
// closing a connection that stayed idle, as net/http knows.
func (t *h1) quiet(pc *h1Conn) bool {
	start, err := pc.peek()
	switch {
	case errors.Is(err, errWouldBlock):
		return true
	case err != nil, len(start) == 0: // an error, or the server closed it
		return false
	}
	if !bytes.HasPrefix(start, []byte("HTTP/1.1 408")) && !bytes.HasPrefix(start, []byte("HTTP/1.0 408")) {
		t.unsolicited(start, pc.key)
	}
	return false
}

// unsolicited warns, once, of bytes that arrived on a connection of key
// with no request to answer.
func (t *h1) unsolicited(start []byte, key string) {
	if t.warn != nil && t.warned.CompareAndSwap(false, true) {
		// net/http logs this each time; once is enough to know.
		t.warn(fmt.Sprintf("Unsolicited response received on idle HTTP channel starting with %q (from %s): its connection is closed", start, key))
	}
}

// put keeps pc as idle, closing the least recently used idle connection
// when there are more than the budget, or pc itself when its key has its
// share.
func (t *h1) put(pc *h1Conn) {
	now := t.now()
	pc.since = now
	t.mu.Lock()
	// Close those idle for longer than the idle timeout, oldest first
	// (this key's among them, before its share is counted), then the
	// least recently used beyond the budget: each put closes what the puts
	// before it left.
	old := t.sweep(now, 0)
	list := t.idle[pc.key]
	if list == nil {
		list, t.spare = t.spare, nil
	}
	if len(list) >= t.perKey {
		t.mu.Unlock()
		t.close(pc)
		t.closeAll(old)
		return
	}
	t.idle[pc.key] = append(list, pc)
	pc.prev, pc.next = t.lru.prev, &t.lru
	pc.prev.next, t.lru.prev = pc, pc
	t.n++
	old = append(old, t.sweep(now, t.budget)...)
	t.mu.Unlock()
	t.closeAll(old)
}

// sweep takes out of the idle connections, oldest first, those idle for
// the idle timeout or longer, and then more while there are more than
// keep (none when keep is 0), and returns them, to be closed. Call with
// t.mu held.
func (t *h1) sweep(now time.Time, keep int) []*h1Conn {
	var old []*h1Conn
	for t.n > 0 {
		o := t.lru.next
		if (keep == 0 || t.n <= keep) && now.Sub(o.since) < t.idleTimeout {
			break
		}
		list := t.idle[o.key]
		copy(list, list[1:]) // the oldest of its key too
		list[len(list)-1] = nil
		t.forget(o, list[:len(list)-1])
		old = append(old, o)
	}
	return old
}

func (t *h1) closeAll(conns []*h1Conn) {
	for _, pc := range conns {
		t.close(pc)
	}
}

// close closes pc and keeps its buffers for the next dial: a proxy that
// closes every connection after its answer has one dialled per request.
// Call only once nothing reads or writes pc's buffers.
func (t *h1) close(pc *h1Conn) {
	pc.c.Close()
	if b := pc.bufs; b != nil {
		b.br.Reset(nil)
		b.bw.Reset(nil)
		pc.bufs, pc.br, pc.bw = nil, nil, nil
		t.bufs.Put(b)
	}
}

// h1Bufs are the buffers of a connection.
type h1Bufs struct {
	br *bufio.Reader
	bw *bufio.Writer
}

// forget takes pc out of the idle connections, list being what is left of
// its key's. Call with t.mu held.
func (t *h1) forget(pc *h1Conn, list []*h1Conn) {
	if len(list) == 0 {
		delete(t.idle, pc.key) // a crawl of millions of hosts keeps no entry per host
		if cap(list) > cap(t.spare) {
			t.spare = list // every element nil: take and sweep clear what they take out
		}
	} else {
		t.idle[pc.key] = list
	}
	pc.prev.next, pc.next.prev = pc.next, pc.prev
	pc.prev, pc.next = nil, nil
	t.n--
}

// closeIdle closes every idle connection.
func (t *h1) closeIdle() {
	t.mu.Lock()
	var all []*h1Conn
	for pc := t.lru.next; pc != &t.lru; pc = pc.next {
		all = append(all, pc)
	}
	clear(t.idle)
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	t.n = 0
	t.mu.Unlock()
	for _, pc := range all {
		pc.prev, pc.next = nil, nil
		t.close(pc)
	}
}

// h1Body is a response body of h1: it gives its connection back, to be
// kept or closed, when it is read to the end or closed. Read and Close are
// not for use at once from two goroutines (the engine reads and closes a
// body in its attempt's): a connection's buffers serve another once it is
// given back.
type h1Body struct {
	t     *h1
	pc    *h1Conn
	ctx   context.Context
	r     io.ReadCloser       // http.ReadResponse's body
	watch connwatch.Unwatcher // cuts the connection when the context ends
	keep  bool                // the connection may serve another request
	done  bool                // the connection is given back
	err   error               // what Read returns once done: io.EOF, its error, or ErrBodyReadAfterClose
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.keep)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.finish(false)
	}
	b.err = err
	return n, err
}

// Close closes the connection under a body not read to the end, as
// net/http does: what is left of it may be long, or never come.
func (b *h1Body) Close() error {
	if !b.done {
		b.finish(b.keep && b.r == http.NoBody) // a body of none is read to its end
		b.err = http.ErrBodyReadAfterClose
	}
	return nil
}

func (b *h1Body) finish(keep bool) {
	b.done = true
	// unwatch is false when the context was done first: its deadline is
	// on the connection, which is closed then.
	if b.watch.Unwatch(b.pc.c) && keep {
		n := b.pc.br.Buffered()
		if n == 0 {
			b.t.put(b.pc)
			return
		}
		start, _ := b.pc.br.Peek(min(n, 16))
		b.t.unsolicited(start, b.pc.key)
	}
	b.t.close(b.pc)
}

// canonicalAddr is u's host:port, with the scheme's port when it has
// none, as net/http dials it.
func canonicalAddr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	return net.JoinHostPort(u.Hostname(), portOf(u))
}
