package fetch

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/proxies"
)

// route is one way out: a proxy, or direct. Each has its own transport so
// that connection pools never mix proxies. The transport is built when the
// route is first used: a list of 100,000 sessions costs little until its
// proxies carry attempts.
type route struct {
	id    string // identity for records: proxies.Identity, or "direct"
	pool  string
	proxy *url.URL // nil for direct

	cfg    *Config
	p      *proxies.Proxy // nil for direct
	once   sync.Once
	client *http.Client                   // set by build
	tr     atomic.Pointer[http.Transport] // set by build

	rejected atomic.Bool // the proxy refused its credentials: warned about once
}

// http returns the route's client, building its transport on first use.
func (r *route) http() *http.Client {
	r.once.Do(r.build)
	return r.client
}

// closeIdle closes the idle connections of the route's transport, if it
// has been built.
func (r *route) closeIdle() {
	if tr := r.tr.Load(); tr != nil {
		tr.CloseIdleConnections()
	}
}

// proxyStatusError is a proxy's refusal of a CONNECT.
type proxyStatusError struct {
	code   int
	status string
}

func (e *proxyStatusError) Error() string { return "proxy refused CONNECT: " + e.status }

func newRoute(cfg *Config, p *proxies.Proxy) *route {
	r := &route{id: "direct", cfg: cfg, p: p}
	if p != nil {
		r.id, r.pool, r.proxy = p.ID, p.Pool, p.URL
	}
	return r
}

// build makes the route's transport and client.
func (r *route) build() {
	cfg, p := r.cfg, r.p
	targetTLS := &tls.Config{InsecureSkipVerify: cfg.Insecure, RootCAs: cfg.RootCAs}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	// Idle connections kept per host: as many as may be in flight through
	// this route, so that a steady run reuses them instead of dialling.
	perHost := cfg.Concurrency // direct: -c, or the host limit when lower
	if cfg.HostConcurrency > 0 {
		perHost = min(perHost, cfg.HostConcurrency)
	}
	if p != nil {
		perHost = cfg.ProxyConcurrency
		if p.Concurrency > 0 {
			perHost = p.Concurrency
		}
	}
	perHost = max(perHost, 2)
	tr := &http.Transport{
		DialContext:            handshakeDeadline(dialer.DialContext, cfg.ConnectTimeout),
		TLSClientConfig:        targetTLS,
		TLSHandshakeTimeout:    cfg.ConnectTimeout,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true, // count and save the bytes as sent, as curl does
		MaxResponseHeaderBytes: cfg.maxHeader(),
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    perHost,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if res.StatusCode != http.StatusOK {
				return &proxyStatusError{code: res.StatusCode, status: res.Status}
			}
			return nil
		},
	}
	if p != nil {
		u := *p.URL
		if u.Scheme == "https" {
			// TLS to the proxy is done by the dialer, so that it is verified
			// even under --insecure (which is for targets, as in curl) and
			// counted as the proxy phase; the transport then speaks plain
			// HTTP proxy over it.
			u.Scheme = "http"
			proxyTLS := &tls.Config{RootCAs: cfg.RootCAs, ServerName: p.URL.Hostname()}
			tr.DialContext = handshakeDeadline(tlsDial(dialer, proxyTLS, cfg.ConnectTimeout), cfg.ConnectTimeout)
		}
		tr.Proxy = http.ProxyURL(&u)
		if rotates(cfg, p) {
			// A new connection (and tunnel) to the proxy for every
			// attempt, never HTTP/2 (which would share one).
			tr.DisableKeepAlives = true
			tr.ForceAttemptHTTP2 = false
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
	}
	r.client = &http.Client{Transport: tr, CheckRedirect: checkRedirect(cfg.MaxRedirects)}
	r.tr.Store(tr)
}

// rotates reports whether attempts through p each take a new connection:
// its line's rotate=, else --proxy-rotate.
func rotates(cfg *Config, p *proxies.Proxy) bool {
	if p.Rotate != proxies.RotateDefault {
		return p.Rotate == proxies.RotateRequest
	}
	return cfg.ProxyRotate == proxies.RotateRequest
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// handshakeDeadline sets a deadline on new connections so that a proxy or
// TLS handshake that never answers cannot outlive the connect timeout even
// after the request that started it has gone (net/http finishes dials in the
// background). The GotConn trace hook clears it once the connection is in use.
func handshakeDeadline(dial dialFunc, limit time.Duration) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		start := time.Now()
		c, err := dial(ctx, network, addr)
		if err == nil && limit > 0 {
			c.SetDeadline(start.Add(limit))
		}
		return c, err
	}
}

// tlsDial dials an https proxy and does the TLS handshake with it, within
// limit from the start of the dial: net/http finishes dials in the
// background with a context that may never end, so the connection's own
// deadline is what bounds a proxy that never answers.
func tlsDial(d *net.Dialer, cfg *tls.Config, limit time.Duration) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		start := time.Now()
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if limit > 0 {
			c.SetDeadline(start.Add(limit))
		}
		tc := tls.Client(c, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, &proxyTLSError{err: err}
		}
		return tc, nil
	}
}

// proxyTLSError is a failed TLS handshake with an https proxy.
type proxyTLSError struct{ err error }

func (e *proxyTLSError) Error() string { return "tls handshake with proxy: " + e.err.Error() }
func (e *proxyTLSError) Unwrap() error { return e.err }

// redirectError is the cause when --max-redirects is exceeded or a redirect
// leads to a scheme other than http or https.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

func checkRedirect(maxRedirects int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if maxRedirects <= 0 {
			return http.ErrUseLastResponse
		}
		if len(via) > maxRedirects {
			return &redirectError{msg: fmt.Sprintf("stopped after %d redirects", maxRedirects)}
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return &redirectError{msg: fmt.Sprintf("redirect to unsupported scheme %q", req.URL.Scheme)}
		}
		if !sameOrigin(via[0].URL, req.URL) {
			// net/http drops these only for another host name; curl (and
			// so fetch) also for another port or scheme.
			for _, h := range sensitiveHeaders {
				req.Header.Del(h)
			}
		}
		return nil
	}
}

// sensitiveHeaders are never carried to another origin on a redirect.
var sensitiveHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Cookie2", "Www-Authenticate"}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}
