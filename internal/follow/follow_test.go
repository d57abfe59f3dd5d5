package follow

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClientDo: what the client sends on each redirect (method, body,
// Authorization, Referer) and the hops it notes, on loopback targets: two
// servers, so that a redirect can go to another origin (another port).
func TestClientDo(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s body=%s auth=%s referer=%s", r.Method, body, r.Header.Get("Authorization"), r.Referer())
	}
	other := httptest.NewServer(http.HandlerFunc(echo))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echo" {
			echo(w, r)
			return
		}
		loc := strings.Replace(r.URL.Query().Get("loc"), "OTHER", other.URL, 1)
		var status int
		fmt.Sscan(r.URL.Query().Get("status"), &status)
		w.Header().Set("Location", loc)
		w.WriteHeader(status)
	}))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()

	for _, tc := range []struct {
		name, method, path string
		policy             func(*http.Request, []*http.Request) error
		status             int // of the answer Do returns
		says               string
		hops               []results.Redirect
	}{
		{"303 makes a POST a GET, without its body", http.MethodPost, "/to?status=303&loc=/echo", nil, 200,
			"GET body= auth=Basic dTpw referer=" + srv.URL + "/to?status=303&loc=/echo",
			[]results.Redirect{{Status: 303, URL: srv.URL + "/echo"}}},
		{"307 keeps the method and the body", http.MethodPost, "/to?status=307&loc=/echo", nil, 200,
			"POST body=data auth=Basic dTpw referer=" + srv.URL + "/to?status=307&loc=/echo",
			[]results.Redirect{{Status: 307, URL: srv.URL + "/echo"}}},
		{"another origin gets no credentials", http.MethodGet, "/to?status=302&loc=OTHER/echo", nil, 200,
			"GET body= auth= referer=" + srv.URL + "/to?status=302&loc=OTHER/echo",
			[]results.Redirect{{Status: 302, URL: other.URL + "/echo"}}},
		{"the policy keeps the last answer", http.MethodGet, "/to?status=301&loc=/echo",
			func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }, 301, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, _ := url.Parse(srv.URL + tc.path)
			u.User = url.UserPassword("u", "p")
			req, _ := http.NewRequest(tc.method, u.String(), strings.NewReader("data"))
			var hops []results.Redirect
			policy := tc.policy
			if policy == nil {
				policy = func(*http.Request, []*http.Request) error { return nil }
			}
			c := Client{RT: tr, Policy: policy, Hops: &hops}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || tc.says != "" && string(b) != tc.says {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, b, tc.status, tc.says)
			}
			if !reflect.DeepEqual(hops, tc.hops) {
				t.Errorf("hops %+v, want %+v", hops, tc.hops)
			}
		})
	}
}
