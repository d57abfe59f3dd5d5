package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/facts"
	"github.com/fetch-dev/fetch/fetch/proxystatus"
	"github.com/fetch-dev/fetch/internal/dialer"
	"github.com/fetch-dev/fetch/internal/follow"
	"github.com/fetch-dev/fetch/internal/h1"
	"github.com/fetch-dev/fetch/internal/h2tunnel"
	"github.com/fetch-dev/fetch/internal/renew"
	"github.com/fetch-dev/fetch/proxies"
)

// route is one way out: a proxy, or direct. Routes share their
// transports (see transports): net/http keys a connection by the proxy's
// URL with its credentials, so a connection still never serves two routes,
// but the idle connections of all routes together are bounded.
type route struct {
	index    int32       // in Engine.routes, and the scheduler's proxy index
	rejected atomic.Bool // the proxy refused its credentials: warned about once
	id       string      // identity for records: proxies.Identity, or "direct"
	pool     string

	// proxied is the proxy's round tripper, zero for direct. It is in the
	// route, and the route keeps nothing it can work out (its client, its
	// scheme as a string, its Proxy-Authorization before it sends one) and
	// nothing its gateway keeps for all its routes (the transport, the
	// gateway's URL, the credentials), so that a pool of 100,000
	// identities keeps 80 bytes a route, with 2 pointers set (its identity
	// and its gateway; its pool's name when it has one, and once used its
	// URL with credentials or Proxy-Authorization where net/http needs
	// them) for the garbage collector to mark, not 104 with 5 and a
	// *url.Userinfo.
	proxied routeTransport
	kind    routeKind
}

// routeKind is how a route reaches targets: directly, or by its proxy's
// scheme.
type routeKind uint8

const (
	routeDirect routeKind = iota
	routeHTTP             // an http:// proxy
	routeHTTPS            // an https:// proxy: TLS to the proxy, then HTTP proxy
	routeSOCKS            // socks5:// or socks5h://
)

// proxy reports whether the route goes through a proxy.
func (r *route) proxy() bool { return r.kind != routeDirect }

// via is the proxy's round tripper; nil for direct.
func (r *route) via() *routeTransport {
	if r.kind == routeDirect {
		return nil
	}
	return &r.proxied
}

// transports are the http.Transports of an engine's routes: one for
// direct, one that every plain (http, socks5) proxy shares, and one that
// every https proxy shares (its dialer does the TLS with the proxy). Each
// request tells its transport which proxy to use through its context (see
// routeTransport). A transport keeps at most MaxIdleConns idle connections
// in all, closing the least recently used beyond that, so that a pool of
// 100,000 identities on one gateway keeps as many idle connections as one
// of ten would, not one set per identity.
//
// Which connections a request may use: net/http keys a connection by the
// proxy URL it returns for the request. An http or https proxy takes its
// credentials with each plain (http://) request, in Proxy-Authorization,
// so for those the URL is the gateway's without credentials and the header
// goes with the request (written by h1, or set in a copy of the request
// for net/http: see routeTransport.RoundTrip): every identity on a gateway then shares its
// connections, kept alive from one request to the next whichever identity
// sends it. A CONNECT tunnel (https:// targets) and a SOCKS connection are
// bound to the credentials they were opened with, so for those the URL
// keeps them and each identity has its own connections.
type transports struct {
	cfg          *Config
	direct       *renew.Transport
	plain, https *renew.Transport // built when a route needs them
	// directH1 and plainH1 send the plain http:// requests of direct and
	// http:// proxy routes (see internal/h1), built with direct and plain.
	directH1, plainH1 *h1.Client
	creds             *proxies.Credentials // of the proxies, by route index
	gateways          map[gatewayKey]*gateway
	lastKey           gatewayKey // and lastGateway: what gatewayOf found last
	lastGateway       *gateway
	redirect          func(*http.Request, []*http.Request) error // one for all the routes
	directRT          http.RoundTripper                          // the direct route's
}

// client is route r's client: its round tripper, with the redirect policy.
func (ts *transports) client(r *route) follow.Client {
	if r.kind == routeDirect {
		return follow.Client{RT: ts.directRT, Policy: ts.redirect}
	}
	return follow.Client{RT: &r.proxied, Policy: ts.redirect}
}

// gateway is what the routes through one proxy (a scheme and host:port:
// its identities, for a rotating-proxy provider's gateway) share.
type gateway struct {
	tr    *renew.Transport
	url   *url.URL   // without credentials; scheme http for an https proxy too (its TLS is the dialer's)
	h1    *h1.Client // for plain requests through an http:// proxy; nil for others
	creds *proxies.Credentials
	socks bool // a SOCKS proxy: its credentials go with its URL to the dialer, for plain requests too
}

// gatewayKey is a gateway's scheme and host:port.
type gatewayKey struct{ scheme, host string }

// gatewayOf returns the gateway of the proxy at scheme://host, one for
// all the identities on it.
func (ts *transports) gatewayOf(scheme, host string) *gateway {
	key := gatewayKey{scheme, host}
	if ts.lastGateway != nil && key == ts.lastKey { // the identities of a gateway come together
		return ts.lastGateway
	}
	g := ts.gateways[key]
	if g == nil {
		g = &gateway{tr: ts.forProxy(scheme), url: &url.URL{Scheme: scheme, Host: host}, creds: ts.creds}
		switch scheme {
		case "http":
			g.h1 = ts.plainH1
		case "https":
			g.url.Scheme = "http"
		default:
			g.socks = true
		}
		if ts.gateways == nil {
			ts.gateways = make(map[gatewayKey]*gateway)
		}
		ts.gateways[key] = g
	}
	ts.lastKey, ts.lastGateway = key, g
	return g
}

// idleBudget is the most idle connections a transport keeps in all: as
// many as may be in flight (-c), so that every worker can find one, and
// at least 16.
func (ts *transports) idleBudget() int { return max(ts.cfg.Concurrency, 16) }

// newTransport returns a transport with the engine's settings, keeping up
// to perHost idle connections for each proxy (or target, direct).
func (ts *transports) newTransport(perHost int) *http.Transport {
	cfg := ts.cfg
	return &http.Transport{
		DialContext:            facts.Remembered(ts.dial()),
		TLSClientConfig:        &tls.Config{InsecureSkipVerify: cfg.Insecure, RootCAs: cfg.RootCAs},
		TLSHandshakeTimeout:    cfg.ConnectTimeout,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true, // count and save the bytes as sent, as curl does
		MaxResponseHeaderBytes: cfg.maxHeader(),
		MaxIdleConns:           ts.idleBudget(),
		MaxIdleConnsPerHost:    max(perHost, 2),
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		OnProxyConnectResponse: func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
			if res.StatusCode != http.StatusOK {
				return &errkind.ProxyStatusError{Code: res.StatusCode, Status: res.Status, Says: proxystatus.Read(res.Header, res.StatusCode)}
			}
			return nil
		},
	}
}

// keepAlive is the TCP keep-alive of every connection: a first probe
// after 30 s of quiet, which keeps a NAT's mapping of a kept-alive
// connection, then the system's interval and count. Setting those too
// would be two system calls more for each connection, which counts
// where a proxy closes each one after its answer.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: -1, Count: -1}

// dial is the dialer of plain connections: TCP, traced, with the connect
// timeout.
func (ts *transports) dial() dialFunc {
	dialer := &net.Dialer{Timeout: ts.cfg.ConnectTimeout, KeepAliveConfig: keepAlive}
	return handshakeDeadline(traceDial(dialer.DialContext), ts.cfg.ConnectTimeout)
}

// newH1 returns an h1 with the engine's settings, keeping up to perKey
// idle connections for each target (or proxy) and idleBudget in all, as
// newTransport's transports do. Its dialer sets TCP keep-alive on a
// connection when h1 first takes it again, unless it did at the dial (see
// quietInUse).
func (ts *transports) newH1(perKey int) *h1.Client {
	d := &dialer.Dialer{KeepAliveConfig: keepAlive, KeepAliveAtDial: ts.quietInUse()}
	return h1.New(h1.Options{Dial: ts.h1Dial(d), MaxHeader: ts.cfg.maxHeader(), PerKey: max(perKey, 2), Budget: ts.idleBudget(),
		Now: engineClock{ts.cfg.Clock}.now, Warn: ts.cfg.Warn, OnReuse: d.KeepAlive})
}

// h1Dial is the dialer of h1: dial, but for an address that is an IP (a
// proxy list names its proxies so, and a gateway that closes every
// connection has one dialled per request) the connect is told to the
// attempt's tracker directly, not through hooks made for each dial, and
// the connect timeout is the tracker's (see tracker.getConn), not a second
// timer of the dialer's: h1 dials in the attempt's goroutine, with its
// context. That is 25 allocations fewer per dial (BenchmarkPerURL's
// http-proxy-closing, with the buffers h1 keeps: 185 instead of 212). The
// socket is dialled by ip (internal/dialer), net.Dialer's work without
// what a connection used once does not need.
func (ts *transports) h1Dial(ip *dialer.Dialer) dialFunc {
	named := ts.dial()
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h, ok := ctx.Value(trackerKey{}).(*hooked)
		if _, err := netip.ParseAddrPort(addr); !ok || err != nil {
			return named(ctx, network, addr)
		}
		hooks := dialHooks{t: h.t, gen: h.gen}
		hooks.connectStart(network, addr)
		c, err := ip.Dial(ctx, network, addr)
		hooks.connectDone(network, addr, err)
		return c, err
	}
}

// quietInUse reports whether a connection in use may stay quiet for longer
// than TCP keep-alive's first probe: when --header-timeout or
// --idle-timeout is longer, or off. A connection of h1's dialer then has
// keep-alive from its dial; otherwise from when h1 first takes it again
// (see dialer.Dialer.KeepAlive), as an idle one waits at most 90 s, where
// NATs keep an established TCP mapping for minutes to hours (RFC 5382: at
// least 2 h 4 min).
func (ts *transports) quietInUse() bool {
	long := func(d time.Duration) bool { return d <= 0 || d > keepAlive.Idle }
	return long(ts.cfg.HeaderTimeout) || long(ts.cfg.IdleTimeout)
}

// renewFailures is how many failed round trips a transport serves before
// it is replaced by a fresh one (see renew.Transport).
const renewFailures = 8192

// renewing returns a renewing transport made by build, which types the
// errors net/http gives no type (errkind.Std).
func (ts *transports) renewing(build func() *http.Transport) *renew.Transport {
	every := ts.cfg.renewEvery
	if every <= 0 {
		every = renewFailures
	}
	return renew.New(every, build, errkind.Std)
}

// forProxy returns the shared transport for proxies of scheme.
func (ts *transports) forProxy(scheme string) *renew.Transport {
	if scheme == "https" {
		if ts.https == nil {
			ts.https = ts.renewing(func() *http.Transport {
				tr := ts.newTransport(ts.idleBudget()) // a gateway may serve every identity
				// TLS to the proxy is done by the dialer, so that it is
				// verified even under --insecure (which is for targets, as
				// in curl) and counted as the proxy phase; the transport
				// then speaks plain HTTP proxy over it. The proxy's name is
				// the host it dials.
				dialer := &net.Dialer{Timeout: ts.cfg.ConnectTimeout, KeepAliveConfig: keepAlive}
				tr.DialContext = handshakeDeadline(traceDial(tlsDial(dialer, ts.cfg.RootCAs, ts.cfg.ConnectTimeout)), ts.cfg.ConnectTimeout)
				tr.Proxy = proxyOfRequest
				h2tunnel.Enable(tr)
				return tr
			})
		}
		return ts.https
	}
	if ts.plain == nil {
		ts.plain = ts.renewing(func() *http.Transport {
			tr := ts.newTransport(ts.idleBudget())
			tr.Proxy = proxyOfRequest
			h2tunnel.Enable(tr)
			return tr
		})
		if ts.cfg.Transport == TransportFast {
			ts.plainH1 = ts.newH1(ts.idleBudget())
		}
	}
	return ts.plain
}

// init sets up r, a new route at index through p (direct when p is nil),
// p being at index in the list ts.creds was made of. Routes are made in
// place, in one slice: for a pool of 100,000, that is 100,000 objects
// fewer for the garbage collector to mark at every cycle.
func (r *route) init(ts *transports, p *proxies.Proxy, index int32) {
	cfg := ts.cfg
	r.index = index
	r.id = "direct"
	if ts.redirect == nil {
		ts.redirect = checkRedirect(cfg.MaxRedirects)
	}
	if p == nil {
		if ts.direct == nil {
			// Idle connections kept per host: as many as may be in flight
			// through this route, so that a steady run reuses them
			// instead of dialling.
			perHost := cfg.Concurrency // -c, or the host limit when lower
			if cfg.HostConcurrency > 0 {
				perHost = min(perHost, cfg.HostConcurrency)
			}
			ts.direct = ts.renewing(func() *http.Transport { return ts.newTransport(perHost) })
			if cfg.Transport == TransportFast {
				ts.directH1 = ts.newH1(perHost)
			}
			ts.directRT = directTransport{h1: ts.directH1, tr: ts.direct} // h1 nil: every request on net/http
		}
		return
	}
	r.id, r.pool = p.ID, p.Pool
	// The route keeps its place in the credentials, not a URL: net/http
	// is given one only for what h1 does not send (see proxyURL), and a
	// pool of 100,000 identities then keeps none of the 100,000 URLs it
	// was read into. The transport speaks plain HTTP proxy to http and
	// https proxies (for https over the TLS its dialer did).
	r.proxied = routeTransport{gw: ts.gatewayOf(p.Scheme, p.Host), cred: r.index, rotate: rotates(cfg, p)}
	switch p.Scheme {
	case "http":
		r.kind = routeHTTP
	case "https":
		r.kind = routeHTTPS
	default:
		r.kind = routeSOCKS
	}
}

// rotates reports whether attempts through p each take a new connection:
// its line's rotate=, else --proxy-rotate.
func rotates(cfg *Config, p *proxies.Proxy) bool {
	if p.Rotate != proxies.RotateDefault {
		return p.Rotate == proxies.RotateRequest
	}
	return cfg.ProxyRotate == proxies.RotateRequest
}

// closeIdle closes the idle connections of every transport.
func (ts *transports) closeIdle() {
	for _, tr := range []*renew.Transport{ts.direct, ts.plain, ts.https} {
		if tr != nil {
			tr.CloseIdleConnections()
		}
	}
	for _, t := range []*h1.Client{ts.directH1, ts.plainH1} {
		if t != nil {
			t.CloseIdle()
		}
	}
}

// routeTransport sends a route's requests through its proxy on a shared
// transport: the route rides in the request's context to proxyOfRequest.
// A plain request through an http(s) proxy with credentials carries them
// in its Proxy-Authorization header and goes to the gateway's URL without
// them, so that it may use any connection to the gateway (see transports).
type routeTransport struct {
	gw     *gateway
	full   atomic.Pointer[url.URL] // the gateway's URL with the route's credentials, made when first needed
	auth   atomic.Pointer[string]  // Proxy-Authorization for plain requests, made when first needed
	cred   int32                   // the route's place in gw.creds
	rotate bool                    // a new connection (and tunnel) for every attempt
}

// proxyURL is the proxy's URL with its credentials, for a request that is
// not plain (a CONNECT tunnel, bound to the credentials it was opened with)
// and for any request through a SOCKS proxy: the gateway's (scheme http,
// for an https proxy too) with the route's credentials, made when first
// needed.
func (t *routeTransport) proxyURL() *url.URL {
	if !t.gw.creds.Has(int(t.cred)) {
		return t.gw.url
	}
	if u := t.full.Load(); u != nil {
		return u
	}
	u := &url.URL{Scheme: t.gw.url.Scheme, Host: t.gw.url.Host, User: t.gw.creds.Userinfo(int(t.cred))}
	if !t.full.CompareAndSwap(nil, u) {
		return t.full.Load()
	}
	return u
}

// authorization is the Proxy-Authorization of an http(s) proxy with
// credentials for the plain requests that net/http sends (all of them
// through an https:// proxy; through an http:// one, those h1 does not
// take, and every request of a route that rotates: see RoundTrip), made
// when first needed: a pool of 100,000 identities of which a run uses some
// makes only theirs.
func (t *routeTransport) authorization() string {
	if a := t.auth.Load(); a != nil {
		return *a
	}
	user, pass, _, _ := t.gw.creds.Get(int(t.cred))
	a := h1.BasicAuth(user, pass).Value()
	if !t.auth.CompareAndSwap(nil, &a) {
		return *t.auth.Load()
	}
	return a
}

// directTransport sends a direct route's plain http:// requests on h1 and
// the others on tr.
type directTransport struct {
	h1 *h1.Client
	tr *renew.Transport
}

func (t directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.h1.Takes(req) {
		return t.h1.RoundTrip(req, nil, h1.ProxyAuth{})
	}
	return t.tr.RoundTrip(req)
}

type routeKey struct{}

// RoundTrip sends req through t's proxy. An attempt's request carries its
// route in its context already (hooked.via, see tracker.leased); any other
// gets it added. A round tripper must not change its request: one that
// needs changing is copied.
func (t *routeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	plain := t.gw.h1.Takes(req) // h1 needs no route in the context: it is told the gateway
	if plain && !t.rotate {
		// Nor the credentials in the request's header: h1 writes them
		// itself, so a plain request through an http:// proxy is sent
		// without a copy of its header, and a route of a pool of 100,000
		// identities keeps no Proxy-Authorization of its own. (A rotating
		// route's request closes its connection, which makes net/http
		// write it, see h1.writeRequest: it takes the path below, with the
		// route's header made once.)
		var auth h1.ProxyAuth
		if user, pass, _, ok := t.gw.creds.Get(int(t.cred)); ok {
			auth = h1.BasicAuth(user, pass)
		}
		return t.gw.h1.RoundTrip(req, t.gw.url, auth)
	}
	r := req
	if !plain {
		if h, ok := req.Context().Value(trackerKey{}).(*hooked); !ok || h.via != t {
			r = req.WithContext(context.WithValue(req.Context(), routeKey{}, t))
		}
	}
	auth := !t.gw.socks && req.URL.Scheme == "http" && t.gw.creds.Has(int(t.cred))
	if r == req && (t.rotate || auth) {
		c := *req
		r = &c
	}
	if t.rotate {
		// The connection (and tunnel, and an HTTP/2 connection over it)
		// is closed after this request: the next attempt takes a new one,
		// so a rotating gateway gives it a new exit.
		r.Close = true
	}
	if auth {
		r.Header = req.Header.Clone()
		r.Header.Set("Proxy-Authorization", t.authorization())
	}
	if plain {
		return t.gw.h1.RoundTrip(r, t.gw.url, h1.ProxyAuth{})
	}
	return t.gw.tr.RoundTrip(r)
}

// proxyOfRequest is the Proxy function of the shared transports.
func proxyOfRequest(req *http.Request) (*url.URL, error) {
	var t *routeTransport
	if h, ok := req.Context().Value(trackerKey{}).(*hooked); ok && h.via != nil {
		t = h.via
	} else {
		t, _ = req.Context().Value(routeKey{}).(*routeTransport)
	}
	switch {
	case t == nil:
		return nil, errors.New("fetch: a request without its route") // a bug: it would go direct
	case req.URL.Scheme == "http" && !t.gw.socks:
		return t.gw.url, nil
	}
	return t.proxyURL(), nil
}

type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// handshakeDeadline sets a deadline on new connections so that a proxy or
// TLS handshake that never answers cannot outlive the connect timeout even
// after the request that started it has gone (net/http finishes dials in the
// background). The GotConn trace hook clears it once the connection is in use.
// A dial for a plain http request with no proxy handshake needs none (a TLS
// handshake with a target has the transport's own timeout), and is spared
// setting it.
func handshakeDeadline(dial dialFunc, limit time.Duration) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		start := time.Now()
		c, err := dial(ctx, network, addr)
		if h, ok := ctx.Value(trackerKey{}).(*hooked); ok && !h.handshake {
			return c, err
		}
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
func tlsDial(d *net.Dialer, roots *x509.CertPool, limit time.Duration) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg := &tls.Config{RootCAs: roots, ServerName: host}
		start := time.Now()
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if limit > 0 {
			c.SetDeadline(start.Add(limit))
		}
		tc := tls.Client(facts.Remember(c), cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, &errkind.ProxyTLSError{Err: err}
		}
		return tc, nil
	}
}

// checkRedirect is fetch's redirect policy: whether the redirect to req,
// after the requests via, is followed. (follow.Client keeps credentials
// from other origins.)
func checkRedirect(maxRedirects int) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if maxRedirects <= 0 {
			return http.ErrUseLastResponse
		}
		if len(via) > maxRedirects {
			return &errkind.RedirectError{Msg: fmt.Sprintf("stopped after %d redirects", maxRedirects)}
		}
		if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
			return &errkind.RedirectError{Msg: fmt.Sprintf("redirect to unsupported scheme %q", req.URL.Scheme)}
		}
		return nil
	}
}
