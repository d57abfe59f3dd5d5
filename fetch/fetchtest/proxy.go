package fetchtest

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/loopback"
)

// ProxyOptions configures StartHTTPProxy and StartSOCKS5. The zero value is
// an open plain-HTTP (or SOCKS5) proxy on 127.0.0.1 and a free port that
// dials from 127.0.0.1.
type ProxyOptions struct {
	BindIP      string // local source IP for the proxy's outgoing connections, default "127.0.0.1"
	User        string // if User or Password is set, require Proxy-Authorization: Basic (HTTP) or RFC 1929 user/pass (SOCKS5); HTTP answers 407 otherwise
	Password    string
	TLS         bool          // HTTP proxy served over TLS: an "https" proxy; self-signed cert for 127.0.0.1
	Latency     time.Duration // wait this long before serving each absolute-form request or answering each CONNECT (HTTP only)
	Concurrency int           // when > 0, the most requests and tunnels served at once; more wait (HTTP only)
	Addr        string        // listen address, default "127.0.0.1:0"; set it to restart a proxy on the same port

	// FailEvery, when > 0, makes every FailEvery-th request (absolute-form
	// or CONNECT, counted together) fail the way a sick proxy does: the
	// proxy drops the client connection without an answer. 2 fails half.
	FailEvery int
	// Down, when set and returning true, makes every request fail that way:
	// a proxy that flaps can be switched off and on during a test.
	Down func() bool
	// CloseEach closes the client connection after each absolute-form
	// answer without saying so (no "Connection: close"), as tinyproxy
	// does: a client must find the connection closed before it sends the
	// next request on it, or send that one again on a new connection.
	CloseEach bool
}

// Proxy is a real forward proxy on loopback, started by StartHTTPProxy or
// StartSOCKS5.
type Proxy struct {
	URL      string         // "http://127.0.0.1:PORT", "https://..." or "socks5://...", never with credentials
	Addr     string         // "127.0.0.1:PORT"
	CertPool *x509.CertPool // trusts the proxy's cert (TLS proxies only)
	CertPEM  []byte         // PEM of that cert

	opts  ProxyOptions
	close func()

	mu     sync.Mutex
	stats  ProxyStats
	served int // requests seen, for FailEvery

	changes changes // of the in-flight counts, for the tests of this package
}

// ProxyStats counts what an HTTP proxy has served. A SOCKS5 proxy reports
// zeros. A request counts from the moment it is authorized, so the time
// it waits for Latency or for a free slot under Concurrency counts too.
type ProxyStats struct {
	Requests    int // absolute-form requests forwarded (authorized ones)
	Connects    int // CONNECT requests authorized
	Denied      int // requests answered 407
	InFlight    int // absolute-form requests in flight now
	MaxInFlight int // most absolute-form requests in flight at once, from request read to last response byte written
	Tunnels     int // CONNECT requests and tunnels open now
	MaxTunnels  int // most CONNECT requests and tunnels open at once
}

// LoopbackIP returns "127.0.0.{i+2}", a distinct loopback source address for
// proxy i, for i in 0..250. On Linux every 127.x address works without setup.
// It panics for any other i. It is shorthand for loopback.IP.
func LoopbackIP(i int) string { return loopback.IP(i) }

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

// StartHTTPProxy starts an HTTP forward proxy (an "https" one when
// opts.TLS) on loopback: a loopback.Proxy that also authenticates, fails
// on purpose (FailEvery, Down) and counts what it serves. It serves
// CONNECT tunnels and absolute-form requests ("GET http://host/path
// HTTP/1.1"), with keep-alive on both sides, dialing targets from
// opts.BindIP. Forwarded requests lose their hop-by-hop headers and
// Proxy-Authorization; response bodies are streamed back as they arrive.
// Call Close when done.
func StartHTTPProxy(opts ProxyOptions) (*Proxy, error) {
	p := &Proxy{opts: opts}
	var tlsConfig *tls.Config
	if opts.TLS {
		cert, err := newSelfSigned()
		if err != nil {
			return nil, err
		}
		p.CertPool, p.CertPEM = cert.pool, cert.pem
		tlsConfig = cert.serverConfig()
	}
	lb, err := loopback.StartHTTPProxy(loopback.ProxyOptions{
		BindIP:      opts.BindIP,
		Latency:     opts.Latency,
		Concurrency: opts.Concurrency,
		Addr:        opts.Addr,
		TLS:         tlsConfig,
		Wrap:        p.wrap,
	})
	if err != nil {
		return nil, err
	}
	p.Addr, p.URL, p.close = lb.Addr, lb.URL, lb.Close
	return p, nil
}

// wrap fails sick requests, denies unauthorized ones and counts the rest
// while next serves them.
func (p *Proxy) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.sick() {
			loopback.Abort()
		}
		if !p.authorized(r) {
			p.deny(w)
			return
		}
		if r.Method == http.MethodConnect {
			defer p.count(&p.stats.Connects, &p.stats.Tunnels, &p.stats.MaxTunnels)()
			next.ServeHTTP(w, r)
			return
		}
		done := p.count(&p.stats.Requests, &p.stats.InFlight, &p.stats.MaxInFlight)
		if p.opts.CloseEach {
			defer closeAfter(w)
		}
		cw := &countedWriter{ResponseWriter: w, head: r.Method == http.MethodHead, done: done}
		defer cw.end()
		next.ServeHTTP(cw, r)
	})
}

// countedWriter ends a forwarded request's count in flight as the last
// byte of its answer is handed on, before it can reach the client: the
// handler streams the answer and flushes it as it goes, so a client that
// read a small answer whole could send its next request, and have it
// counted, before the handler returned, and MaxInFlight read one more than
// the client ever had in flight. An answer of unknown length ends its
// count when the handler returns.
type countedWriter struct {
	http.ResponseWriter
	head  bool
	left  int64 // bytes of the body not yet written; -1 unknown
	done  func()
	ended bool
}

func (c *countedWriter) WriteHeader(code int) {
	c.left = -1
	if n, err := strconv.ParseInt(c.Header().Get("Content-Length"), 10, 64); err == nil {
		c.left = n
	}
	if c.head || code == http.StatusNoContent || code == http.StatusNotModified {
		c.left = 0
	}
	if c.left == 0 {
		c.end()
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countedWriter) Write(b []byte) (int, error) {
	if c.left > 0 {
		c.left -= int64(len(b))
		if c.left <= 0 {
			c.end()
		}
	}
	return c.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (c *countedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countedWriter) end() {
	if !c.ended {
		c.ended = true
		c.done()
	}
}

// closeAfter sends what w holds of its answer and closes its connection.
func closeAfter(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if h, ok := w.(http.Hijacker); ok {
		if c, _, err := h.Hijack(); err == nil {
			c.Close()
		}
	}
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

// count adds one to the counters total and now of p.stats, raises most to
// now, and returns the function that takes now back down.
func (p *Proxy) count(total, now, most *int) func() {
	p.mu.Lock()
	*total++
	*now++
	*most = max(*most, *now)
	p.mu.Unlock()
	p.changes.tell()
	return func() {
		p.mu.Lock()
		*now--
		p.mu.Unlock()
		p.changes.tell()
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
