package fetchtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync"

	"github.com/fetch-dev/fetch/internal/loopback"
)

// TargetOptions configures StartTarget. The zero value serves plain HTTP on
// 127.0.0.1 and a free port.
type TargetOptions struct {
	TLS  bool   // serve HTTPS with a self-signed cert valid for 127.0.0.1, ::1 and localhost
	Addr string // listen address, default "127.0.0.1:0"
}

// Target is an HTTP or HTTPS server on loopback whose behaviour is chosen by
// the URL query: a loopback.Target (size, status, delay, chunks&drip, length,
// fail&failstatus, retry-after; see there) that also counts what it serves
// and understands:
//
//	hang=1                 send nothing; wait until the client goes away
//	hold=N                 before the head, wait until N requests with hold
//	                       wait at once (in batches of N), or the client
//	                       goes away: requests made to overlap, whatever
//	                       the machine's speed
//	hold=N&holdat=body     the same, after the head (sent at once), before
//	                       the first byte of the body: use with chunks, whose
//	                       head is flushed before the body
//
// Paths with a meaning of their own:
//
//	/echo                  200 with a JSON object (see Echo) describing the request
//	/redirect?to=URL       302 to URL
//	/loop                  302 to /loop?n=i+1, forever
//
// A bad parameter is answered 400. Every sleep returns early when the
// request's context is done; Close cancels all of them.
//
// HTTP/2 is not offered: every connection carries one request at a time.
type Target struct {
	URL      string         // "http://127.0.0.1:PORT" or "https://..."
	Addr     string         // "127.0.0.1:PORT"
	CertPool *x509.CertPool // trusts the TLS cert (nil when !TLS)
	CertPEM  []byte         // PEM of the cert, so tests can write a --cacert file

	lb *loopback.Target

	mu          sync.Mutex
	requests    int
	hits        map[string]int // by request URI
	inFlight    int
	maxInFlight int
	fromIP      map[string]*ipStats
	holding     int           // requests waiting in the batch of hold=N
	release     chan struct{} // closed when the batch is full; nil: none waits

	changes changes // of inFlight, for the tests of this package
}

type ipStats struct {
	requests, inFlight, maxInFlight int
}

// Echo is the JSON document a Target answers on /echo.
type Echo struct {
	Method     string      `json:"method"`
	URL        string      `json:"url"` // the request target as received
	Proto      string      `json:"proto"`
	Host       string      `json:"host"`
	RemoteAddr string      `json:"remote_addr"`
	Header     http.Header `json:"headers"`
}

// StartTarget starts a Target on loopback. Call Close when done.
func StartTarget(opts TargetOptions) (*Target, error) {
	t := &Target{hits: make(map[string]int), fromIP: make(map[string]*ipStats)}
	var tlsConfig *tls.Config
	if opts.TLS {
		cert, err := newSelfSigned()
		if err != nil {
			return nil, err
		}
		t.CertPool, t.CertPEM = cert.pool, cert.pem
		tlsConfig = cert.serverConfig()
	}
	lb, err := loopback.StartTarget(loopback.TargetOptions{
		Addr: opts.Addr,
		TLS:  tlsConfig,
		Paths: map[string]func(http.ResponseWriter, *http.Request, int){
			"/echo":     serveEcho,
			"/redirect": serveRedirect,
			"/loop":     serveLoop,
		},
		Wrap: t.wrap,
	})
	if err != nil {
		return nil, err
	}
	t.lb = lb
	t.Addr, t.URL = lb.Addr, lb.URL
	return t, nil
}

// Close stops the target: requests in flight are cancelled, all connections
// closed, and all goroutines have ended when Close returns. Close may be
// called more than once.
func (t *Target) Close() { t.lb.Close() }

// Requests returns the number of requests received, all together.
func (t *Target) Requests() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

// Hits returns the number of requests received for this exact request URI
// ("/path?query", as in the request line).
func (t *Target) Hits(requestURI string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hits[requestURI]
}

// RequestsFrom returns the number of requests received over connections
// whose TCP source IP is ip.
func (t *Target) RequestsFrom(ip string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.fromIP[normIP(ip)]; s != nil {
		return s.requests
	}
	return 0
}

// MaxInFlight returns the most requests that were in flight at once, all
// sources together. A request is in flight from the moment its handler
// starts until the last body byte has been written and flushed.
func (t *Target) MaxInFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.maxInFlight
}

// MaxInFlightFrom is like MaxInFlight but counts only requests whose TCP
// source IP is ip (e.g. "127.0.0.3", see LoopbackIP).
func (t *Target) MaxInFlightFrom(ip string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.fromIP[normIP(ip)]; s != nil {
		return s.maxInFlight
	}
	return 0
}

// InFlight returns the number of requests in flight now.
func (t *Target) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inFlight
}

// InFlightFrom returns the number of requests from ip in flight now.
func (t *Target) InFlightFrom(ip string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.fromIP[normIP(ip)]; s != nil {
		return s.inFlight
	}
	return 0
}

// ResetStats sets every counter to zero, including the per-URI counts that
// fail=K uses: after ResetStats, the next K requests for a URI fail again.
// Maxima restart from the requests in flight now.
func (t *Target) ResetStats() {
	t.lb.ResetFailures()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests = 0
	t.hits = make(map[string]int)
	t.maxInFlight = t.inFlight
	for ip, s := range t.fromIP {
		if s.inFlight == 0 {
			delete(t.fromIP, ip)
			continue
		}
		s.requests, s.maxInFlight = 0, s.inFlight
	}
}

// wrap counts each request while next serves it, and serves hang=1.
func (t *Target) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ip := sourceIP(r.RemoteAddr)
		t.begin(r.URL.RequestURI(), ip)
		defer t.end(ip)
		q := r.URL.Query()
		if v := q.Get("hold"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || q.Get("holdat") != "" && q.Get("holdat") != "body" {
				http.Error(w, fmt.Sprintf("fetchtest: bad hold %q or holdat %q", v, q.Get("holdat")), http.StatusBadRequest)
				return
			}
			if q.Get("holdat") == "body" {
				w = &holdWriter{ResponseWriter: w, hold: func() bool { return t.hold(r.Context(), n) }}
			} else if !t.hold(r.Context(), n) {
				loopback.Abort()
			}
		}
		if v := q.Get("hang"); v != "" {
			hang, err := strconv.ParseBool(v)
			if err != nil {
				http.Error(w, fmt.Sprintf("fetchtest: bad hang %q", v), http.StatusBadRequest)
				return
			}
			if hang {
				<-r.Context().Done()
				loopback.Abort()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hold waits until n requests wait in it at once, or ctx is done, and
// reports whether the batch filled.
func (t *Target) hold(ctx context.Context, n int) bool {
	t.mu.Lock()
	if t.release == nil {
		t.release = make(chan struct{})
	}
	rel := t.release
	t.holding++
	if t.holding >= n {
		close(rel)
		t.release, t.holding = nil, 0
	}
	t.mu.Unlock()
	select {
	case <-rel:
		return true
	case <-ctx.Done():
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.release == rel { // the batch is not full: leave it
			t.holding--
		}
		return false
	}
}

// holdWriter holds (hold=N&holdat=body) before the first byte of the body.
type holdWriter struct {
	http.ResponseWriter
	hold func() bool
	held bool
}

func (w *holdWriter) Write(b []byte) (int, error) {
	if !w.held && len(b) > 0 {
		w.held = true
		if !w.hold() {
			loopback.Abort()
		}
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush the head through w.
func (w *holdWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush flushes the head, for handlers that assert http.Flusher.
func (w *holdWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// begin records a request for uri from ip.
func (t *Target) begin(uri, ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.requests++
	t.hits[uri]++
	t.inFlight++
	t.maxInFlight = max(t.maxInFlight, t.inFlight)
	s := t.fromIP[ip]
	if s == nil {
		s = &ipStats{}
		t.fromIP[ip] = s
	}
	s.requests++
	s.inFlight++
	s.maxInFlight = max(s.maxInFlight, s.inFlight)
	t.changes.tell()
}

func (t *Target) end(ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	if s := t.fromIP[ip]; s != nil {
		s.inFlight--
	}
	t.changes.tell()
}

func serveEcho(w http.ResponseWriter, r *http.Request, status int) {
	b, err := json.Marshal(Echo{
		Method: r.Method, URL: r.RequestURI, Proto: r.Proto, Host: r.Host,
		RemoteAddr: r.RemoteAddr, Header: r.Header,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	loopback.Reply(w, status, "application/json", append(b, '\n'))
}

func serveRedirect(w http.ResponseWriter, r *http.Request, status int) {
	to := r.URL.Query().Get("to")
	if to == "" {
		http.Error(w, "fetchtest: /redirect needs to=URL", http.StatusBadRequest)
		return
	}
	redirect(w, to, status)
}

func serveLoop(w http.ResponseWriter, r *http.Request, status int) {
	i, _ := strconv.Atoi(r.URL.Query().Get("n"))
	redirect(w, "/loop?n="+strconv.Itoa(i+1), status)
}

func redirect(w http.ResponseWriter, to string, status int) {
	if status == http.StatusOK {
		status = http.StatusFound
	}
	w.Header().Set("Location", to)
	loopback.Reply(w, status, "text/plain; charset=utf-8", nil)
}

// Body returns the first size bytes of the content a Target serves for
// size=N. It panics if size is negative. It is shorthand for loopback.Body.
func Body(size int) []byte { return loopback.Body(size) }

// sourceIP is the IP of a "host:port" remote address, IPv4-mapped
// addresses unmapped, or remote itself when it does not parse.
func sourceIP(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	return ap.Addr().Unmap().String()
}

// normIP normalizes an IP given by a caller the way sourceIP does.
func normIP(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	return a.Unmap().String()
}
