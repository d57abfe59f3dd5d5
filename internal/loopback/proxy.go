package loopback

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProxyOptions configures StartHTTPProxy. The zero value is an open
// plain-HTTP proxy on 127.0.0.1 and a free port that dials from 127.0.0.1,
// with no latency and no concurrency cap.
type ProxyOptions struct {
	BindIP  string        // local source IP for the proxy's outgoing connections, default "127.0.0.1" (see IP)
	Latency time.Duration // wait this long before serving each absolute-form request or answering each CONNECT
	Addr    string        // listen address, default "127.0.0.1:0"; set it to restart a proxy on the same port
	TLS     *tls.Config   // serve over TLS (an "https" proxy) with this config; nil serves plain HTTP

	// Concurrency, when > 0, is the most requests and tunnels the proxy
	// serves at once; more wait for a free slot (Latency counts as
	// serving), as they would at a proxy of that capacity.
	Concurrency int

	// Wrap, when set, wraps the proxy's handler (to count requests, or to
	// answer some before the proxy does).
	Wrap func(http.Handler) http.Handler
}

// Proxy is an HTTP forward proxy on loopback, started by StartHTTPProxy.
type Proxy struct {
	URL  string // "http://127.0.0.1:PORT" or "https://..."
	Addr string // "127.0.0.1:PORT"

	opts      ProxyOptions
	bindIP    net.IP
	slots     chan struct{} // nil: no cap
	srv       *Server
	transport *http.Transport
	bufs      sync.Pool // *[]byte copy buffers of forwarded bodies
}

// ParseBindIP parses a BindIP option: "" is 127.0.0.1.
func ParseBindIP(s string) (net.IP, error) {
	if s == "" {
		s = "127.0.0.1"
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, fmt.Errorf("loopback: bad BindIP %q", s)
	}
	return ip, nil
}

// StartHTTPProxy starts an HTTP forward proxy on loopback. It serves
// CONNECT tunnels and absolute-form requests ("GET http://host/path
// HTTP/1.1"), with keep-alive on both sides, dialing targets from
// opts.BindIP. Forwarded requests lose their hop-by-hop headers and
// Proxy-Authorization; response bodies are streamed back as they arrive.
// Call Close when done.
func StartHTTPProxy(opts ProxyOptions) (*Proxy, error) {
	bindIP, err := ParseBindIP(opts.BindIP)
	if err != nil {
		return nil, err
	}
	p := &Proxy{opts: opts, bindIP: bindIP}
	if opts.Concurrency > 0 {
		p.slots = make(chan struct{}, opts.Concurrency)
	}
	p.transport = &http.Transport{
		Proxy:               nil,
		DialContext:         p.dialTracked,
		DisableCompression:  true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	var h http.Handler = http.HandlerFunc(p.serve)
	if opts.Wrap != nil {
		h = opts.Wrap(h)
	}
	srv, err := NewServer(opts.Addr, h, opts.TLS)
	if err != nil {
		return nil, err
	}
	p.srv = srv
	p.Addr, p.URL = srv.Addr(), srv.URL()
	srv.Start()
	return p, nil
}

// Close stops the proxy: requests in flight are cancelled, tunnels and all
// connections (client and upstream) closed, and all goroutines have ended
// when Close returns. Close may be called more than once.
func (p *Proxy) Close() {
	p.srv.Close()
	p.transport.CloseIdleConnections()
}

func (p *Proxy) dialer() *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: p.bindIP}, Timeout: 10 * time.Second}
}

// dialTracked dials from BindIP and registers the connection so Close can
// close it even when the transport still holds it.
func (p *Proxy) dialTracked(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := p.dialer().DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, srv: p.srv}
	if !p.srv.track(tc) {
		return nil, fmt.Errorf("loopback: proxy closing")
	}
	return tc, nil
}

// trackedConn forgets itself on Close.
type trackedConn struct {
	net.Conn
	srv *Server
}

func (c *trackedConn) Close() error {
	c.srv.untrack(c)
	return c.Conn.Close()
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	isConnect := r.Method == http.MethodConnect
	if !isConnect && (!r.URL.IsAbs() || r.URL.Host == "") {
		http.Error(w, "loopback: not a proxy request (need absolute-form or CONNECT)", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
			defer func() { <-p.slots }()
		case <-ctx.Done():
			Abort()
		}
	}
	if !sleep(ctx, p.opts.Latency) {
		Abort()
	}
	if isConnect {
		p.serveConnect(w, r)
		return
	}
	p.serveForward(w, r)
}

// hopByHop are the headers a proxy must not forward (RFC 9110 section 7.6.1),
// plus Proxy-Authorization, which is for this proxy only.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

func (p *Proxy) serveForward(w http.ResponseWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Close = false
	removeHopByHop(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // keep the transport from adding its own
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, "loopback: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()

	removeHopByHop(resp.Header)
	h := w.Header()
	for k, vv := range resp.Header {
		h[k] = vv
	}
	if resp.ContentLength >= 0 {
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	// A buffer per request would make the proxy, which runs in the
	// benchmarks' process, allocate 32 KiB for each of fetch's requests.
	bp, _ := p.bufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 32<<10)
		bp = &b
	}
	defer p.bufs.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			Abort()
		}
	}
}

func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	up, err := p.dialer().DialContext(r.Context(), "tcp", r.Host)
	if err != nil {
		http.Error(w, "loopback: dial: "+err.Error(), http.StatusBadGateway)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "loopback: hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	ok1 := p.srv.track(up)
	ok2 := p.srv.track(conn)
	defer func() {
		p.srv.untrack(up)
		p.srv.untrack(conn)
		_ = up.Close()
		_ = conn.Close()
	}()
	if !ok1 || !ok2 {
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent after the CONNECT request may already sit in
	// the server's read buffer.
	var src io.Reader = conn
	if n := brw.Reader.Buffered(); n > 0 {
		early, _ := brw.Reader.Peek(n)
		src = io.MultiReader(bytes.NewReader(bytes.Clone(early)), conn)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, src)
		_ = up.Close()
		_ = conn.Close()
	}()
	_, _ = io.Copy(conn, up)
	_ = up.Close()
	_ = conn.Close()
	<-done
}
