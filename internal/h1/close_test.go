package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// closeBehind are answers a server writes and then closes the connection
// right behind: what net/http makes of each is what h1 must make of it,
// and as soon (within closeBehindLimit), not at an idle or header timeout.
var closeBehind = []struct {
	name, answer string
}{
	{"body cut short", "HTTP/1.1 200 OK\r\nContent-Length: 350\r\n\r\n" + strings.Repeat("x", 300)},
	{"half a head", "HTTP/1.1 200 OK\r\nContent-Le"},
	{"head without its end", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"},
	{"head alone, body promised", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"},
	{"chunk cut short", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc"},
	{"close-delimited", "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"},
	{"whole", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"},
	{"HTTP/1.0", "HTTP/1.0 200 OK\r\n\r\nold"},
	{"nothing", ""},
}

// closeBehindLimit bounds how long an answer above takes to end, whole or
// failed: net/http ends each in about a millisecond; the bound leaves room
// for a loaded machine, far below the 5s timeouts the test sets.
const closeBehindLimit = 2 * time.Second

// TestH1CloseBehindLastBytes: a server that closes right behind the last
// bytes it sends. The close can come in the same poller event as the
// bytes (EPOLLIN and EPOLLRDHUP at once): a read that took the bytes and
// waited for more without reading again missed it, and the answer waited
// for the idle or header timeout (24 of 40 URLs). Each case, 40 times,
// ends as net/http ends it, within closeBehindLimit.
func TestH1CloseBehindLastBytes(t *testing.T) {
	for _, tc := range closeBehind {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
				if next() != nil {
					io.WriteString(c, tc.answer)
				}
			})
			url := "http://" + srv.addr + "/"
			want := netHTTPGet(t, url)
			h := New(Options{Dial: socketDial, MaxHeader: 1 << 10, PerKey: 4, Budget: 4})
			defer h.CloseIdle()
			for i := range 40 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				start := time.Now()
				status, body, _, err := get(ctx, h, "GET", url, nil)
				took := time.Since(start)
				cancel()
				got := closeOutcome(status, body, err)
				if got != want {
					t.Fatalf("try %d: h1 %s, net/http %s", i, got, want)
				}
				if took > closeBehindLimit {
					t.Fatalf("try %d: h1 took %s (%s), want within %s as net/http", i, took.Round(time.Millisecond), got, closeBehindLimit)
				}
			}
		})
	}
}

// netHTTPGet is what net/http makes of url's answer, as closeOutcome words it.
func netHTTPGet(t *testing.T, url string) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	start := time.Now()
	resp, err := c.Get(url)
	var status int
	var body []byte
	if err == nil {
		status = resp.StatusCode
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if took := time.Since(start); took > closeBehindLimit {
		t.Fatalf("net/http took %s", took)
	}
	return closeOutcome(status, string(body), err)
}

// closeOutcome words a fetch's end for comparison: the status and body, or
// that it failed (how is each client's own wording).
func closeOutcome(status int, body string, err error) string {
	switch {
	case err == nil:
		return "ok " + http.StatusText(status) + " " + body
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	}
	return "failed"
}
