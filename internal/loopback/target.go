package loopback

import (
	"crypto/tls"
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
	Addr string      // listen address, default "127.0.0.1:0"
	TLS  *tls.Config // serve HTTPS with this config; nil serves plain HTTP

	// Paths gives paths an answer of their own, written instead of the body
	// once delay and planned failures have been applied; status is the
	// status= parameter (default 200).
	Paths map[string]func(w http.ResponseWriter, r *http.Request, status int)

	// Wrap, when set, wraps the target's handler (to count requests, or
	// to answer some before the target does).
	Wrap func(http.Handler) http.Handler
}

// Target is an HTTP server on loopback whose answer is chosen by the URL
// query. Any path serves a body; the query parameters combine freely:
//
//	size=N                 body bytes (default 1024), content as Body; Content-Length
//	                       is set unless chunks or drip is used
//	status=N               response status (default 200; 200..599)
//	delay=DURATION         sleep before writing the headers of any response
//	chunks=K&drip=DURATION send the headers at once (flushed), then the body in K
//	                       chunks, each after a pause of drip (a body takes about K*drip)
//	length=1               with chunks or drip, the body's Content-Length too, so
//	                       that it is not chunked: a head and a body with its
//	                       length that come apart, as squid sends them
//	fail=K&failstatus=S    the first K requests received for this exact request URI
//	                       answer S (default 503) with a short body; later ones
//	                       behave normally
//	retry-after=V          adds "Retry-After: V" to those failures
//
// Other parameters are ignored. A bad parameter is answered 400. Every
// sleep returns early when the request's context is done; Close cancels
// all of them.
//
// HTTP/2 is not offered: every connection carries one request at a time.
type Target struct {
	URL  string // "http://127.0.0.1:PORT" or "https://..."
	Addr string // "127.0.0.1:PORT"

	srv   *Server
	paths map[string]func(http.ResponseWriter, *http.Request, int)

	mu   sync.Mutex
	hits map[string]int // by request URI, for fail=K
}

// StartTarget starts a Target on loopback. Call Close when done.
func StartTarget(opts TargetOptions) (*Target, error) {
	t := &Target{hits: make(map[string]int), paths: opts.Paths}
	var h http.Handler = http.HandlerFunc(t.serve)
	if opts.Wrap != nil {
		h = opts.Wrap(h)
	}
	srv, err := NewServer(opts.Addr, h, opts.TLS)
	if err != nil {
		return nil, err
	}
	t.srv = srv
	t.Addr, t.URL = srv.Addr(), srv.URL()
	srv.Start()
	return t, nil
}

// Close stops the target: requests in flight are cancelled, all connections
// closed, and all goroutines have ended when Close returns. Close may be
// called more than once.
func (t *Target) Close() { t.srv.Close() }

// ResetFailures forgets the requests counted for fail=K: the next K
// requests for each URI fail again.
func (t *Target) ResetFailures() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hits = make(map[string]int)
}

// hit counts a request for uri and returns how many have been received,
// this one included.
func (t *Target) hit(uri string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hits[uri]++
	return t.hits[uri]
}

// targetParams are the parsed query parameters.
type targetParams struct {
	size       int64
	status     int
	delay      time.Duration
	chunks     int
	drip       time.Duration
	chunked    bool // the body comes in chunks, after drip each
	length     bool // with chunked, the Content-Length is sent all the same
	fail       int
	failStatus int
	retryAfter string
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
	switch v := q.Get("length"); v {
	case "", "1":
		p.length = v == "1"
	default:
		return p, fmt.Errorf("bad length %q (only 1)", v)
	}
	if v := q.Get("fail"); v != "" {
		if p.fail, err = strconv.Atoi(v); err != nil || p.fail < 0 {
			return p, fmt.Errorf("bad fail %q", v)
		}
	}
	p.retryAfter = q.Get("retry-after")
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
	n := t.hit(r.URL.RequestURI())
	p, err := parseTargetParams(r.URL.Query())
	if err != nil {
		http.Error(w, "loopback: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	if !sleep(ctx, p.delay) {
		Abort()
	}
	if n <= p.fail {
		if p.retryAfter != "" {
			w.Header().Set("Retry-After", p.retryAfter)
		}
		body := fmt.Sprintf("loopback: planned failure %d of %d\n", n, p.fail)
		Reply(w, p.failStatus, "text/plain; charset=utf-8", []byte(body))
		return
	}
	if serve, ok := t.paths[r.URL.Path]; ok {
		serve(w, r, p.status)
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
	if p.length {
		w.Header().Set("Content-Length", strconv.FormatInt(p.size, 10))
	}
	w.WriteHeader(p.status)
	if rc.Flush() != nil {
		return
	}
	for i := range int64(p.chunks) {
		if !sleep(ctx, p.drip) {
			Abort()
		}
		from, to := p.size*i/int64(p.chunks), p.size*(i+1)/int64(p.chunks)
		if writeBody(w, from, to) != nil || rc.Flush() != nil {
			return
		}
	}
}

// Reply writes a whole small response: status, Content-Type,
// Content-Length and body, flushed.
func Reply(w http.ResponseWriter, status int, contentType string, body []byte) {
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
