package fetchtest_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func startTarget(t *testing.T, opts fetchtest.TargetOptions) *fetchtest.Target {
	t.Helper()
	tg, err := fetchtest.StartTarget(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg
}

// newClient returns a client that dials from localIP (any when ""), trusts
// roots, never follows redirects, and whose idle connections are closed at
// the end of the test.
func newClient(t *testing.T, localIP string, roots *x509.CertPool) *http.Client {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	if localIP != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(localIP)}
	}
	tr := &http.Transport{
		DialContext:     d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots},
		MaxIdleConns:    100, MaxIdleConnsPerHost: 100,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{
		Transport:     tr,
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type response struct {
	status int
	header http.Header
	body   []byte
	cl     int64
}

func get(t *testing.T, c *http.Client, url string) response {
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
	return response{resp.StatusCode, resp.Header, b, resp.ContentLength}
}

func TestTargetQuery(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	c := newClient(t, "", nil)
	tests := []struct {
		name       string
		uri        string
		wantStatus int
		wantSize   int  // -1: don't check
		wantCL     bool // Content-Length set
		wantHeader map[string]string
	}{
		{name: "default size", uri: "/x", wantStatus: 200, wantSize: 1024, wantCL: true},
		{name: "size", uri: "/x?size=100000", wantStatus: 200, wantSize: 100000, wantCL: true},
		{name: "empty", uri: "/x?size=0", wantStatus: 200, wantSize: 0, wantCL: true},
		{name: "status", uri: "/x?status=404&size=10", wantStatus: 404, wantSize: 10, wantCL: true},
		{name: "no content", uri: "/x?status=204", wantStatus: 204, wantSize: 0},
		{name: "chunks", uri: "/x?size=1000&chunks=7", wantStatus: 200, wantSize: 1000},
		{name: "bad param", uri: "/x?size=-1", wantStatus: 400, wantSize: -1, wantCL: true},
		{name: "redirect", uri: "/redirect?to=http://127.0.0.1:1/elsewhere", wantStatus: 302, wantSize: 0, wantCL: true,
			wantHeader: map[string]string{"Location": "http://127.0.0.1:1/elsewhere"}},
		{name: "loop", uri: "/loop?n=4", wantStatus: 302, wantSize: 0, wantCL: true,
			wantHeader: map[string]string{"Location": "/loop?n=5"}},
		{name: "loop start", uri: "/loop", wantStatus: 302, wantSize: 0, wantCL: true,
			wantHeader: map[string]string{"Location": "/loop?n=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := get(t, c, tg.URL+tt.uri)
			if r.status != tt.wantStatus {
				t.Errorf("status = %d, want %d (body %q)", r.status, tt.wantStatus, r.body)
			}
			if tt.wantSize >= 0 && !bytes.Equal(r.body, fetchtest.Body(tt.wantSize)) {
				t.Errorf("body = %d bytes %.40q..., want %d bytes of Body", len(r.body), r.body, tt.wantSize)
			}
			if got := r.cl >= 0; got != tt.wantCL && tt.wantStatus != 204 {
				t.Errorf("Content-Length set = %v (%d), want %v", got, r.cl, tt.wantCL)
			}
			for k, v := range tt.wantHeader {
				if got := r.header.Get(k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if got := tg.Hits(tt.uri); got != 1 {
				t.Errorf("Hits(%q) = %d, want 1", tt.uri, got)
			}
		})
	}
	if got := tg.Requests(); got != len(tests) {
		t.Errorf("Requests() = %d, want %d", got, len(tests))
	}
	tg.ResetStats()
	if got := tg.Requests(); got != 0 {
		t.Errorf("after ResetStats, Requests() = %d", got)
	}
}

func TestTargetFail(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	c := newClient(t, "", nil)
	uri := "/f?fail=2&failstatus=429&retry-after=3&size=5"
	for i, want := range []int{429, 429, 200, 200} {
		r := get(t, c, tg.URL+uri)
		if r.status != want {
			t.Fatalf("request %d: status %d, want %d", i, r.status, want)
		}
		ra := r.header.Get("Retry-After")
		if want == 429 && ra != "3" || want == 200 && ra != "" {
			t.Errorf("request %d: Retry-After %q", i, ra)
		}
	}
	// Another URI has its own count; the default failure status is 503.
	if r := get(t, c, tg.URL+"/f?fail=1"); r.status != 503 {
		t.Errorf("status = %d, want 503", r.status)
	}
	if got := tg.Hits(uri); got != 4 {
		t.Errorf("Hits = %d, want 4", got)
	}
	// ResetStats restarts the failure counts.
	tg.ResetStats()
	if r := get(t, c, tg.URL+uri); r.status != 429 {
		t.Errorf("after ResetStats: status = %d, want 429", r.status)
	}
}

func TestTargetEcho(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{TLS: true})
	c := newClient(t, "", tg.CertPool)
	req, _ := http.NewRequest("PUT", tg.URL+"/echo?a=1", nil)
	req.Header.Set("X-Test", "yes")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e fetchtest.Echo
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || e.Method != "PUT" || e.URL != "/echo?a=1" || e.Host != tg.Addr || e.Header.Get("X-Test") != "yes" {
		t.Errorf("echo = %d %+v", resp.StatusCode, e)
	}
	if !strings.HasPrefix(tg.URL, "https://127.0.0.1:") {
		t.Errorf("URL = %q", tg.URL)
	}
	if !bytes.Contains(tg.CertPEM, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("CertPEM = %q", tg.CertPEM)
	}
	// The cert is valid for localhost too.
	_, port, _ := net.SplitHostPort(tg.Addr)
	if r := get(t, c, "https://localhost:"+port+"/x?size=3"); r.status != 200 {
		t.Errorf("via localhost: status %d", r.status)
	}
}

func TestTargetTiming(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	c := newClient(t, "", nil)

	t.Run("delay", func(t *testing.T) {
		start := time.Now()
		get(t, c, tg.URL+"/d?delay=100ms&size=1")
		if el := time.Since(start); el < 100*time.Millisecond {
			t.Errorf("took %v, want >= 100ms", el)
		}
	})

	t.Run("drip", func(t *testing.T) {
		start := time.Now()
		resp, err := c.Get(tg.URL + "/d?size=4000&chunks=3&drip=150ms")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		headers := time.Since(start)
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		total := time.Since(start)
		if headers >= 150*time.Millisecond {
			t.Errorf("headers after %v, want before the first chunk", headers)
		}
		if total < 450*time.Millisecond {
			t.Errorf("body took %v, want >= 3*150ms", total)
		}
		if resp.ContentLength != -1 || !bytes.Equal(b, fetchtest.Body(4000)) {
			t.Errorf("ContentLength %d, body %d bytes", resp.ContentLength, len(b))
		}
	})

	t.Run("delay cancelled", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", tg.URL+"/d?delay=1h", nil)
		if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want deadline exceeded", err)
		}
		waitFor(t, "target in flight to drop to 0", func() bool { return tg.InFlight() == 0 }, tg)
	})
}

// changer is a server that tells when its in-flight counts change
// (export_test.go).
type changer interface{ Changed() <-chan struct{} }

// waitFor waits, for up to 5 seconds, until cond holds, checking it again
// whenever the counts of one of on change: cond must read only those.
func waitFor(t *testing.T, what string, cond func() bool, on ...changer) {
	t.Helper()
	late := time.After(5 * time.Second)
	cases := make([]reflect.SelectCase, len(on)+1)
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(late)}
	for {
		// The channels first: a change between cond and them is not lost.
		for i, c := range on {
			cases[i+1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c.Changed())}
		}
		if cond() {
			return
		}
		if i, _, _ := reflect.Select(cases); i == 0 {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// hangFrom starts n requests with hang=1 from client c and returns a
// function that cancels them and waits until they have returned.
func hangFrom(c *http.Client, url string, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func TestTargetMaxInFlightFrom(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	a, b := fetchtest.LoopbackIP(0), fetchtest.LoopbackIP(1)
	stopA := hangFrom(newClient(t, a, nil), tg.URL+"/h?hang=1", 3)
	stopB := hangFrom(newClient(t, b, nil), tg.URL+"/h?hang=1", 2)
	waitFor(t, "5 requests in flight", func() bool { return tg.InFlight() == 5 }, tg)
	stopA()
	stopB()
	waitFor(t, "0 requests in flight", func() bool { return tg.InFlight() == 0 }, tg)

	if got := tg.MaxInFlight(); got != 5 {
		t.Errorf("MaxInFlight = %d, want 5", got)
	}
	if got := tg.MaxInFlightFrom(a); got != 3 {
		t.Errorf("MaxInFlightFrom(%s) = %d, want 3", a, got)
	}
	if got := tg.MaxInFlightFrom(b); got != 2 {
		t.Errorf("MaxInFlightFrom(%s) = %d, want 2", b, got)
	}
	if got := tg.MaxInFlightFrom("127.0.0.1"); got != 0 {
		t.Errorf("MaxInFlightFrom(127.0.0.1) = %d, want 0", got)
	}
	if got := tg.RequestsFrom(a); got != 3 {
		t.Errorf("RequestsFrom(%s) = %d, want 3", a, got)
	}
}

func TestTargetCloseWithRequestsInFlight(t *testing.T) {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, "", nil)
	errs := make(chan error, 2)
	for _, q := range []string{"hang=1", "size=1000&chunks=10&drip=1h"} {
		go func() {
			resp, err := c.Get(tg.URL + "/c?" + q)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	waitFor(t, "2 requests in flight", func() bool { return tg.InFlight() == 2 }, tg)
	start := time.Now()
	tg.Close()
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Close took %v", el)
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Error("request survived Close without an error")
		}
	}
	tg.Close() // idempotent
}

// TestTargetHold: hold=N answers no request of a batch until N wait at
// once, before the head, or with holdat=body after it; a request that
// gives up leaves its batch.
func TestTargetHold(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	c := newClient(t, "", nil)

	// A request that gives up waiting leaves the batch: the next two fill
	// it, not the next one.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", tg.URL+"/gone?hold=2", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		gaveUp <- err
	}()
	waitFor(t, "1 request in flight", func() bool { return tg.InFlight() == 1 }, tg)
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("a request alone in a batch of 2 was answered")
	}
	waitFor(t, "0 requests in flight", func() bool { return tg.InFlight() == 0 }, tg)

	// Before the head: the first request has no answer until the second
	// comes.
	first := make(chan int, 1) // its status, or 0 for an error
	go func() {
		resp, err := c.Get(tg.URL + "/a?hold=2&size=3")
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitFor(t, "1 request in flight", func() bool { return tg.InFlight() == 1 }, tg)
	select {
	case st := <-first:
		t.Fatalf("answered alone: status %d", st)
	default:
	}
	if r := get(t, c, tg.URL+"/b?hold=2&size=3"); r.status != 200 {
		t.Errorf("second: %+v", r)
	}
	if st := <-first; st != 200 {
		t.Errorf("first: status %d", st)
	}

	// After the head: the first request's head comes alone, its body with
	// the second.
	resp, err := c.Get(tg.URL + "/c?hold=2&holdat=body&size=3&chunks=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if tg.InFlight() != 1 {
		t.Fatalf("%d in flight", tg.InFlight())
	}
	if r := get(t, c, tg.URL+"/d?hold=2&holdat=body&size=3&chunks=1"); r.status != 200 || len(r.body) != 3 {
		t.Errorf("second: %+v", r)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 3 {
		t.Errorf("first's body: %q, %v", b, err)
	}
	if r := get(t, c, tg.URL+"/e?hold=x"); r.status != 400 {
		t.Errorf("hold=x: %+v", r)
	}
}
