package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/internal/dialer"
)

// rawServer is a loopback server that runs serve on each connection it
// accepts, with the connection's requests read in turn by next.
type rawServer struct {
	addr  string
	ln    net.Listener
	conns atomic.Int64 // accepted
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]bool
}

func startRawServer(t *testing.T, serve func(c net.Conn, next func() *http.Request)) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{addr: ln.Addr().String(), ln: ln, open: map[net.Conn]bool{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open[c] = true
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				serve(c, func() *http.Request {
					req, err := http.ReadRequest(br)
					if err != nil {
						return nil
					}
					return req
				})
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.open {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// answerAll answers every request of a connection with answer(req).
func answerAll(answer func(req *http.Request) string) func(net.Conn, func() *http.Request) {
	return func(c net.Conn, next func() *http.Request) {
		for req := next(); req != nil; req = next() {
			if _, err := io.WriteString(c, answer(req)); err != nil {
				return
			}
		}
	}
}

// okAnswer is a whole keep-alive answer with the body "ok".
const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// answerOK answers every request of a connection with okAnswer.
func answerOK() func(net.Conn, func() *http.Request) {
	return answerAll(func(*http.Request) string { return okAnswer })
}

// withOneIdle starts a server that answers okAnswer and an h1 (testH1(4,
// 4)) that has fetched from it once, and so holds one idle connection to it.
func withOneIdle(t *testing.T) (*rawServer, *Client) {
	t.Helper()
	srv := startRawServer(t, answerOK())
	h := testH1(4, 4)
	t.Cleanup(h.CloseIdle)
	if _, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil); err != nil {
		t.Fatal(err)
	}
	return srv, h
}

func testH1(perKey, budget int) *Client {
	return New(Options{Dial: socketDial, MaxHeader: 1 << 10, PerKey: perKey, Budget: budget, OnReuse: testDialer.KeepAlive})
}

// testDialer dials as h1's dialer does an IP address: with its own socket
// where it takes the address, else with net.Dialer; keep-alive is set when
// a connection is first taken again (see TestH1KeepAliveOnReuse).
var testDialer = &dialer.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: -1, Count: -1}}

// socketDial dials with testDialer.
func socketDial(ctx context.Context, network, addr string) (net.Conn, error) {
	return testDialer.Dial(ctx, network, addr)
}

// get sends a request for rawURL on t and reads its body to the end.
func get(ctx context.Context, t *Client, method, rawURL string, proxy *url.URL) (status int, body string, reused bool, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, "", false, err
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused },
	})
	req := (&http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}}).WithContext(ctx)
	resp, err := t.RoundTrip(req, proxy, ProxyAuth{})
	if err != nil {
		return 0, "", reused, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), reused, err
}

// TestH1Framings: every way an HTTP/1.1 answer can end is read to its end,
// and the connection is kept for the next request exactly when the answer
// ended by itself and no side asked to close it.
func TestH1Framings(t *testing.T) {
	for _, tc := range []struct {
		name, method, answer, body string
		keep                       bool
	}{
		{"content-length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello", true},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2\r\nlo\r\n0\r\n\r\n", "hello", true},
		{"empty", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "", true},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", "", true},
		{"304", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", "", true},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "", true},
		{"1xx skipped", "GET", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", true},
		{"Connection: close", "GET", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "ok", false},
		{"HTTP/1.0", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", false},
		{"to the end of the connection", "GET", "HTTP/1.1 200 OK\r\n\r\nuntil close", "until close", false},
		{"status under 100", "GET", "HTTP/1.1 099 Odd\r\nContent-Length: 2\r\n\r\nok", "ok", true}, // the answer, as net/http takes it
	} {
		// Over a connection of the dialer's own socket (testH1's) and of
		// net.Dialer (a target named by its host), which sock reads
		// through net's RawConn.
		for _, dial := range []struct {
			name string
			dial func(ctx context.Context, network, addr string) (net.Conn, error)
		}{{"socket", socketDial}, {"net", (&net.Dialer{}).DialContext}} {
			t.Run(tc.name+"/"+dial.name, func(t *testing.T) {
				srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
					for req := next(); req != nil; req = next() {
						io.WriteString(c, tc.answer)
						if !tc.keep {
							return // the server closes: the answer may end with it
						}
					}
				})
				h := New(Options{Dial: dial.dial, MaxHeader: 1 << 10, PerKey: 4, Budget: 4})
				defer h.CloseIdle()
				for i := range 3 {
					status, body, reused, err := get(context.Background(), h, tc.method, "http://"+srv.addr+"/x", nil)
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					if (status < 200) != (tc.name == "status under 100") || body != tc.body {
						t.Fatalf("request %d: status %d body %q, want body %q", i, status, body, tc.body)
					}
					if want := tc.keep && i > 0; reused != want {
						t.Errorf("request %d: reused %v, want %v", i, reused, want)
					}
				}
				want := int64(1)
				if !tc.keep {
					want = 3
				}
				if n := srv.conns.Load(); n != want {
					t.Errorf("%d connections for 3 requests, want %d", n, want)
				}
			})
		}
	}
}

// TestH1NotReused: a body closed before its end, and an answer followed
// by bytes nobody asked for, close their connection.
func TestH1NotReused(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		read         int // bytes of the body read before Close
	}{
		{"closed early", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", 3},
		// read until nothing is buffered: only the rest on the wire is left
		{"closed early, the rest not yet read", "HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n" + strings.Repeat("x", 65536), -1},
		{"unsolicited bytes", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, answerAll(func(*http.Request) string { return tc.answer }))
			h := testH1(4, 4)
			var warnings []string
			h.warn = func(msg string) { warnings = append(warnings, msg) }
			defer h.CloseIdle()
			for range 2 {
				resp := openGet(t, h, srv.addr)
				buf := make([]byte, max(tc.read, 1))
				if tc.read < 0 {
					for resp.Body.(*body).pc.br.Buffered() > 0 {
						if _, err := resp.Body.Read(buf); err != nil {
							t.Fatal(err)
						}
					}
				} else if _, err := io.ReadFull(resp.Body, buf); err != nil {
					t.Fatal(err)
				}
				if tc.read == 2 { // all of it: the next Read is the end
					if n, err := resp.Body.Read(buf); n != 0 || err != io.EOF {
						t.Fatalf("read past the end: %d, %v", n, err)
					}
				}
				resp.Body.Close()
				if _, err := resp.Body.Read(buf); !errors.Is(err, http.ErrBodyReadAfterClose) && !errors.Is(err, io.EOF) {
					t.Errorf("read after close: %v", err)
				}
			}
			if n := srv.conns.Load(); n != 2 {
				t.Errorf("%d connections for 2 requests, want 2: a connection was reused", n)
			}
			if h.n != 0 {
				t.Errorf("%d idle connections kept, want 0", h.n)
			}
			want := 0
			if tc.name == "unsolicited bytes" {
				want = 1 // once, not per answer
			}
			if len(warnings) != want || want == 1 && !strings.Contains(warnings[0], `starting with "HTTP/1.1 200 OK\r"`) {
				t.Errorf("warnings %q, want %d about the unsolicited bytes", warnings, want)
			}
		})
	}
}

// TestH1ServerClosedIdle: a kept-alive connection that the server closed,
// or on which it sent what nobody asked for (a late answer, a 408 before
// closing), while it was idle is not used: the next request, of any
// method, goes on a new connection and gets its own answer. Unasked bytes
// are warned about once, a 408 not at all.
func TestH1ServerClosedIdle(t *testing.T) {
	for _, tc := range []struct {
		name, method, late string
		warned             bool
	}{
		{"closed/GET", "GET", "", false},
		{"closed/POST", "POST", "", false},
		{"late answer", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSTALE", true},
		{"408", "POST", "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idle := make(chan struct{}, 4)
			read := make(chan struct{}, 4) // the client has its answer
			stop := make(chan struct{})
			srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
				req := next()
				if req == nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+fmt.Sprint(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
				if tc.late != "" {
					select { // after the client has read its answer
					case <-read:
					case <-stop: // the test failed before
						return
					}
					io.WriteString(c, tc.late)
				}
				c.Close() // without a word, or after the late bytes
				idle <- struct{}{}
			})
			t.Cleanup(func() { close(stop) }) // before the server's own clean-up
			h := testH1(4, 4)
			var warnings []string
			h.warn = func(msg string) { warnings = append(warnings, msg) }
			defer h.CloseIdle()
			for i, path := range []string{"/a", "/b", "/c"} {
				_, body, reused, err := get(context.Background(), h, tc.method, "http://"+srv.addr+path, nil)
				if err != nil || body != path {
					t.Fatalf("request %d: %q, %v; want %q", i, body, err, path)
				}
				if reused {
					t.Errorf("request %d reused a connection its server had closed", i)
				}
				read <- struct{}{}
				<-idle // what the server does while the connection is idle is done
			}
			if n := srv.conns.Load(); n != 3 {
				t.Errorf("%d connections for 3 requests, want 3", n)
			}
			if tc.warned != (len(warnings) == 1) || len(warnings) > 1 {
				t.Errorf("warnings %q, want one: %v", warnings, tc.warned)
			}
		})
	}
}

// TestH1SentAgain: a kept-alive connection that the server closes after
// the request went out on it, with no byte of an answer (as at the end of
// a keep-alive timeout), has the request sent again on a new connection
// when its method allows it (GET, or any with an Idempotency-Key); a POST
// gets the failure instead of being sent twice.
func TestH1SentAgain(t *testing.T) {
	for _, tc := range []struct {
		method string
		header http.Header
		again  bool
	}{
		{"GET", nil, true},
		{"POST", http.Header{"Idempotency-Key": {"k1"}}, true},
		{"POST", nil, false},
	} {
		t.Run(fmt.Sprint(tc.method, tc.header), func(t *testing.T) {
			var got atomic.Int64 // requests the server read
			srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
				if next() == nil {
					return
				}
				got.Add(1)
				io.WriteString(c, okAnswer)
				if next() != nil {
					got.Add(1) // read, then the connection is closed unanswered
				}
			})
			h := testH1(4, 4)
			defer h.CloseIdle()
			send := func() (string, error) {
				u := mustURL(t, srv.addr)
				req := &http.Request{Method: tc.method, URL: u, Host: u.Host, Header: tc.header.Clone()}
				if req.Header == nil {
					req.Header = http.Header{}
				}
				resp, err := h.RoundTrip(req, nil, ProxyAuth{})
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
			if body, err := send(); err != nil || body != "ok" {
				t.Fatalf("first request: %q, %v", body, err)
			}
			body, err := send()
			switch {
			case tc.again && (err != nil || body != "ok"):
				t.Errorf("%q, %v: want it sent again on a new connection", body, err)
			case !tc.again && err == nil:
				t.Errorf("no error: the POST was sent twice")
			case !tc.again && !errors.Is(err, io.EOF):
				t.Errorf("%v, want the connection's EOF", err)
			}
			want := int64(2)
			if tc.again {
				want = 3
			}
			if n := got.Load(); n != want {
				t.Errorf("the server read %d requests, want %d", n, want)
			}
		})
	}
}

// TestH1Cancelled: a request whose context is done already is not sent,
// and spends no idle connection.
func TestH1Cancelled(t *testing.T) {
	var got atomic.Int64
	srv := startRawServer(t, answerAll(func(*http.Request) string {
		got.Add(1)
		return okAnswer
	}))
	h := testH1(4, 4)
	defer h.CloseIdle()
	if _, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		if _, _, _, err := get(ctx, h, "POST", "http://"+srv.addr+"/", nil); !errors.Is(err, context.Canceled) {
			t.Errorf("%v, want context.Canceled", err)
		}
	}
	if n := got.Load(); n != 1 {
		t.Errorf("the server read %d requests, want 1: a cancelled one was sent", n)
	}
	if h.n != 1 {
		t.Errorf("%d idle connections, want the 1 kept", h.n)
	}
}

// TestH1ClosedUnread: an answer that has no body (HEAD, 204) is at its
// end already; closing it unread keeps the connection.
func TestH1ClosedUnread(t *testing.T) {
	srv := startRawServer(t, answerAll(func(req *http.Request) string {
		if req.Method == "HEAD" {
			return "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
		}
		return "HTTP/1.1 204 No Content\r\n\r\n"
	}))
	h := testH1(4, 4)
	defer h.CloseIdle()
	for _, method := range []string{"HEAD", "GET", "HEAD"} {
		u := mustURL(t, srv.addr)
		resp, err := h.RoundTrip(&http.Request{Method: method, URL: u, Host: u.Host, Header: http.Header{}}, nil, ProxyAuth{})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 answers without a body closed unread, want 1", n)
	}
}

// TestH1HeaderLimit: response headers over the limit fail with
// headersTooLargeError, worded as net/http's error; 1xx answers are
// skipped, however many, and share the limit with the final answer's
// headers, as in net/http.
func TestH1HeaderLimit(t *testing.T) {
	big := "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("a", 2<<10) + "\r\nContent-Length: 0\r\n\r\n"
	srv := startRawServer(t, answerAll(func(req *http.Request) string {
		switch req.URL.Path {
		case "/1xx": // 175 bytes of 1xx
			return strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 7) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
		case "/1xx-big": // 1,250 bytes of 1xx
			return strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 50) + "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
		}
		return big
	}))
	h := testH1(4, 4)
	defer h.CloseIdle()
	var tooLarge *HeadersTooLargeError
	const netHTTPs = "net/http: server response headers exceeded 1024 bytes; aborted"
	_, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil)
	if !errors.As(err, &tooLarge) || err.Error() != netHTTPs {
		t.Errorf("headers of 2 KiB over a limit of 1 KiB: %v, want the header limit error, worded as net/http's", err)
	}
	if status, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/1xx", nil); err != nil || status != 200 {
		t.Errorf("7 1xx answers, then 200: %d, %v", status, err)
	}
	if _, _, _, err = get(context.Background(), h, "GET", "http://"+srv.addr+"/1xx-big", nil); !errors.As(err, &tooLarge) {
		t.Errorf("1xx answers over the header limit: %v, want the header limit error", err)
	}
}

// TestH1Cancel: a cancelled context ends a wait for headers and a wait for
// the body at once, with the context's error, and closes the connection.
// Tolerance: each wait ends within 2 s of the cancel (the server never
// answers on its own).
func TestH1Cancel(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
		req := next()
		if req != nil && req.URL.Path == "/body" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234")
		}
		select { // the client must not wait for this
		case <-release:
		case <-time.After(5 * time.Second):
		}
	})
	h := testH1(4, 4)
	defer h.CloseIdle()
	for _, path := range []string{"/headers", "/body"} {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		_, _, _, err := get(ctx, h, "GET", "http://"+srv.addr+path, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want context.Canceled", path, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: ended %s after the start, want about 100ms", path, d)
		}
		cancel()
	}
	if h.n != 0 {
		t.Errorf("%d idle connections kept after cancelled requests, want 0", h.n)
	}
}

// TestH1IdleBounds: idle connections are kept up to perKey for each target
// and up to the budget in all, the least recently used closed first, and
// one idle for longer than the idle timeout is not used, and is closed by
// the next connection made idle.
func TestH1IdleBounds(t *testing.T) {
	ok := answerOK()
	var srvs []*rawServer
	for range 4 {
		srvs = append(srvs, startRawServer(t, ok))
	}
	now := time.Now()
	h := testH1(2, 3)
	h.now = func() time.Time { return now }
	defer h.CloseIdle()

	// 3 at once to the first target: 3 connections, 2 kept.
	var bodies []*http.Response
	for range 3 {
		bodies = append(bodies, openGet(t, h, srvs[0].addr))
	}
	for _, r := range bodies {
		io.ReadAll(r.Body)
		r.Body.Close()
	}
	if h.n != 2 || len(h.idle[canonicalAddr(mustURL(t, srvs[0].addr))]) != 2 {
		t.Fatalf("%d idle after 3 at once to one target, want its 2", h.n)
	}
	// One to each other target: 5 would be idle, the budget keeps 3, the
	// oldest (the first target's) closed.
	for _, s := range srvs[1:] {
		now = now.Add(time.Second)
		if _, _, _, err := get(context.Background(), h, "GET", "http://"+s.addr+"/", nil); err != nil {
			t.Fatal(err)
		}
	}
	if h.n != 3 {
		t.Fatalf("%d idle, want the budget, 3", h.n)
	}
	if _, ok := h.idle[canonicalAddr(mustURL(t, srvs[0].addr))]; ok {
		t.Errorf("the least recently used target still has idle connections")
	}
	for _, s := range srvs[1:] {
		if _, _, reused, err := get(context.Background(), h, "GET", "http://"+s.addr+"/", nil); err != nil || !reused {
			t.Errorf("%s: reused %v, %v: want its idle connection", s.addr, reused, err)
		}
	}
	// Past the idle timeout: a new connection.
	now = now.Add(h.idleTimeout + time.Second)
	if _, _, reused, err := get(context.Background(), h, "GET", "http://"+srvs[1].addr+"/", nil); err != nil || reused {
		t.Errorf("after the idle timeout: reused %v, %v: want a new connection", reused, err)
	}
	if n := srvs[1].conns.Load(); n != 2 {
		t.Errorf("%d connections to a target after its idle one timed out, want 2", n)
	}
	if h.n != 1 {
		t.Errorf("%d idle after the others timed out, want 1: the new one (the old are closed by the put after their time)", h.n)
	}
}

// openGet sends a GET for / on addr through h and returns the response,
// its body unread: its connection is held until the body is closed.
func openGet(t *testing.T, h *Client, addr string) *http.Response {
	t.Helper()
	u := mustURL(t, addr)
	resp, err := h.RoundTrip(&http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}}, nil, ProxyAuth{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func mustURL(t *testing.T, addr string) *url.URL {
	u, err := url.Parse("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestH1Proxy: through a proxy a request goes in absolute form, with its
// headers, on the proxy's connections, whatever the target.
func TestH1Proxy(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	px := startRawServer(t, answerAll(func(req *http.Request) string {
		mu.Lock()
		lines = append(lines, req.Method+" "+req.RequestURI+" "+req.Header.Get("Proxy-Authorization"))
		mu.Unlock()
		return okAnswer
	}))
	h := testH1(4, 4)
	defer h.CloseIdle()
	proxy := mustURL(t, px.addr)
	for _, target := range []string{"http://a.example/x?y=1", "http://b.example:8080/"} {
		u, _ := url.Parse(target)
		req := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{"Proxy-Authorization": {"Basic dTpw"}}}
		resp, err := h.RoundTrip(req, proxy, ProxyAuth{})
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	want := []string{"GET http://a.example/x?y=1 Basic dTpw", "GET http://b.example:8080/ Basic dTpw"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("the proxy read\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if n := px.conns.Load(); n != 1 {
		t.Errorf("%d connections to the proxy for 2 targets, want 1", n)
	}
}

// TestH1PutSweepsFirst: a connection made idle when its key's share is
// taken by connections past the idle timeout is kept, and they are
// closed, not the other way round.
func TestH1PutSweepsFirst(t *testing.T) {
	srv := startRawServer(t, answerOK())
	now := time.Now()
	h := testH1(2, 8)
	h.now = func() time.Time { return now }
	defer h.CloseIdle()
	var open []*http.Response
	for range 3 {
		open = append(open, openGet(t, h, srv.addr))
	}
	for _, r := range open[:2] {
		io.ReadAll(r.Body)
		r.Body.Close()
	}
	now = now.Add(h.idleTimeout + time.Second)
	io.ReadAll(open[2].Body)
	open[2].Body.Close()
	if h.n != 1 {
		t.Fatalf("%d idle, want 1: the fresh one", h.n)
	}
	if _, _, reused, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil); err != nil || !reused {
		t.Errorf("reused %v, %v: want the fresh idle connection", reused, err)
	}
	if n := srv.conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3", n)
	}
}

// TestH1CancelledOnItsConnection: a request cancelled once it has its
// idle connection, before anything is sent, gives the connection back.
func TestH1CancelledOnItsConnection(t *testing.T) {
	srv, h := withOneIdle(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { cancel() }})
	u := mustURL(t, srv.addr)
	if _, err := h.RoundTrip((&http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{}}).WithContext(ctx), nil, ProxyAuth{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
	if h.n != 1 {
		t.Errorf("%d idle, want the connection given back", h.n)
	}
	if _, _, reused, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil); err != nil || !reused {
		t.Errorf("reused %v, %v: want the connection given back", reused, err)
	}
}

// TestH1HeadInPieces: a head that comes a line at a time (tinyproxy
// writes each header line on its own) is read by h1's own reading, and a
// reset while the rest of a head is awaited fails the request as it fails
// it in net/http's transport: the socket tells the reset once, which
// net/http's header reader passes over, and then an end of file; the
// record's kind is reset either way. Tolerance: the server's 50 ms pauses
// only order its writes; nothing is timed.
func TestH1HeadInPieces(t *testing.T) {
	srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
		for req := next(); req != nil; req = next() {
			head := []string{"HTTP/1.1 200 OK\r\n", "Server: tiny\r\n", "Content-Length: 2\r\n", "\r\n"}
			switch req.URL.Path {
			case "/reset":
				head = head[:2]
			case "/1xx-reset": // the final answer's first read fails
				head = []string{"HTTP/1.1 103 Early Hints\r\n", "Link: </a>\r\n", "\r\n"}
			}
			for _, line := range head {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			if req.URL.Path != "/" {
				c.(*net.TCPConn).SetLinger(0) // close with a reset
				c.Close()
				return
			}
			io.WriteString(c, "ok")
		}
	})
	h := testH1(4, 4)
	defer h.CloseIdle()

	resp := openGet(t, h, srv.addr)
	if _, fixed := resp.Body.(*body).r.(*fixedBody); !fixed {
		t.Errorf("a head in pieces: read by net/http (body %T), want h1's own reading", resp.Body.(*body).r)
	}
	if b, err := io.ReadAll(resp.Body); string(b) != "ok" || err != nil {
		t.Errorf("a head in pieces: body %q, %v; want \"ok\"", b, err)
	}
	resp.Body.Close()

	_, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/reset", nil)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, theirs := (&http.Client{Transport: tr}).Get("http://" + srv.addr + "/reset")
	if !errors.Is(theirs, io.ErrUnexpectedEOF) {
		t.Fatalf("net/http's transport, a reset in the middle of a head: %v; this test expects an unexpected EOF", theirs)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a reset in the middle of a head: %v, want an unexpected EOF, as net/http's transport gives (%v)", err, theirs)
	}

	_, _, _, err = get(context.Background(), h, "GET", "http://"+srv.addr+"/1xx-reset", nil)
	_, theirs = (&http.Client{Transport: tr}).Get("http://" + srv.addr + "/1xx-reset")
	if !errors.Is(theirs, syscall.ECONNRESET) {
		t.Fatalf("net/http's transport, a reset after a 1xx: %v; this test expects the reset", theirs)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("a reset after a 1xx: %v, want the reset, as net/http's transport gives (%v)", err, theirs)
	}
}

// TestH1ConnReplaysOnlyTheLastError: replayError gives back the error of
// the read just before it, and nothing after a read that went well, even
// when an earlier read on the connection failed.
func TestH1ConnReplaysOnlyTheLastError(t *testing.T) {
	ours, theirs := net.Pipe()
	defer ours.Close()
	defer theirs.Close()
	pc := &conn{c: ours, limit: unlimited}
	buf := make([]byte, 8)
	ours.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err := pc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	ours.SetReadDeadline(time.Time{})
	go theirs.Write([]byte("ab"))
	if n, err := pc.Read(buf); n != 2 || err != nil {
		t.Fatalf("read: %d, %v; want 2 bytes", n, err)
	}
	pc.replayError() // the last read went well: nothing to give back
	go theirs.Write([]byte("cd"))
	if n, err := pc.Read(buf); n != 2 || err != nil || string(buf[:n]) != "cd" {
		t.Fatalf("read after replayError with no error: %q, %v; want \"cd\"", buf[:n], err)
	}
	ours.SetReadDeadline(time.Now().Add(-time.Second))
	pc.Read(buf)
	pc.replayError()
	if _, err := pc.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("replayed: %v, want the last read's error", err)
	}
	pc.limit = 0
	if _, err := pc.Read(buf); err != errHeaderLimit {
		t.Fatalf("at the header limit: %v", err)
	}
	pc.replayError()
	if _, err := pc.Read(buf); err != errHeaderLimit {
		t.Fatalf("replayed at the header limit: %v, want errHeaderLimit", err)
	}
}

// TestH1IdleListKept: a target whose one connection is taken and given
// back over and over, as a proxy's are when every one is busy at times,
// keeps its idle list's array: neither the take that empties the list
// (and deletes its entry) nor the put that fills it again allocates.
func TestH1IdleListKept(t *testing.T) {
	_, h := withOneIdle(t)
	if h.n != 1 {
		t.Fatalf("%d idle connections, want 1", h.n)
	}
	key := h.lru.next.key
	allocs := testing.AllocsPerRun(100, func() {
		pc := h.take(key)
		if pc == nil {
			t.Fatal("no idle connection to take")
		}
		h.put(pc)
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations a take and put, want 0", allocs)
	}
}
