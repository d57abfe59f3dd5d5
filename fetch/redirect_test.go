package fetch_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// redirectTarget answers /to?status=N&loc=L with status N, Location L
// (none when L is empty) and a short body, and /echo with what it was
// sent: method, Host, Referer and Authorization, which it also keeps in
// echoed (a HEAD's answer has no body). It counts connections.
func redirectTarget(t *testing.T) (srv *httptest.Server, conns *atomic.Int64, echoed *atomic.Value) {
	conns, echoed = new(atomic.Int64), new(atomic.Value)
	srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to":
			if loc := r.URL.Query().Get("loc"); loc != "" {
				w.Header().Set("Location", loc)
			}
			var status int
			fmt.Sscan(r.URL.Query().Get("status"), &status)
			w.WriteHeader(status)
			fmt.Fprint(w, "moved")
		case "/echo":
			echo := fmt.Sprintf("method=%s host=%s referer=%s auth=%s", r.Method, r.Host, r.Referer(), r.Header.Get("Authorization"))
			echoed.Store(echo)
			fmt.Fprint(w, echo)
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, conns, echoed
}

// TestRedirects follows redirects as curl -L and http.Client do: the
// method each status asks for, a Host header kept only for a relative
// Location, a Referer, Basic authentication from the URL's user
// information, and a 3xx without a Location taken as the answer.
func TestRedirects(t *testing.T) {
	srv, conns, echoed := redirectTarget(t)
	u, _ := url.Parse(srv.URL)
	to := func(status int, loc string) string {
		return fmt.Sprintf("%s/to?status=%d&loc=%s", srv.URL, status, url.QueryEscape(loc))
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("us:pw"))
	for _, tc := range []struct {
		name, method, host, line string
		status                   int
		body                     string // the start of the body; "" for none checked
		echo                     string // the start of what /echo was last sent, when body cannot show it
	}{
		{name: "302 GET", method: "GET", line: to(302, "/echo"), status: 200,
			body: "method=GET host=" + u.Host + " referer=" + to(302, "/echo") + " auth="},
		{name: "303 turns POST into GET", method: "POST", line: to(303, "/echo"), status: 200, body: "method=GET "},
		{name: "301 turns POST into GET", method: "POST", line: to(301, "/echo"), status: 200, body: "method=GET "},
		{name: "302 keeps HEAD", method: "HEAD", line: to(302, "/echo"), status: 200, echo: "method=HEAD "},
		{name: "307 keeps the method", method: "POST", line: to(307, "/echo"), status: 200, body: "method=POST "},
		{name: "308 keeps the method", method: "PUT", line: to(308, "/echo"), status: 200, body: "method=PUT "},
		{name: "Host kept for a relative Location", method: "GET", host: "named.test", line: to(302, "/echo"), status: 200,
			body: "method=GET host=named.test "},
		{name: "Host not kept for an absolute one", method: "GET", host: "named.test", line: to(302, srv.URL+"/echo"), status: 200,
			body: "method=GET host=" + u.Host + " "},
		{name: "a 3xx without Location is the answer", method: "GET", line: to(302, ""), status: 302, body: "moved"},
		{name: "user information is Basic authentication", method: "GET",
			line: "http://us:pw@" + u.Host + "/echo", status: 200, body: "method=GET host=" + u.Host + " referer= auth=" + basic},
		{name: "and goes along to the same origin", method: "GET",
			line: "http://us:pw@" + u.Host + "/to?status=302&loc=/echo", status: 200,
			body: "method=GET host=" + u.Host + " referer=http://" + u.Host + "/to?status=302&loc=/echo auth=" + basic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Method = tc.method
			cfg.KeepBody = 1 << 10
			if tc.host != "" {
				cfg.Header = http.Header{"Host": {tc.host}}
			}
			r := fetchOne(t, cfg, tc.line)
			if !r.OK || r.Status != tc.status {
				t.Fatalf("ok %v status %d error %+v, want status %d", r.OK, r.Status, r.Error, tc.status)
			}
			if !strings.HasPrefix(string(r.Body), tc.body) {
				t.Errorf("body %q, want it to start %q", r.Body, tc.body)
			}
			if got, _ := echoed.Load().(string); tc.echo != "" && !strings.HasPrefix(got, tc.echo) {
				t.Errorf("/echo was sent %q, want %q", got, tc.echo)
			}
		})
	}
	// Each run above took one connection: a redirect's body is read, so
	// that its connection serves the next request.
	if n, runs := conns.Load(), int64(11); n > runs {
		t.Errorf("%d connections for %d runs: a redirect's connection was not reused", n, runs)
	}
}

// fetchOne fetches line with cfg and returns its record as the engine made
// it (Body included, which a record does not write out).
func fetchOne(t *testing.T, cfg fetch.Config, line string) *results.Record {
	t.Helper()
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var w lastRecord
	if _, err := e.Run(context.Background(), []input.Source{{Name: "urls.txt", R: strings.NewReader(line)}}, &w); err != nil {
		t.Fatal(err)
	}
	if w.rec == nil {
		t.Fatal("no record")
	}
	return w.rec
}

// lastRecord keeps the last record written.
type lastRecord struct{ rec *results.Record }

func (w *lastRecord) Write(r *results.Record) error {
	w.rec = r
	return nil
}
