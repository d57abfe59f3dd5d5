package fetchtest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// TestProvider: the provider answers for the targets it is told to with
// their status and Proxy-Status, to CONNECT and to absolute-form requests
// alike, and forwards the rest, adding its own member after the target's.
func TestProvider(t *testing.T) {
	p, err := fetchtest.StartProvider(fetchtest.ProviderOptions{Name: "gw", Answers: map[string]fetchtest.ProviderAnswer{
		"dead.invalid": {Status: 504, Error: "dns_timeout", Details: `no "answer"`},
		"squid.invalid": {Status: 503, NoProxyStatus: true,
			Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Proxy-Status", "origin-cdn")
		io.WriteString(w, "hello")
	}))
	defer target.Close()
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer tlsTarget.Close()

	pu, _ := url.Parse(p.URL)
	var connect http.Header // the header of the last answer to a CONNECT
	var connectStatus int
	tr := tlsTarget.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pu)
	tr.OnProxyConnectResponse = func(_ context.Context, _ *url.URL, _ *http.Request, res *http.Response) error {
		connect, connectStatus = res.Header.Clone(), res.StatusCode
		return nil
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}

	const dead = `gw; error=dns_timeout; details="no \"answer\""`
	for _, tt := range []struct {
		name, url   string
		status      int
		proxyStatus []string
		squid       string
		connect     bool
	}{
		{name: "forwarded", url: target.URL, status: 200, proxyStatus: []string{"origin-cdn", "gw"}},
		{name: "absolute-form to a dead target", url: "http://dead.invalid/x", status: 504, proxyStatus: []string{dead}},
		{name: "CONNECT to a dead target", url: "https://dead.invalid/x", status: 504, proxyStatus: []string{dead}, connect: true},
		{name: "squid's own header", url: "http://squid.invalid/", status: 503, squid: "ERR_CONNECT_FAIL 111"},
		{name: "CONNECT forwarded", url: tlsTarget.URL, status: 200, connect: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			connect, connectStatus = nil, 0
			resp, err := c.Get(tt.url)
			var h http.Header
			var status int
			switch {
			case tt.connect && tt.status != 200:
				if err == nil {
					resp.Body.Close()
					t.Fatalf("CONNECT answered %d, want a failure", resp.StatusCode)
				}
				h, status = connect, connectStatus
			case err != nil:
				t.Fatal(err)
			default:
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				h, status = resp.Header, resp.StatusCode
				if status == 200 && string(body) != "hello" {
					t.Errorf("body %q", body)
				}
			}
			if status != tt.status {
				t.Fatalf("status %d, want %d", status, tt.status)
			}
			if got := h.Values("Proxy-Status"); !equal(got, tt.proxyStatus) {
				t.Errorf("Proxy-Status %q, want %q", got, tt.proxyStatus)
			}
			if got := h.Get("X-Squid-Error"); got != tt.squid {
				t.Errorf("X-Squid-Error %q, want %q", got, tt.squid)
			}
		})
	}
	if s := p.Stats(); s.Answered != 3 || s.Forwarded != 1 || s.Connects != 1 {
		t.Errorf("stats %+v, want 3 answered, 1 forwarded, 1 CONNECT", s)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
