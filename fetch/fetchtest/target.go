package fetchtest

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// TargetOptions configures StartTarget. The zero value serves plain HTTP on
// 127.0.0.1 and a free port.
type TargetOptions struct {
	TLS  bool   // serve HTTPS with a self-signed cert valid for 127.0.0.1, ::1 and localhost
	Addr string // listen address, default "127.0.0.1:0"
}

// Target is an HTTP or HTTPS server on loopback whose behaviour is chosen by
// the URL query. Any path serves a body; the query parameters combine freely:
//
//	size=N                 body bytes (default 1024), content as Body; Content-Length
//	                       is set unless chunks or drip is used
//	status=N               response status (default 200; 200..599)
//	delay=DURATION         sleep before writing the headers of any response
//	chunks=K&drip=DURATION send the headers at once (flushed), then the body in K
//	                       chunks, each after a pause of drip (a body takes about K*drip)
//	fail=K&failstatus=S    the first K requests received for this exact request URI
//	                       answer S (default 503) with a short body; later ones
//	                       behave normally
//	retry-after=V          adds "Retry-After: V" to those failures
//	hang=1                 send nothing; wait until the client goes away
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

	srv *server

	mu          sync.Mutex
	requests    int
	hits        map[string]int // by request URI
	inFlight    int
	maxInFlight int
	fromIP      map[string]*ipStats
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
	var cert *selfSigned
	if opts.TLS {
		var err error
		if cert, err = newSelfSigned(); err != nil {
			return nil, err
		}
		t.CertPool, t.CertPEM = cert.pool, cert.pem
	}
	srv, err := newServer(opts.Addr, http.HandlerFunc(t.serve), cert)
	if err != nil {
		return nil, err
	}
	t.srv = srv
	t.Addr, t.URL = srv.addrString(), srv.url()
	srv.start()
	return t, nil
}

// Close stops the target: requests in flight are cancelled, all connections
// closed, and all goroutines have ended when Close returns. Close may be
// called more than once.
func (t *Target) Close() { t.srv.close(nil) }

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

// begin records a request and returns how many requests for uri have been
// received, this one included.
func (t *Target) begin(uri, ip string) int {
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
	return t.hits[uri]
}

func (t *Target) end(ip string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inFlight--
	if s := t.fromIP[ip]; s != nil {
		s.inFlight--
	}
}

// targetParams are the parsed query parameters.
type targetParams struct {
	size       int64
	status     int
	delay      time.Duration
	chunks     int
	drip       time.Duration
	chunked    bool
	fail       int
	failStatus int
	retryAfter string
	hang       bool
}

const (
	maxChunks = 1 << 20
	maxSize   = 1 << 40
)

func parseTargetParams(q url.Values) (targetParams, error) {
	p := targetParams{size: 1024, status: http.StatusOK, chunks: 1, failStatus: http.StatusServiceUnavailable}
	var err error
	if v := q.Get("size"); v != "" {
		if p.size, err = strconv.ParseInt(v, 10, 64); err != nil || p.size < 0 || p.size > maxSize {
			return p, fmt.Errorf("bad size %q", v)
		}
	}
	if v := q.Get("status"); v != "" {
		if p.status, err = parseStatus(v); err != nil {
			return p, err
		}
	}
	if v := q.Get("failstatus"); v != "" {
		if p.failStatus, err = parseStatus(v); err != nil {
			return p, err
		}
	}
	if p.delay, err = parseDuration(q, "delay"); err != nil {
		return p, err
	}
	if p.drip, err = parseDuration(q, "drip"); err != nil {
		return p, err
	}
	if v := q.Get("chunks"); v != "" {
		if p.chunks, err = strconv.Atoi(v); err != nil || p.chunks < 1 || p.chunks > maxChunks {
			return p, fmt.Errorf("bad chunks %q (1..%d)", v, maxChunks)
		}
	}
	p.chunked = q.Has("chunks") || q.Has("drip")
	if v := q.Get("fail"); v != "" {
		if p.fail, err = strconv.Atoi(v); err != nil || p.fail < 0 {
			return p, fmt.Errorf("bad fail %q", v)
		}
	}
	p.retryAfter = q.Get("retry-after")
	if v := q.Get("hang"); v != "" {
		if p.hang, err = strconv.ParseBool(v); err != nil {
			return p, fmt.Errorf("bad hang %q", v)
		}
	}
	return p, nil
}

func parseStatus(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 200 || n > 599 {
		return 0, fmt.Errorf("bad status %q (200..599)", v)
	}
	return n, nil
}

func parseDuration(q url.Values, name string) (time.Duration, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("bad %s %q", name, v)
	}
	return d, nil
}

func (t *Target) serve(w http.ResponseWriter, r *http.Request) {
	ip := sourceIP(r.RemoteAddr)
	n := t.begin(r.URL.RequestURI(), ip)
	defer t.end(ip)

	p, err := parseTargetParams(r.URL.Query())
	if err != nil {
		http.Error(w, "fetchtest: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if p.hang {
		<-ctx.Done()
		abort()
	}
	if !sleep(ctx, p.delay) {
		abort()
	}
	if n <= p.fail {
		if p.retryAfter != "" {
			w.Header().Set("Retry-After", p.retryAfter)
		}
		body := fmt.Sprintf("fetchtest: planned failure %d of %d\n", n, p.fail)
		writeSmall(w, p.failStatus, "text/plain; charset=utf-8", []byte(body))
		return
	}

	switch r.URL.Path {
	case "/echo":
		b, err := json.Marshal(Echo{
			Method: r.Method, URL: r.RequestURI, Proto: r.Proto, Host: r.Host,
			RemoteAddr: r.RemoteAddr, Header: r.Header,
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeSmall(w, p.status, "application/json", append(b, '\n'))
		return
	case "/redirect":
		to := r.URL.Query().Get("to")
		if to == "" {
			http.Error(w, "fetchtest: /redirect needs to=URL", http.StatusBadRequest)
			return
		}
		redirect(w, r, to, p.status)
		return
	case "/loop":
		i, _ := strconv.Atoi(r.URL.Query().Get("n"))
		redirect(w, r, "/loop?n="+strconv.Itoa(i+1), p.status)
		return
	}

	if p.status == http.StatusNoContent || p.status == http.StatusNotModified {
		p.size = 0
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rc := http.NewResponseController(w)
	if !p.chunked {
		w.Header().Set("Content-Length", strconv.FormatInt(p.size, 10))
		w.WriteHeader(p.status)
		if writeBody(w, 0, p.size) != nil {
			return
		}
		_ = rc.Flush()
		return
	}
	w.WriteHeader(p.status)
	if rc.Flush() != nil {
		return
	}
	for i := range int64(p.chunks) {
		if !sleep(ctx, p.drip) {
			abort()
		}
		from, to := p.size*i/int64(p.chunks), p.size*(i+1)/int64(p.chunks)
		if writeBody(w, from, to) != nil || rc.Flush() != nil {
			return
		}
	}
}

func redirect(w http.ResponseWriter, r *http.Request, to string, status int) {
	if status == http.StatusOK {
		status = http.StatusFound
	}
	w.Header().Set("Location", to)
	writeSmall(w, status, "text/plain; charset=utf-8", nil)
}

func writeSmall(w http.ResponseWriter, status int, contentType string, body []byte) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
	_ = http.NewResponseController(w).Flush()
}

// bodyPattern repeats every len(bodyPattern) bytes.
const bodyPattern = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-\n"

// Body returns the first size bytes of the content a Target serves for
// size=N: bodyPattern repeated. It panics if size is negative.
func Body(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = bodyPattern[i%len(bodyPattern)]
	}
	return b
}

// writeBody writes the body bytes at offsets [from, to).
func writeBody(w http.ResponseWriter, from, to int64) error {
	const piece = 32 << 10
	if from >= to {
		return nil
	}
	buf := Body(int(min(to-from, piece)) + len(bodyPattern))
	for from < to {
		off := from % int64(len(bodyPattern))
		n := min(to-from, piece)
		if _, err := w.Write(buf[off : off+n]); err != nil {
			return err
		}
		from += n
	}
	return nil
}

// abort ends the handler and drops the connection without a response, or
// without ending a chunked body cleanly: the client must not mistake a cut
// response for a whole one when the target closes.
func abort() { panic(http.ErrAbortHandler) }

// sleep waits for d or until ctx is done, and reports whether ctx is still
// live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
