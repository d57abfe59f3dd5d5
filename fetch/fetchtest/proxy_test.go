package fetchtest_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

func startHTTPProxy(t *testing.T, opts fetchtest.ProxyOptions) *fetchtest.Proxy {
	t.Helper()
	p, err := fetchtest.StartHTTPProxy(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func startSOCKS5(t *testing.T, opts fetchtest.ProxyOptions) *fetchtest.Proxy {
	t.Helper()
	p, err := fetchtest.StartSOCKS5(opts)
	if errors.Is(err, fetchtest.ErrNoMicrosocks) {
		t.Fatalf("%v (scripts/test.sh installs microsocks)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// proxyClient returns a client that goes through proxyURL, trusting the
// given PEM certificates (targets and https proxies).
func proxyClient(t *testing.T, proxyURL string, pems ...[]byte) *http.Client {
	t.Helper()
	u, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, p := range pems {
		roots.AppendCertsFromPEM(p)
	}
	tr := &http.Transport{
		Proxy:           http.ProxyURL(u),
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func withAuth(t *testing.T, rawURL, user, pass string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, pass)
	return u.String()
}

func getEcho(t *testing.T, c *http.Client, url string) fetchtest.Echo {
	t.Helper()
	r := get(t, c, url)
	if r.status != 200 {
		t.Fatalf("GET %s: status %d: %s", url, r.status, r.body)
	}
	var e fetchtest.Echo
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestHTTPProxy(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	tests := []struct {
		name string
		opts fetchtest.ProxyOptions
	}{
		{"open", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(0)}},
		{"auth", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(1), User: "alice", Password: "s3cret:x"}},
		{"https open", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(2), TLS: true}},
		{"https auth", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(3), TLS: true, User: "bob", Password: "pw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startHTTPProxy(t, tt.opts)
			wantScheme := "http://"
			if tt.opts.TLS {
				wantScheme = "https://"
			}
			if !strings.HasPrefix(p.URL, wantScheme+"127.0.0.1:") || strings.Contains(p.URL, "@") {
				t.Errorf("URL = %q", p.URL)
			}
			auth := tt.opts.User != ""
			c := proxyClient(t, p.AuthURL(), p.CertPEM, secure.CertPEM)

			// Absolute-form through the proxy: hop-by-hop and proxy
			// credentials do not reach the target.
			req, _ := http.NewRequest("GET", plain.URL+"/echo?via=proxy", nil)
			req.Header.Set("Connection", "X-Drop")
			req.Header.Set("X-Drop", "1")
			req.Header.Set("X-Keep", "1")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e fetchtest.Echo
			err = json.NewDecoder(resp.Body).Decode(&e)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("status %d, err %v", resp.StatusCode, err)
			}
			if e.URL != "/echo?via=proxy" || e.Host != plain.Addr || e.Header.Get("X-Keep") != "1" {
				t.Errorf("echo = %+v", e)
			}
			for _, h := range []string{"Proxy-Authorization", "X-Drop", "Proxy-Connection"} {
				if v := e.Header.Get(h); v != "" {
					t.Errorf("%s reached the target: %q", h, v)
				}
			}
			if !strings.HasPrefix(e.RemoteAddr, tt.opts.BindIP+":") {
				t.Errorf("target saw source %s, want %s", e.RemoteAddr, tt.opts.BindIP)
			}

			// A whole body, several times over one kept-alive connection.
			for range 3 {
				r := get(t, c, plain.URL+"/b?size=100000")
				if r.status != 200 || !bytes.Equal(r.body, fetchtest.Body(100000)) || r.cl != 100000 {
					t.Fatalf("status %d, %d bytes, Content-Length %d", r.status, len(r.body), r.cl)
				}
			}

			// CONNECT to a TLS target.
			e = getEcho(t, c, secure.URL+"/echo?via=connect")
			if e.URL != "/echo?via=connect" || e.Header.Get("Proxy-Authorization") != "" {
				t.Errorf("echo over CONNECT = %+v", e)
			}
			if got := secure.MaxInFlightFrom(tt.opts.BindIP); got != 1 {
				t.Errorf("TLS target MaxInFlightFrom(%s) = %d, want 1", tt.opts.BindIP, got)
			}

			st := p.Stats()
			if st.Requests != 4 || st.Connects != 1 || st.Denied != 0 || st.MaxInFlight != 1 || st.InFlight != 0 {
				t.Errorf("Stats = %+v", st)
			}
			if !auth {
				return
			}

			// Wrong password and no password: 407 for absolute-form, an
			// error for CONNECT.
			for _, pu := range []string{withAuth(t, p.URL, tt.opts.User, "wrong"), p.URL} {
				bad := proxyClient(t, pu, p.CertPEM, secure.CertPEM)
				r := get(t, bad, plain.URL+"/x")
				if r.status != http.StatusProxyAuthRequired {
					t.Errorf("absolute-form with %s: status %d, want 407", pu, r.status)
				}
				if resp, err := bad.Get(secure.URL + "/x"); err == nil {
					resp.Body.Close()
					t.Errorf("CONNECT with %s: no error", pu)
				}
			}
			if st := p.Stats(); st.Denied != 4 || st.Requests != 4 || st.Connects != 1 {
				t.Errorf("Stats after denials = %+v", st)
			}
		})
	}
	if got := plain.MaxInFlightFrom("127.0.0.1"); got != 0 {
		t.Errorf("a request reached the target from 127.0.0.1")
	}
}

func TestHTTPProxyStreams(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	p := startHTTPProxy(t, fetchtest.ProxyOptions{})
	c := proxyClient(t, p.URL)
	start := time.Now()
	resp, err := c.Get(tg.URL + "/s?size=3000&chunks=3&drip=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 3000)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	if first >= 500*time.Millisecond || total < 600*time.Millisecond {
		t.Errorf("first body bytes after %v, whole body after %v: not streamed", first, total)
	}
	if len(rest) == 0 {
		t.Errorf("whole body arrived in the first read")
	}
}

// TestHTTPProxyMaxInFlightTinyAnswers: a client that never has more than
// 2 requests through the proxy at once, each sent as soon as another's
// small answer was read whole, is never counted with 3: the proxy ends a
// request's count as the last byte of its answer is handed on, not when
// its handler returns, which can come after the client's next request
// (before, 8 of 8 runs counted 3).
func TestHTTPProxyMaxInFlightTinyAnswers(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	p := startHTTPProxy(t, fetchtest.ProxyOptions{})
	c := proxyClient(t, p.URL)
	// A connection a request: the next request comes on another connection
	// while the last handler may still be running (on one connection, the
	// server reads the next request only after the last's handler).
	c.Transport.(*http.Transport).DisableKeepAlives = true
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				sem <- struct{}{}
				resp, err := c.Get(tg.URL + "/h?size=16")
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				<-sem
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if st := p.Stats(); st.MaxInFlight > 2 || st.Requests != 4000 {
		t.Errorf("Stats = %+v: want at most 2 in flight of 4000 requests", st)
	}
}

func TestHTTPProxyMaxInFlight(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	bind := fetchtest.LoopbackIP(4)
	p := startHTTPProxy(t, fetchtest.ProxyOptions{BindIP: bind})
	stop := hangFrom(proxyClient(t, p.URL), tg.URL+"/h?hang=1", 3)
	waitFor(t, "3 requests at the target", func() bool { return tg.InFlightFrom(bind) == 3 }, tg)
	if st := p.Stats(); st.InFlight != 3 || st.MaxInFlight != 3 {
		t.Errorf("Stats = %+v", st)
	}
	stop()
	waitFor(t, "proxy idle", func() bool { return p.Stats().InFlight == 0 }, p)
	waitFor(t, "target idle", func() bool { return tg.InFlight() == 0 }, tg)
	if got := tg.MaxInFlightFrom(bind); got != 3 {
		t.Errorf("MaxInFlightFrom(%s) = %d, want 3", bind, got)
	}
}

func TestHTTPProxyCloseWithTunnelsAndRequests(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := proxyClient(t, p.URL, secure.CertPEM)
	get(t, c, plain.URL+"/warm") // leaves idle connections on both sides
	stop := hangFrom(c, plain.URL+"/h?hang=1", 2)
	defer stop()
	stop2 := hangFrom(c, secure.URL+"/h?hang=1", 2)
	defer stop2()
	waitFor(t, "requests in flight", func() bool { return plain.InFlight() == 2 && secure.InFlight() == 2 }, plain, secure)
	if st := p.Stats(); st.Tunnels != 2 || st.MaxTunnels != 2 {
		t.Errorf("Stats = %+v", st)
	}
	start := time.Now()
	p.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v", el)
	}
	waitFor(t, "targets idle", func() bool { return plain.InFlight() == 0 && secure.InFlight() == 0 }, plain, secure)
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Error("proxy still accepts after Close")
	}
}

func TestHTTPProxyRestartSameAddr(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	p := startHTTPProxy(t, fetchtest.ProxyOptions{})
	p.Close()
	p2 := startHTTPProxy(t, fetchtest.ProxyOptions{Addr: p.Addr})
	if p2.URL != p.URL {
		t.Errorf("URL %q, want %q", p2.URL, p.URL)
	}
	if r := get(t, proxyClient(t, p2.URL), tg.URL+"/x"); r.status != 200 {
		t.Errorf("status %d", r.status)
	}
}

func TestSOCKS5(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	tests := []struct {
		name string
		opts fetchtest.ProxyOptions
	}{
		{"open", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(5)}},
		{"auth", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(6), User: "carol", Password: "pw"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startSOCKS5(t, tt.opts)
			if !strings.HasPrefix(p.URL, "socks5://127.0.0.1:") {
				t.Errorf("URL = %q", p.URL)
			}
			c := proxyClient(t, p.AuthURL(), secure.CertPEM)
			if r := get(t, c, plain.URL+"/x?size=5000"); r.status != 200 || !bytes.Equal(r.body, fetchtest.Body(5000)) {
				t.Errorf("status %d, %d bytes", r.status, len(r.body))
			}
			e := getEcho(t, c, secure.URL+"/echo")
			if !strings.HasPrefix(e.RemoteAddr, tt.opts.BindIP+":") {
				t.Errorf("target saw source %s, want %s", e.RemoteAddr, tt.opts.BindIP)
			}
			if got := plain.MaxInFlightFrom(tt.opts.BindIP); got != 1 {
				t.Errorf("MaxInFlightFrom(%s) = %d, want 1", tt.opts.BindIP, got)
			}
			if tt.opts.User == "" {
				return
			}
			for _, pu := range []string{withAuth(t, p.URL, tt.opts.User, "wrong"), p.URL} {
				if resp, err := proxyClient(t, pu).Get(plain.URL + "/x"); err == nil {
					resp.Body.Close()
					t.Errorf("with %s: no error", pu)
				}
			}
		})
	}
}

// TestCloseLeavesNoGoroutines checks that no goroutine of a target or proxy
// outlives Close while clients still hold requests in flight.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{TLS: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(7), User: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(p.AuthURL())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(tg.CertPEM)
	tr := &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: &tls.Config{RootCAs: roots}}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, target := range []string{tg.URL, plain.URL} {
		get(t, c, target+"/x?size=70000")
	}
	stop := hangFrom(c, plain.URL+"/h?hang=1", 2)
	stop2 := hangFrom(c, tg.URL+"/h?hang=1", 2)
	waitFor(t, "requests in flight", func() bool { return plain.InFlight() == 2 && tg.InFlight() == 2 }, plain, tg)
	p.Close()
	tg.Close()
	plain.Close()
	stop()
	stop2()
	tr.CloseIdleConnections()
	goleak.VerifyNone(t, opt)
}

func TestSOCKS5Close(t *testing.T) {
	p := startSOCKS5(t, fetchtest.ProxyOptions{})
	p.Close()
	p.Close()
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Error("microsocks still accepts after Close")
	}
}
