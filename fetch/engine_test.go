package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memWriter collects records.
type memWriter struct {
	mu   sync.Mutex
	recs []*results.Record
}

func (w *memWriter) Write(r *results.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Round-trip through JSON so tests see exactly what a user sees.
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	var c results.Record
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	w.recs = append(w.recs, &c)
	return nil
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

func startProxy(t *testing.T, kind string, opts fetchtest.ProxyOptions) *fetchtest.Proxy {
	t.Helper()
	var p *fetchtest.Proxy
	var err error
	if kind == "socks5" {
		p, err = fetchtest.StartSOCKS5(opts)
	} else {
		p, err = fetchtest.StartHTTPProxy(opts)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func proxyOf(t *testing.T, raw string, mod func(*proxies.Proxy)) proxies.Proxy {
	t.Helper()
	u, err := proxies.ParseURL(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := proxies.Proxy{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: proxies.Identity(u), From: "test"}
	if mod != nil {
		mod(&p)
	}
	return p
}

// run runs a new engine for cfg over the lines and returns the records by
// line and the report.
func run(t *testing.T, cfg fetch.Config, lines ...string) (map[int]*results.Record, *report.Report) {
	t.Helper()
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return runEngine(t, e, lines...)
}

// runEngine runs lines through e and returns the records by line and the
// report, failing the test unless each line has at most one record and the
// report counts every record.
func runEngine(t *testing.T, e *fetch.Engine, lines ...string) (map[int]*results.Record, *report.Report) {
	t.Helper()
	recs, rep, err := runEngineReport(t, e, lines...)
	if err != nil {
		t.Fatal(err)
	}
	return recs, rep
}

// runEngineErr is runEngine for a run that may fail: it returns Run's error.
func runEngineErr(t *testing.T, e *fetch.Engine, lines ...string) (map[int]*results.Record, error) {
	t.Helper()
	recs, _, err := runEngineReport(t, e, lines...)
	return recs, err
}

func runEngineReport(t *testing.T, e *fetch.Engine, lines ...string) (map[int]*results.Record, *report.Report, error) {
	t.Helper()
	w := &memWriter{}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "urls.txt", R: strings.NewReader(strings.Join(lines, "\n"))}}, w)
	if rep == nil {
		t.Fatalf("no report: %v", err)
	}
	byLine := map[int]*results.Record{}
	for _, r := range w.recs {
		if byLine[r.Line] != nil {
			t.Fatalf("two records for line %d", r.Line)
		}
		byLine[r.Line] = r
	}
	if rep.Jobs != len(w.recs) {
		t.Fatalf("report counts %d jobs, %d records written", rep.Jobs, len(w.recs))
	}
	return byLine, rep, err
}

func TestDirectAndInvalidLines(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	recs, rep := run(t, fetch.DefaultConfig(),
		"\ufeff"+tg.URL+"/a?size=100",
		"",
		"# comment",
		"  "+tg.URL+"/b?size=5\r",
		"ftp://example.com/x",
		"no-scheme.example/x",
		"http://user:secret@"+strings.TrimPrefix(tg.URL, "http://")+"/c?status=404",
		tg.URL+"/d?status=503",
	)
	if len(recs) != 6 {
		t.Fatalf("got %d records, want 6: %v", len(recs), recs)
	}
	check := func(line int, ok bool, status int, bytes int64, kind, phase string) {
		t.Helper()
		r := recs[line]
		if r == nil {
			t.Fatalf("no record for line %d", line)
		}
		if r.OK != ok || r.Status != status || (bytes >= 0 && r.Bytes != bytes) {
			t.Errorf("line %d: ok=%v status=%d bytes=%d, want %v %d %d", line, r.OK, r.Status, r.Bytes, ok, status, bytes)
		}
		if kind == "" && r.Error != nil || kind != "" && (r.Error == nil || r.Error.Kind != kind || r.Error.Phase != phase) {
			t.Errorf("line %d: error %+v, want %s/%s", line, r.Error, phase, kind)
		}
		if r.Input != "urls.txt" {
			t.Errorf("line %d: input %q", line, r.Input)
		}
	}
	check(1, true, 200, 100, "", "")
	check(4, true, 200, 5, "", "")
	check(5, false, 0, 0, results.KindInvalid, results.PhaseInput)
	check(6, false, 0, 0, results.KindInvalid, results.PhaseInput)
	check(7, true, 404, -1, "", "")
	check(8, false, 503, -1, results.KindStatus, results.PhaseHeaders)
	if strings.Contains(recs[7].URL, "secret") || strings.Contains(recs[7].URL, "user") {
		t.Errorf("credentials in record URL %q", recs[7].URL)
	}
	if got := recs[8].Attempts; got != 3 {
		t.Errorf("503 attempts = %d, want 3 (1 + --retries 2)", got)
	}
	if len(recs[8].Tries) != 2 {
		t.Errorf("503 tries = %d, want 2", len(recs[8].Tries))
	}
	if recs[1].Proxy != "direct" {
		t.Errorf("proxy = %q, want direct", recs[1].Proxy)
	}
	for _, p := range []string{"request", "headers", "body"} {
		if _, ok := recs[1].Phases.Get(p); !ok {
			t.Errorf("line 1 phases %v lack %s", recs[1].Phases, p)
		}
	}
	// Lines 1 and 4 run at once: one of them may be given the other's
	// connection, kept alive, while its own dial goes on (it then has no
	// connect phase). The first to finish dialled.
	_, c1 := recs[1].Phases.Get("connect")
	_, c4 := recs[4].Phases.Get("connect")
	if !c1 && !c4 {
		t.Errorf("neither line 1 (%v) nor line 4 (%v) has a connect phase", recs[1].Phases, recs[4].Phases)
	}
	if _, ok := recs[1].Phases.Get("tls"); ok {
		t.Errorf("plain http record has a tls phase: %v", recs[1].Phases)
	}
	if rep.OK != 3 || rep.Failed != 3 || rep.ByKind["invalid"] != 2 || rep.ByKind["status"] != 1 || rep.ByPhase["input"] != 2 {
		t.Errorf("report %+v", rep)
	}
}

// TestProxyKinds fetches http and https targets through each kind of proxy
// and checks identity, phases and that the proxy really carried the request.
func TestProxyKinds(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	for _, kind := range []string{"http", "https", "socks5", "socks5h"} {
		t.Run(kind, func(t *testing.T) {
			opts := fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(7), User: "alice", Password: "s3cr3t-pw"}
			pk := "http"
			if strings.HasPrefix(kind, "socks") {
				pk = "socks5"
			}
			if kind == "https" {
				opts.TLS = true
			}
			px := startProxy(t, pk, opts)
			u, _ := url.Parse(px.URL)
			u.Scheme = kind
			u.User = url.UserPassword("alice", "s3cr3t-pw")
			cfg := fetch.DefaultConfig()
			cfg.Proxies = []proxies.Proxy{proxyOf(t, u.String(), nil)}
			pool := secure.CertPool
			if px.CertPool != nil {
				pool.AppendCertsFromPEM(px.CertPEM)
			}
			cfg.RootCAs = pool
			recs, rep := run(t, cfg, plain.URL+"/x?size=10", secure.URL+"/y?size=20")
			wantID := kind + "://" + u.Host + "#"
			for line, want := range map[int]int64{1: 10, 2: 20} {
				r := recs[line]
				if !r.OK || r.Bytes != want {
					t.Fatalf("line %d: %+v error %+v", line, r, r.Error)
				}
				if !strings.HasPrefix(r.Proxy, wantID) || strings.Contains(r.Proxy, "alice") {
					t.Errorf("proxy identity %q, want %s…", r.Proxy, wantID)
				}
			}
			if _, ok := recs[2].Phases.Get("tls"); !ok {
				t.Errorf("https target via %s: no tls phase in %v", kind, recs[2].Phases)
			}
			if _, ok := recs[2].Phases.Get("proxy"); !ok {
				t.Errorf("https target via %s: no proxy phase in %v", kind, recs[2].Phases)
			}
			if plain.MaxInFlightFrom(opts.BindIP) == 0 || secure.MaxInFlightFrom(opts.BindIP) == 0 {
				t.Errorf("targets saw no request from the proxy's address %s", opts.BindIP)
			}
			if p := rep.Proxies[recs[1].Proxy]; p == nil || p.Attempts != 2 || p.OK != 2 {
				t.Errorf("report proxies %+v", rep.Proxies)
			} else {
				// The report has a median and p95 for every phase the
				// attempts went through, the proxy handshake (of the https
				// target) among them, and none they did not.
				for _, ph := range []string{"queue", "connect", "proxy", "tls", "request", "headers", "body"} {
					if _, ok := p.PhasesMS[ph]; !ok {
						t.Errorf("report: no %s phase for %s in %v", ph, recs[1].Proxy, p.PhasesMS)
					}
				}
				if q, ok := p.PhasesMS["headers"]; !ok || q.P95 < q.P50 || q.P50 <= 0 {
					t.Errorf("report: headers %+v", q)
				}
				if _, ok := p.PhasesMS["input"]; ok {
					t.Errorf("report: an input phase for a proxy: %v", p.PhasesMS)
				}
			}
		})
	}
}

// TestPerProxyConcurrency runs slow bodies through proxies of different
// capacities and checks, at the target, that no proxy ever had more requests
// in flight than its budget, and that each reached it.
func TestPerProxyConcurrency(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	caps := []int{1, 2, 4}
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 20
	for i, c := range caps {
		px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
		cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = c }))
	}
	var lines []string
	for i := range 40 {
		// Headers at once, then a body that takes about 60ms: a permit
		// released at headers would let more requests in.
		lines = append(lines, fmt.Sprintf("%s/slow/%d?chunks=3&drip=20ms&size=300", tg.URL, i))
	}
	recs, rep := run(t, cfg, lines...)
	for _, r := range recs {
		if !r.OK {
			t.Fatalf("record %+v error %+v", r, r.Error)
		}
	}
	for i, c := range caps {
		got := tg.MaxInFlightFrom(fetchtest.LoopbackIP(i))
		if got > c {
			t.Errorf("proxy %d (cap %d): target saw %d in flight", i, c, got)
		}
		if got < c {
			t.Errorf("proxy %d (cap %d): never reached its cap (max %d)", i, c, got)
		}
		if m := rep.Proxies[cfg.Proxies[i].ID].MaxInFlight; m != c {
			t.Errorf("report max_in_flight for proxy %d = %d, want %d", i, m, c)
		}
	}
}

// TestProxyClosingEachConnection: a proxy that closes each connection
// after its answer without saying so (tinyproxy does) costs no URL a
// second attempt, a request sent twice or a wrong body. Each request
// dials (a connect in its record), mostly into buffers another
// connection had: their reuse is not asserted (under -race sync.Pool
// drops some on purpose), the bodies read through them are, each of
// another length.
func TestProxyClosingEachConnection(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{CloseEach: true})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 8
	cfg.Retries = 0
	cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = 8 })}
	const n = 300
	var lines []string
	for i := range n {
		lines = append(lines, fmt.Sprintf("%s/c/%d?size=%d", tg.URL, i, 100+37*i))
	}
	recs, rep := run(t, cfg, lines...)
	if rep.OK != n {
		t.Fatalf("%d of %d ok: %+v", rep.OK, n, rep.ByKind)
	}
	for line, r := range recs {
		if r.Attempts != 1 || r.Bytes != int64(100+37*(line-1)) {
			t.Errorf("line %d: %d attempts, %d bytes, want 1 and %d", line, r.Attempts, r.Bytes, 100+37*(line-1))
		}
		if _, ok := r.Phases.Get("connect"); !ok {
			t.Errorf("line %d: no connect in %v, though the proxy closes each connection", line, r.Phases)
		}
	}
	if got := px.Stats().Requests; got != n {
		t.Errorf("the proxy served %d requests for %d URLs", got, n)
	}
}

func TestTotalDeadline(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Timeout = 300 * time.Millisecond
	cfg.Retries = 5
	cfg.RetryBackoff = 10 * time.Millisecond
	start := time.Now()
	recs, _ := run(t, cfg, tg.URL+"/h?delay=10s", tg.URL+"/b?chunks=10&drip=100ms")
	el := time.Since(start)
	// Tolerance: 300ms deadline plus 250ms for scheduling on a loaded
	// 2-core machine under -race.
	if el > 550*time.Millisecond {
		t.Errorf("run took %s, deadline 300ms", el)
	}
	for line, phase := range map[int]string{1: "headers", 2: "body"} {
		r := recs[line]
		if r.Error == nil || r.Error.Kind != results.KindDeadline || r.Error.Phase != phase {
			t.Errorf("line %d: error %+v, want %s/deadline", line, r.Error, phase)
		}
		if r.Attempts != 1 {
			t.Errorf("line %d: %d attempts, want 1", line, r.Attempts)
		}
	}
}

func TestPhaseTimeouts(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.HeaderTimeout = 200 * time.Millisecond
	cfg.IdleTimeout = 200 * time.Millisecond
	cfg.Retries = 0
	recs, _ := run(t, cfg, tg.URL+"/h?delay=5s", tg.URL+"/b?chunks=3&drip=2s", tg.URL+"/ok?chunks=8&drip=25ms")
	for line, phase := range map[int]string{1: "headers", 2: "body"} {
		r := recs[line]
		if r.Error == nil || r.Error.Kind != results.KindTimeout || r.Error.Phase != phase {
			t.Errorf("line %d: error %+v, want %s/timeout", line, r.Error, phase)
		}
		// Tolerance: 250ms over the limit, for timers on a loaded 2-core machine under -race.
		if r.ElapsedMS < 200 || r.ElapsedMS > 450 {
			t.Errorf("line %d: took %.0fms for a 200ms timeout", line, r.ElapsedMS)
		}
	}
	if !recs[3].OK {
		t.Errorf("a body dripping faster than the idle timeout failed: %+v", recs[3].Error)
	}
}

// TestBodyApartFromHead: a body with its Content-Length that comes apart
// from its head (squid writes the two apart; the test's HTTP proxy too)
// is waited for in the body phase, under --idle-timeout and not
// --header-timeout, however the client reads it (h1 waits on for it in the
// read of the head): a gap longer than the header limit succeeds and is
// recorded in body; pieces that come within the idle limit, but take longer
// than it in all, succeed; a gap longer than the idle limit fails in body.
// Direct and through an absolute-form HTTP proxy. Tolerance: every gap is
// at least 300 ms from the limit it is measured against; phases are
// asserted against those limits, not the gaps.
func TestBodyApartFromHead(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	const header, idle = 300 * time.Millisecond, 900 * time.Millisecond
	for _, via := range []string{"direct", "proxy"} {
		t.Run(via, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.HeaderTimeout, cfg.IdleTimeout = header, idle
			cfg.Retries = 0
			if via == "proxy" {
				cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
			}
			recs, _ := run(t, cfg,
				tg.URL+"/gap?size=100&chunks=1&drip=600ms&length=1",  // over the header limit
				tg.URL+"/drip?size=100&chunks=5&drip=300ms&length=1", // 1.5 s in pieces, each within the idle limit
				tg.URL+"/stall?size=100&chunks=1&drip=3s&length=1",   // over the idle limit
			)
			for line := 1; line <= 2; line++ {
				r := recs[line]
				if !r.OK || r.Bytes != 100 {
					t.Errorf("line %d: ok %v, %d bytes, error %+v; want 100 bytes", line, r.OK, r.Bytes, r.Error)
					continue
				}
				headers, _ := r.Phases.Get("headers")
				body, _ := r.Phases.Get("body")
				if headers >= float64(header.Milliseconds()) || body < float64(header.Milliseconds()) {
					t.Errorf("line %d: phases %v: the wait for the body is not the body's", line, r.Phases)
				}
			}
			r := recs[3]
			if r.Error == nil || r.Error.Phase != "body" || r.Error.Kind != results.KindTimeout || !strings.Contains(r.Error.Message, "--idle-timeout") {
				t.Errorf("line 3: error %+v, want body/timeout by --idle-timeout", r.Error)
			}
		})
	}
}

// TestHandshakeDeadlineLifted: the deadline a dial with a proxy handshake
// (here CONNECT, for an https target through an HTTP proxy) puts on its
// connection, --connect-timeout from the dial, is lifted once the
// connection is in use: a body that takes longer than that after the dial
// is read whole, and so is the next URL's, on the same connection, long
// after. Tolerance: each body takes 1.2 s against a 500 ms limit.
func TestHandshakeDeadlineLifted(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{TLS: true})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	cfg := fetch.DefaultConfig()
	cfg.ConnectTimeout = 500 * time.Millisecond
	cfg.Concurrency = 1
	cfg.Retries = 0
	cfg.RootCAs = tg.CertPool
	cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
	recs, _ := run(t, cfg, tg.URL+"/1?size=100&chunks=2&drip=600ms", tg.URL+"/2?size=100&chunks=2&drip=600ms")
	for line := 1; line <= 2; line++ {
		if r := recs[line]; !r.OK || r.Bytes != 100 {
			t.Errorf("line %d: ok %v, %d bytes, error %+v", line, r.OK, r.Bytes, r.Error)
		}
	}
	if _, ok := recs[2].Phases.Get("proxy"); ok {
		t.Errorf("line 2 has a proxy handshake: it was meant to reuse line 1's connection: %v", recs[2].Phases)
	}
	if st := px.Stats(); st.Connects != 1 {
		t.Errorf("%d CONNECTs, want 1", st.Connects)
	}
}

// TestHeadDecidesWithoutTheBody: an answer the engine decides on its head
// alone (a --ban-status, a --ban-match in the headers, a Content-Length
// over --max-body) is decided when the head comes, though its body, with
// that length, comes 3 s later: the first read does not wait for a body
// that will not be read. Direct and through an absolute-form HTTP proxy.
// Tolerance: 1.5 s for what takes milliseconds; a wait for the body would
// take the 2 s idle limit.
func TestHeadDecidesWithoutTheBody(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	for _, tc := range []struct {
		name        string
		set         func(*fetch.Config)
		phase, kind string
	}{
		{"--ban-status", func(c *fetch.Config) { c.BanStatus = []int{200} }, "headers", results.KindBanned},
		{"--ban-match", func(c *fetch.Config) { c.BanMatch = regexp.MustCompile("text/plain") }, "headers", results.KindBanned},
		{"--max-body", func(c *fetch.Config) { c.MaxBody = 50 }, "body", results.KindTooLarge},
	} {
		for _, via := range []string{"direct", "proxy"} {
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				cfg := fetch.DefaultConfig()
				cfg.IdleTimeout = 2 * time.Second
				cfg.Retries = 0
				tc.set(&cfg)
				if via == "proxy" {
					cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
				}
				recs, _ := run(t, cfg, tg.URL+"/x?size=100&chunks=1&drip=3s&length=1")
				r := recs[1]
				if r.Error == nil || r.Error.Phase != tc.phase || r.Error.Kind != tc.kind {
					t.Fatalf("error %+v, want %s/%s", r.Error, tc.phase, tc.kind)
				}
				if r.ElapsedMS > 1500 {
					t.Errorf("decided after %.0f ms: it waited for the body", r.ElapsedMS)
				}
			})
		}
	}
}

func TestRetryGoesToAnotherProxy(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.RetryBackoff = time.Millisecond
	for i := range 2 {
		px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
		cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, nil))
	}
	recs, _ := run(t, cfg, tg.URL+"/r?fail=1")
	r := recs[1]
	if !r.OK || r.Attempts != 2 || len(r.Tries) != 1 {
		t.Fatalf("record %+v", r)
	}
	if r.Tries[0].Proxy == r.Proxy {
		t.Errorf("retry went to the same proxy %s", r.Proxy)
	}
	if r.Tries[0].Error == nil || r.Tries[0].Error.Kind != "status" || r.Tries[0].Status != 503 {
		t.Errorf("try %+v", r.Tries[0])
	}
}

var _ = bytes.NewReader
var _ = limits.Rate{}

// TestReusedConnectionHasNoSetupPhases: a request on a kept-alive
// connection records no dns, connect or tls phase.
func TestReusedConnectionHasNoSetupPhases(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{TLS: true})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 1
	cfg.RootCAs = tg.CertPool
	recs, _ := run(t, cfg, tg.URL+"/1", tg.URL+"/2", tg.URL+"/3")
	for _, p := range []string{"connect", "tls"} {
		if _, ok := recs[1].Phases.Get(p); !ok {
			t.Errorf("first request: no %s phase in %v", p, recs[1].Phases)
		}
	}
	for line := 2; line <= 3; line++ {
		for _, p := range []string{"dns", "connect", "tls", "proxy"} {
			if v, ok := recs[line].Phases.Get(p); ok {
				t.Errorf("line %d on a reused connection has %s=%v: %v", line, p, v, recs[line].Phases)
			}
		}
	}
}

// TestClosedEngineIsFreed: once Run has returned and Close has been called,
// nothing keeps the Engine alive (a worker's timer, set for a URL's
// deadline, once did for up to --timeout, through the proxy's route in its
// last attempt's context), so a program that runs engines
// one after another does not hold every one of them, with its proxies'
// state, for a minute.
func TestClosedEngineIsFreed(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 2
	cfg.Proxies = []proxies.Proxy{proxyOf(t, "http://"+px.Addr, nil)}
	freed := make(chan struct{})
	func() {
		e, err := fetch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(e, func(c chan struct{}) { close(c) }, freed)
		recs, _ := runEngine(t, e, tg.URL+"/1", tg.URL+"/2", tg.URL+"/3")
		if len(recs) != 3 || !recs[1].OK {
			t.Fatalf("records: %v", recs)
		}
		e.Close()
	}()
	// The cleanup runs after a collection has found the Engine unreachable;
	// 2 s is far less than the 60 s timer that held it. A collection is
	// asked for again whenever 10 ms pass without the cleanup: what held
	// the Engine may let go of it only after the first.
	late := time.NewTimer(2 * time.Second)
	defer late.Stop()
	again := time.NewTicker(10 * time.Millisecond)
	defer again.Stop()
	for {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-late.C:
			t.Fatal("the Engine is still reachable 2 s after Close")
		case <-again.C:
		}
	}
}
