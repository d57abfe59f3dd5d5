package fetchtest

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ProxyOptions configures StartHTTPProxy and StartSOCKS5. The zero value is
// an open plain-HTTP (or SOCKS5) proxy on 127.0.0.1 and a free port that
// dials from 127.0.0.1.
type ProxyOptions struct {
	BindIP   string // local source IP for the proxy's outgoing connections, default "127.0.0.1"
	User     string // if User or Password is set, require Proxy-Authorization: Basic (HTTP) or RFC 1929 user/pass (SOCKS5); HTTP answers 407 otherwise
	Password string
	TLS      bool          // HTTP proxy served over TLS: an "https" proxy; self-signed cert for 127.0.0.1
	Latency  time.Duration // wait this long before serving each absolute-form request or answering each CONNECT (HTTP only)
	Addr     string        // listen address, default "127.0.0.1:0"; set it to restart a proxy on the same port

	// FailEvery, when > 0, makes every FailEvery-th request (absolute-form
	// or CONNECT, counted together) fail the way a sick proxy does: the
	// proxy drops the client connection without an answer. 2 fails half.
	FailEvery int
	// Down, when set and returning true, makes every request fail that way:
	// a proxy that flaps can be switched off and on during a test.
	Down func() bool
}

// Proxy is a real forward proxy on loopback, started by StartHTTPProxy or
// StartSOCKS5.
type Proxy struct {
	URL      string         // "http://127.0.0.1:PORT", "https://..." or "socks5://...", never with credentials
	Addr     string         // "127.0.0.1:PORT"
	CertPool *x509.CertPool // trusts the proxy's cert (TLS proxies only)
	CertPEM  []byte         // PEM of that cert

	opts   ProxyOptions
	bindIP net.IP
	close  func()

	// HTTP proxy only.
	srv       *server
	transport *http.Transport

	mu     sync.Mutex
	stats  ProxyStats
	served int // requests seen, for FailEvery
}

// ProxyStats counts what an HTTP proxy has served. A SOCKS5 proxy reports
// zeros.
type ProxyStats struct {
	Requests    int // absolute-form requests forwarded (authorized ones)
	Connects    int // CONNECT requests accepted (authorized ones)
	Denied      int // requests answered 407
	InFlight    int // absolute-form requests in flight now
	MaxInFlight int // most absolute-form requests in flight at once, from request read to last response byte written
	Tunnels     int // CONNECT tunnels open now
	MaxTunnels  int // most CONNECT tunnels open at once
}

// LoopbackIP returns "127.0.0.{i+2}", a distinct loopback source address for
// proxy i, for i in 0..250. On Linux every 127.x address works without setup.
// It panics for any other i.
func LoopbackIP(i int) string {
	if i < 0 || i > 250 {
		panic(fmt.Sprintf("fetchtest: LoopbackIP(%d) out of range 0..250", i))
	}
	return "127.0.0." + strconv.Itoa(i+2)
}

// AuthURL returns URL with User and Password in it, for clients that take
// credentials in the proxy URL. It equals URL when neither is set.
func (p *Proxy) AuthURL() string {
	if p.opts.User == "" && p.opts.Password == "" {
		return p.URL
	}
	u, err := url.Parse(p.URL)
	if err != nil {
		return p.URL
	}
	u.User = url.UserPassword(p.opts.User, p.opts.Password)
	return u.String()
}

// Close stops the proxy: requests in flight are cancelled, tunnels and all
// connections (client and upstream) closed, and all goroutines (or the
// microsocks process) have ended when Close returns. Close may be called
// more than once.
func (p *Proxy) Close() { p.close() }

// Stats returns the proxy's counters.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// ResetStats sets the counters to zero; maxima restart from what is in
// flight now.
func (p *Proxy) ResetStats() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats = ProxyStats{
		InFlight: p.stats.InFlight, MaxInFlight: p.stats.InFlight,
		Tunnels: p.stats.Tunnels, MaxTunnels: p.stats.Tunnels,
	}
}

func parseBindIP(s string) (net.IP, error) {
	if s == "" {
		s = "127.0.0.1"
	}
	ip := net.ParseIP(s)
	if ip == nil {
		return nil, fmt.Errorf("fetchtest: bad BindIP %q", s)
	}
	return ip, nil
}

// StartHTTPProxy starts an HTTP forward proxy (an "https" one when
// opts.TLS) on loopback. It serves CONNECT tunnels and absolute-form
// requests ("GET http://host/path HTTP/1.1"), with keep-alive on both
// sides, dialing targets from opts.BindIP. Forwarded requests lose their
// hop-by-hop headers and Proxy-Authorization; response bodies are streamed
// back as they arrive. Call Close when done.
func StartHTTPProxy(opts ProxyOptions) (*Proxy, error) {
	bindIP, err := parseBindIP(opts.BindIP)
	if err != nil {
		return nil, err
	}
	p := &Proxy{opts: opts, bindIP: bindIP}
	var cert *selfSigned
	if opts.TLS {
		if cert, err = newSelfSigned(); err != nil {
			return nil, err
		}
		p.CertPool, p.CertPEM = cert.pool, cert.pem
	}
	p.transport = &http.Transport{
		Proxy:                 nil,
		DialContext:           p.dialTracked,
		DisableCompression:    true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0,
	}
	srv, err := newServer(opts.Addr, http.HandlerFunc(p.serve), cert)
	if err != nil {
		return nil, err
	}
	p.srv = srv
	p.Addr, p.URL = srv.addrString(), srv.url()
	p.close = func() { srv.close(p.transport.CloseIdleConnections) }
	srv.start()
	return p, nil
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
		return nil, fmt.Errorf("fetchtest: proxy closing")
	}
	return tc, nil
}

// trackedConn forgets itself on Close.
type trackedConn struct {
	net.Conn
	srv *server
}

func (c *trackedConn) Close() error {
	c.srv.untrack(c)
	return c.Conn.Close()
}

func (p *Proxy) authorized(r *http.Request) bool {
	if p.opts.User == "" && p.opts.Password == "" {
		return true
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	user, pass, ok := strings.Cut(string(dec), ":")
	userOK := subtle.ConstantTimeCompare([]byte(user), []byte(p.opts.User)) == 1
	passOK := subtle.ConstantTimeCompare([]byte(pass), []byte(p.opts.Password)) == 1
	return ok && userOK && passOK
}

func (p *Proxy) deny(w http.ResponseWriter) {
	p.mu.Lock()
	p.stats.Denied++
	p.mu.Unlock()
	w.Header().Set("Proxy-Authenticate", `Basic realm="fetchtest"`)
	http.Error(w, "fetchtest: proxy authentication required", http.StatusProxyAuthRequired)
}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	if p.sick() {
		abort()
	}
	if r.Method == http.MethodConnect {
		p.serveConnect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Host == "" {
		http.Error(w, "fetchtest: not a proxy request (need absolute-form or CONNECT)", http.StatusBadRequest)
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

// count adds one to the counters total and now of p.stats, raises most to
// now, and returns the function that takes now back down.
func (p *Proxy) count(total, now, most *int) func() {
	p.mu.Lock()
	*total++
	*now++
	*most = max(*most, *now)
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		*now--
		p.mu.Unlock()
	}
}

// sick decides whether this request is one that FailEvery or Down fails.
func (p *Proxy) sick() bool {
	if p.opts.Down != nil && p.opts.Down() {
		return true
	}
	if p.opts.FailEvery <= 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.served++
	return p.served%p.opts.FailEvery == 0
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
	ctx := r.Context()
	if !sleep(ctx, p.opts.Latency) {
		abort()
	}
	if !p.authorized(r) {
		p.deny(w)
		return
	}
	defer p.count(&p.stats.Requests, &p.stats.InFlight, &p.stats.MaxInFlight)()

	out := r.Clone(ctx)
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
		http.Error(w, "fetchtest: upstream: "+err.Error(), http.StatusBadGateway)
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
	buf := make([]byte, 32<<10)
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
			abort()
		}
	}
}

func (p *Proxy) serveConnect(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !sleep(ctx, p.opts.Latency) {
		abort()
	}
	if !p.authorized(r) {
		p.deny(w)
		return
	}
	up, err := p.dialer().DialContext(ctx, "tcp", r.Host)
	if err != nil {
		http.Error(w, "fetchtest: dial: "+err.Error(), http.StatusBadGateway)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		_ = up.Close()
		http.Error(w, "fetchtest: hijack: "+err.Error(), http.StatusInternalServerError)
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

	defer p.count(&p.stats.Connects, &p.stats.Tunnels, &p.stats.MaxTunnels)()

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
