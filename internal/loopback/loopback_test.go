package loopback_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fetch-dev/fetch/internal/loopback"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// inFlight counts the requests a handler is serving, as a Wrap option.
type inFlight struct {
	mu        sync.Mutex
	now, most int
	started   chan struct{} // one send per request started
}

func (c *inFlight) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.now++
		c.most = max(c.most, c.now)
		c.mu.Unlock()
		if c.started != nil {
			c.started <- struct{}{}
		}
		defer func() {
			c.mu.Lock()
			c.now--
			c.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

func (c *inFlight) max() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.most
}

func startTarget(t *testing.T, opts loopback.TargetOptions) *loopback.Target {
	t.Helper()
	tg, err := loopback.StartTarget(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg
}

func startProxy(t *testing.T, opts loopback.ProxyOptions) *loopback.Proxy {
	t.Helper()
	p, err := loopback.StartHTTPProxy(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// client returns a client through proxyURL (direct when ""), whose idle
// connections are closed at the end of the test.
func client(t *testing.T, proxyURL string) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	if proxyURL != "" {
		u, err := url.Parse(proxyURL)
		if err != nil {
			t.Fatal(err)
		}
		tr.Proxy = http.ProxyURL(u)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read body: %v", url, err)
	}
	return resp.StatusCode, b
}

func TestTarget(t *testing.T) {
	tg := startTarget(t, loopback.TargetOptions{
		Paths: map[string]func(http.ResponseWriter, *http.Request, int){
			"/own": func(w http.ResponseWriter, _ *http.Request, status int) {
				loopback.Reply(w, status, "text/plain", []byte("own"))
			},
		},
	})
	c := client(t, "")
	tests := []struct {
		name       string
		uri        string
		wantStatus int
		wantBody   []byte // nil: don't check
	}{
		{"default size", "/x", 200, loopback.Body(1024)},
		{"size", "/x?size=70000", 200, loopback.Body(70000)},
		{"status", "/x?status=404&size=3", 404, loopback.Body(3)},
		{"dripped", "/x?size=1000&chunks=4&drip=5ms", 200, loopback.Body(1000)},
		{"delayed", "/x?size=10&delay=10ms", 200, loopback.Body(10)},
		{"planned failure", "/x?fail=1&failstatus=429", 429, nil},
		{"own path", "/own?status=201", 201, []byte("own")},
		{"own path fails first", "/own?fail=1", 503, nil},
		{"bad param", "/x?chunks=0", 400, nil},
		{"bad length", "/x?chunks=2&length=yes", 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := get(t, c, tg.URL+tt.uri)
			if status != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", status, tt.wantStatus, body)
			}
			if tt.wantBody != nil && !bytes.Equal(body, tt.wantBody) {
				t.Errorf("body = %d bytes %.40q..., want %d bytes", len(body), body, len(tt.wantBody))
			}
		})
	}

	// length=1: a dripped body keeps its Content-Length, and is not
	// chunked; without it, it is.
	for _, tt := range []struct {
		uri     string
		length  int64
		chunked bool
	}{
		{"/x?size=100&chunks=2&drip=5ms&length=1", 100, false},
		{"/x?size=100&chunks=2&drip=5ms", -1, true},
	} {
		resp, err := c.Get(tg.URL + tt.uri)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !bytes.Equal(b, loopback.Body(100)) {
			t.Errorf("%s: body %q, %v", tt.uri, b, err)
		}
		if chunked := len(resp.TransferEncoding) > 0; resp.ContentLength != tt.length || chunked != tt.chunked {
			t.Errorf("%s: Content-Length %d, chunked %v; want %d, %v", tt.uri, resp.ContentLength, chunked, tt.length, tt.chunked)
		}
	}

	// fail=K fails the first K requests for the URI, and again after
	// ResetFailures.
	for i, want := range []int{503, 503, 200} {
		if status, _ := get(t, c, tg.URL+"/f?fail=2"); status != want {
			t.Errorf("request %d: status = %d, want %d", i+1, status, want)
		}
	}
	tg.ResetFailures()
	if status, _ := get(t, c, tg.URL+"/f?fail=2"); status != 503 {
		t.Errorf("after ResetFailures: status = %d, want 503", status)
	}
}

func TestProxy(t *testing.T) {
	var seen inFlight
	tg := startTarget(t, loopback.TargetOptions{Wrap: seen.wrap})
	bind := loopback.IP(0)
	var from string
	var mu sync.Mutex
	echoIP := startTarget(t, loopback.TargetOptions{
		Paths: map[string]func(http.ResponseWriter, *http.Request, int){
			"/ip": func(w http.ResponseWriter, r *http.Request, status int) {
				host, _, _ := net.SplitHostPort(r.RemoteAddr)
				mu.Lock()
				from = host
				mu.Unlock()
				loopback.Reply(w, status, "text/plain", nil)
			},
		},
	})
	p := startProxy(t, loopback.ProxyOptions{BindIP: bind})
	c := client(t, p.URL)

	if status, body := get(t, c, tg.URL+"/x?size=5000&chunks=3"); status != 200 || !bytes.Equal(body, loopback.Body(5000)) {
		t.Errorf("forwarded: status %d, %d bytes", status, len(body))
	}
	if status, _ := get(t, c, echoIP.URL+"/ip"); status != 200 {
		t.Errorf("forwarded /ip: status %d", status)
	}
	mu.Lock()
	if from != bind {
		t.Errorf("target saw the proxy dial from %q, want %q", from, bind)
	}
	mu.Unlock()

	// A CONNECT tunnel, as a client makes for https; here to a plain
	// target, written by hand.
	conn, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "CONNECT "+tg.Addr+" HTTP/1.1\r\nHost: "+tg.Addr+"\r\n\r\n"+
		"GET /t?size=7 HTTP/1.1\r\nHost: "+tg.Addr+"\r\nConnection: close\r\n\r\n")
	all, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(all, []byte("HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK\r\n")) ||
		!bytes.HasSuffix(all, loopback.Body(7)) {
		t.Errorf("tunnel answered %q", all)
	}

	if status, _ := get(t, client(t, ""), p.URL+"/not-absolute"); status != 400 {
		t.Errorf("origin-form request to the proxy: status %d, want 400", status)
	}
}

func TestProxyLatency(t *testing.T) {
	tg := startTarget(t, loopback.TargetOptions{})
	p := startProxy(t, loopback.ProxyOptions{Latency: 100 * time.Millisecond})
	c := client(t, p.URL)
	start := time.Now()
	get(t, c, tg.URL+"/x")
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("request took %v, want at least the 100ms latency", d)
	}
}

// TestProxyConcurrency sends more requests than the cap at once: the
// target never sees more than the cap in flight, and every request is
// served.
func TestProxyConcurrency(t *testing.T) {
	const limit, requests = 2, 6
	seen := inFlight{started: make(chan struct{}, requests)}
	tg := startTarget(t, loopback.TargetOptions{Wrap: seen.wrap})
	p := startProxy(t, loopback.ProxyOptions{Concurrency: limit})
	c := client(t, p.URL)
	var wg sync.WaitGroup
	statuses := make([]int, requests)
	for i := range requests {
		wg.Go(func() {
			resp, err := c.Get(tg.URL + "/x?delay=50ms")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	for i, s := range statuses {
		if s != 200 {
			t.Errorf("request %d: status %d", i, s)
		}
	}
	if got := seen.max(); got != limit {
		t.Errorf("most in flight at the target = %d, want %d", got, limit)
	}
}

// TestCloseWithWork closes a proxy while a request waits for a slot and
// another is in flight, and a target with a dripping body: nothing is
// left running (TestMain checks with goleak).
func TestCloseWithWork(t *testing.T) {
	seen := inFlight{started: make(chan struct{}, 4)}
	tg, err := loopback.StartTarget(loopback.TargetOptions{Wrap: seen.wrap})
	if err != nil {
		t.Fatal(err)
	}
	p, err := loopback.StartHTTPProxy(loopback.ProxyOptions{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := client(t, p.URL)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", tg.URL+"/x?chunks=100&drip=100ms", nil)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	<-seen.started // one request reached the target; the other waits for the slot
	p.Close()
	tg.Close()
	wg.Wait()
	p.Close()
	tg.Close()
}

func TestIP(t *testing.T) {
	if got := loopback.IP(0); got != "127.0.0.2" {
		t.Errorf("IP(0) = %q", got)
	}
	if got := loopback.IP(250); got != "127.0.0.252" {
		t.Errorf("IP(250) = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("IP(251) did not panic")
		}
	}()
	loopback.IP(251)
}
