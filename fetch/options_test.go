package fetch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// TestLimits runs slow bodies under each limit and checks, at the targets,
// that the limit held and was reached.
func TestLimits(t *testing.T) {
	t1 := startTarget(t, fetchtest.TargetOptions{})
	t2 := startTarget(t, fetchtest.TargetOptions{})
	slow := func(tg *fetchtest.Target, n int) []string {
		var ls []string
		for i := range n {
			ls = append(ls, fmt.Sprintf("%s/s/%d?chunks=2&drip=25ms&size=100", tg.URL, i))
		}
		return ls
	}
	t.Run("global -c", func(t *testing.T) {
		t1.ResetStats()
		cfg := fetch.DefaultConfig()
		cfg.Concurrency = 3
		run(t, cfg, slow(t1, 15)...)
		if got := t1.MaxInFlight(); got != 3 {
			t.Errorf("max in flight %d, want 3", got)
		}
	})
	t.Run("host concurrency", func(t *testing.T) {
		t1.ResetStats()
		t2.ResetStats()
		cfg := fetch.DefaultConfig()
		cfg.HostConcurrency = 2
		_, rep := run(t, cfg, append(slow(t1, 10), slow(t2, 10)...)...)
		for _, tg := range []*fetchtest.Target{t1, t2} {
			if got := tg.MaxInFlight(); got != 2 {
				t.Errorf("%s: max in flight %d, want 2", tg.Addr, got)
			}
			if h := rep.Hosts[tg.Addr]; h == nil || h.MaxInFlight != 2 || h.Attempts != 10 {
				t.Errorf("report host %s: %+v", tg.Addr, h)
			}
		}
	})
	t.Run("pool shares one budget", func(t *testing.T) {
		t1.ResetStats()
		cfg := fetch.DefaultConfig()
		for i := range 3 {
			px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(10 + i)})
			cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Pool = "shared"; p.Concurrency = 2 }))
		}
		recs, _ := run(t, cfg, slow(t1, 12)...)
		if got := t1.MaxInFlight(); got != 2 {
			t.Errorf("pool of 3 proxies with concurrency 2: max in flight %d", got)
		}
		if recs[1].Pool != "shared" {
			t.Errorf("record pool %q", recs[1].Pool)
		}
	})
	rateCase := func(name string, set func(*fetch.Config), n int, minSpan time.Duration) {
		t.Run(name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			set(&cfg)
			var ls []string
			for i := range n {
				ls = append(ls, fmt.Sprintf("%s/r/%d", t1.URL, i))
			}
			start := time.Now()
			run(t, cfg, ls...)
			// A rate limit is a floor on the run's length: n attempts at
			// 50/s with burst 1 cannot take less than (n-1)/50 s.
			if el := time.Since(start); el < minSpan {
				t.Errorf("%d requests in %s, rate allows no less than %s", n, el, minSpan)
			}
		})
	}
	fifty := limits.Rate{N: 50, Per: time.Second}
	rateCase("global rate", func(c *fetch.Config) { c.Rate = fifty }, 11, 200*time.Millisecond)
	rateCase("host rate", func(c *fetch.Config) { c.HostRate = fifty }, 11, 200*time.Millisecond)
	rateCase("host rate burst 5", func(c *fetch.Config) { c.HostRate = fifty; c.HostBurst = 5 }, 15, 200*time.Millisecond)
}

func TestRequestOptions(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{TLS: true})
	cfg := fetch.DefaultConfig()
	cfg.Method = "POST"
	cfg.Header = http.Header{"User-Agent": {"fetch-test/1"}, "X-Extra": {"a"}}
	cfg.RootCAs = tg.CertPool
	recs, _ := run(t, cfg, tg.URL+"/echo")
	r := recs[1]
	if !r.OK {
		t.Fatalf("%+v", r.Error)
	}
	if _, ok := r.Phases.Get("tls"); !ok {
		t.Errorf("no tls phase: %v", r.Phases)
	}
	dir := t.TempDir()
	cfg.SaveDir = dir
	recs, _ = run(t, cfg, tg.URL+"/echo")
	b, err := os.ReadFile(recs[1].File)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(recs[1].File) != dir {
		t.Errorf("file %s not in %s", recs[1].File, dir)
	}
	var echo fetchtest.Echo
	if err := json.Unmarshal(b, &echo); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if echo.Method != "POST" || echo.Header.Get("User-Agent") != "fetch-test/1" || echo.Header.Get("X-Extra") != "a" || echo.Header.Get("Accept") != "*/*" {
		t.Errorf("target saw %+v", echo)
	}
	// Without -H, the defaults.
	cfg.Header = nil
	recs, _ = run(t, cfg, tg.URL+"/echo")
	b, err = os.ReadFile(recs[1].File)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &echo); err != nil {
		t.Fatal(err)
	}
	if ua := echo.Header.Get("User-Agent"); ua != fetch.UserAgent {
		t.Errorf("default User-Agent %q, want %q", ua, fetch.UserAgent)
	}
	if int64(len(b)) != recs[1].Bytes {
		t.Errorf("saved %d bytes, record says %d", len(b), recs[1].Bytes)
	}
}

func TestTLSVerification(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{TLS: true})
	cfg := fetch.DefaultConfig()
	cfg.Retries = 0
	recs, _ := run(t, cfg, tg.URL+"/x")
	if e := recs[1].Error; e == nil || e.Kind != results.KindTLS || e.Phase != results.PhaseTLS {
		t.Errorf("untrusted cert: error %+v, want tls/tls", e)
	}
	cfg.Insecure = true
	recs, _ = run(t, cfg, tg.URL+"/x")
	if !recs[1].OK {
		t.Errorf("-k: %+v", recs[1].Error)
	}
}

func TestBodiesAndRedirects(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.MaxBody = 1000
	cfg.MaxRedirects = 3
	recs, _ := run(t, cfg,
		tg.URL+"/big?size=1001",
		tg.URL+"/big?size=5000&chunks=5&drip=1ms", // no Content-Length
		tg.URL+"/fits?size=1000",
		tg.URL+"/redirect?to="+tg.URL+"/fits%3Fsize%3D10",
		tg.URL+"/loop",
	)
	for line, kind := range map[int]string{1: results.KindTooLarge, 2: results.KindTooLarge, 5: results.KindRedirect} {
		if e := recs[line].Error; e == nil || e.Kind != kind {
			t.Errorf("line %d: %+v, want %s", line, e, kind)
		}
		if recs[line].Attempts != 1 {
			t.Errorf("line %d: %d attempts; %s is not retried", line, recs[line].Attempts, kind)
		}
	}
	if r := recs[3]; !r.OK || r.Bytes != 1000 {
		t.Errorf("line 3: %+v", r)
	}
	if r := recs[4]; !r.OK || r.Bytes != 10 || r.Status != 200 {
		t.Errorf("redirect: %+v %+v", r, r.Error)
	}
	cfg.MaxRedirects = 0
	recs, _ = run(t, cfg, tg.URL+"/loop")
	if r := recs[1]; !r.OK || r.Status != 302 {
		t.Errorf("--max-redirects 0: %+v", r)
	}
}

func TestRetryAfter(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.RetryBackoff = time.Millisecond
	cfg.Timeout = 3 * time.Second
	start := time.Now()
	recs, _ := run(t, cfg, tg.URL+"/a?fail=1&status=200&retry-after=1")
	if r := recs[1]; !r.OK || r.Attempts != 2 {
		t.Fatalf("%+v", r)
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("retried after %s; Retry-After said 1s", el)
	}
	// A Retry-After longer than what is left fails at once with the status.
	start = time.Now()
	recs, _ = run(t, cfg, tg.URL+"/b?fail=1&retry-after=30")
	if r := recs[1]; r.OK || r.Attempts != 1 || r.Error.Kind != results.KindStatus || r.Status != 503 {
		t.Fatalf("%+v %+v", r, r.Error)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("took %s; should fail at once", el)
	}
	when := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	recs, _ = run(t, cfg, tg.URL+"/c?fail=1&retry-after="+strings.ReplaceAll(when, " ", "%20"))
	if r := recs[1]; r.OK || r.Attempts != 1 {
		t.Errorf("HTTP-date Retry-After an hour away: %+v", r)
	}
}

// TestRetryGetsWhatIsLeft: each attempt gets only what is left of -t, never
// a fresh budget. With -t 500ms and a 300ms header timeout the first attempt
// times out at 300ms and the second is cut by the deadline at 500ms.
func TestRetryGetsWhatIsLeft(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Timeout = 500 * time.Millisecond
	cfg.HeaderTimeout = 300 * time.Millisecond
	cfg.Retries = 3
	cfg.RetryBackoff = time.Millisecond
	start := time.Now()
	recs, _ := run(t, cfg, tg.URL+"/slow?delay=10s")
	r := recs[1]
	if r.Attempts != 2 || r.Error == nil || r.Error.Kind != results.KindDeadline || r.Error.Phase != results.PhaseHeaders {
		t.Fatalf("attempts %d, error %+v; want 2 attempts ending headers/deadline", r.Attempts, r.Error)
	}
	if r.Tries[0].Error == nil || r.Tries[0].Error.Kind != results.KindTimeout {
		t.Errorf("first attempt %+v, want a header timeout", r.Tries[0].Error)
	}
	// Tolerance: 300ms past the 500ms deadline, for -race on 2 cores.
	if el := time.Since(start); el > 800*time.Millisecond {
		t.Errorf("took %s with -t 500ms", el)
	}
}

// TestBackoffDelaysRetries: with a large --retry-backoff the retries of a
// URL that always fails are spread out; with none they are not. Full
// jitter makes one wait anywhere in [0, ceiling], so the test takes the
// total over several URLs: 6 URLs x 2 retries each averaging at least a
// quarter of 200ms and 400ms could all be short only by a chance below
// 10^-9.
func TestBackoffDelaysRetries(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Retries = 2
	cfg.RetryStatus = []int{500}
	cfg.PushbackDelay = 0
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf("%s/b/%d?status=500", tg.URL, i))
	}
	cfg.RetryBackoff = 200 * time.Millisecond
	recs, _ := run(t, cfg, lines...)
	var waited float64
	for _, r := range recs {
		if r.Attempts != 3 {
			t.Fatalf("record %+v", r)
		}
		work := 0.0 // time in attempts; the rest of the record's time is back-off
		for _, tr := range r.Tries {
			work += tr.ElapsedMS
		}
		for _, ms := range r.Phases.All() {
			work += ms
		}
		waited += r.ElapsedMS - work
	}
	// The expected total wait is 6 x (100 + 200) = 1800ms.
	t.Logf("waited %.0fms in all", waited)
	if waited < 300 {
		t.Errorf("6 URLs waited %.0fms in all between attempts, expected about 1800", waited)
	}
	cfg.RetryBackoff = 0
	start := time.Now()
	run(t, cfg, lines...)
	if el := time.Since(start); el > 300*time.Millisecond {
		t.Errorf("with no back-off the retries took %s", el)
	}
}

// TestPolicyReachesScheduler: the policies choose differently. One slow
// URL holds one proxy while five quick ones follow one by one:
// least-inflight sends them all to the idle one, least-used alternates
// once the counts are level. The input stays open until every record is
// in: at the end of a run the scheduler takes the fastest proxies first
// whatever the policy (see limits.Local.Drain), and that is not what this
// test is about.
func TestPolicyReachesScheduler(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	var ps []proxies.Proxy
	for i, c := range []int{8, 2} {
		px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(70 + i)})
		ps = append(ps, proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = c }))
	}
	lines := []string{tg.URL + "/hold?chunks=2&drip=200ms"}
	for i := range 5 {
		lines = append(lines, fmt.Sprintf("%s/quick/%d", tg.URL, i))
	}
	for _, tc := range []struct {
		policy limits.Policy
		a, b   int // attempts on A and B
	}{{limits.LeastInFlight, 1, 5}, {limits.LeastUsed, 3, 3}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 2
			cfg.Policy = tc.policy
			cfg.Proxies = ps
			rep := runOpen(t, cfg, lines)
			// Which proxy the slow URL lands on is a race between the two
			// workers; the split is the policy's either way.
			a, b := rep.Proxies[ps[0].ID].Attempts, rep.Proxies[ps[1].ID].Attempts
			if min(a, b) != min(tc.a, tc.b) || max(a, b) != max(tc.a, tc.b) {
				t.Errorf("attempts %d and %d, want %d and %d", a, b, tc.a, tc.b)
			}
		})
	}
}

// runOpen runs lines through a new engine for cfg with the input left open
// until every line has its record, so that the run never drains.
func runOpen(t *testing.T, cfg fetch.Config, lines []string) *report.Report {
	t.Helper()
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	pr, pw := io.Pipe()
	go func() { io.WriteString(pw, strings.Join(lines, "\n")+"\n") }()
	w := &closingWriter{n: len(lines), done: func() { pw.Close() }}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "urls.txt", R: pr}}, w)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != len(lines) {
		t.Fatalf("%d records, want %d", rep.Jobs, len(lines))
	}
	return rep
}

// closingWriter counts records and calls done after the n-th.
type closingWriter struct {
	n    int
	done func()
}

func (w *closingWriter) Write(*results.Record) error {
	if w.n--; w.n == 0 {
		w.done()
	}
	return nil
}

// TestProxyRateEveryAttempt: --proxy-rate holds through the engine, and an
// attempt that fails takes a token too: 4 URLs x 3 attempts at 20/s cannot
// take less than 11/20 s.
func TestProxyRateEveryAttempt(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
	cfg.ProxyRate = limits.Rate{N: 20, Per: time.Second}
	cfg.Retries = 2
	cfg.RetryBackoff = time.Millisecond
	cfg.PushbackDelay = 0
	var lines []string
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("%s/r/%d?status=503", tg.URL, i))
	}
	start := time.Now()
	recs, rep := run(t, cfg, lines...)
	if el := time.Since(start); el < 540*time.Millisecond {
		t.Errorf("12 attempts at 20/s in %s", el)
	}
	if a := rep.Proxies[cfg.Proxies[0].ID].Attempts; a != 12 || len(recs) != 4 {
		t.Errorf("%d attempts, %d records", a, len(recs))
	}
}

// TestDNSPhase: a host name is resolved and the time recorded as dns.
func TestDNSPhase(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	_, port, _ := strings.Cut(strings.TrimPrefix(tg.URL, "http://"), ":")
	recs, _ := run(t, fetch.DefaultConfig(), "http://localhost:"+port+"/n")
	r := recs[1]
	if !r.OK {
		t.Fatalf("%+v", r.Error)
	}
	if _, ok := r.Phases.Get("dns"); !ok {
		t.Errorf("no dns phase for a host name: %v", r.Phases)
	}
}
