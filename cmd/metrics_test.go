package cmd

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

// stderrLog is standard error for a command under test: it keeps what is
// written, and wakes waitFor at each write.
type stderrLog struct {
	mu     sync.Mutex
	b      strings.Builder
	writes chan struct{}
}

func newStderrLog() *stderrLog { return &stderrLog{writes: make(chan struct{}, 1)} }

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.writes <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

func (l *stderrLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until what was written matches re, and returns the
// submatches.
func (l *stderrLog) waitFor(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(l.String()); m != nil {
			return m
		}
		select {
		case <-l.writes:
		case <-timeout:
			t.Fatalf("nothing matching %s written in 30s:\n%s", re, l.String())
		}
	}
}

var (
	servingRE = regexp.MustCompile(`serving metrics at (http://\S+/metrics)`)
	lingerRE  = regexp.MustCompile(`metrics stay at \S+ for 1m0s`)
)

// scrapeMetrics gets url and parses the text format, returning the body
// too.
func scrapeMetrics(t *testing.T, url string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	// No connection is kept: the test checks for leaked goroutines.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, %v:\n%s", resp.StatusCode, err, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return mf, string(b)
}

// sampleSum adds up the values (counts, for a histogram) of the samples
// of name whose labels include want.
func sampleSum(f map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	var s float64
	for _, m := range f[name].GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == k && l.GetValue() == v
			}
			match = match && (found || v == "" && !hasLabel(m, k))
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			s += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			s += m.GetGauge().GetValue()
		case m.GetHistogram() != nil:
			s += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return s
}

func hasLabel(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return true
		}
	}
	return false
}

// gate is a target whose answers wait until open is closed; entered says
// when each request comes. Close it when done.
type gate struct {
	*httptest.Server
	entered chan struct{}
	open    chan struct{}
}

func startGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}, 16), open: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
			io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	return g
}

// attemptKey is an attempt's labels but outcome.
type attemptKey struct{ pool, kind, phase string }

// TestRun_metrics runs URLs through three proxies (one refusing
// connections, one with credentials) with --metrics, scrapes it while a
// URL holds the run up and once more in the linger, and checks the final
// scrape against the records and the report: attempts by pool, kind and
// phase, records by ok and kind, the phase histogram's counts, proxies by
// state (the dead one benched), nothing in flight, and no credential in
// any label. An interrupt ends the linger, and the endpoint closes.
func TestRun_metrics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	g := startGate(t)
	defer g.Close()
	open, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(0)})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	const user, pass = "mx-user", "mx-Secret-77"
	authed, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(1), User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	dir := t.TempDir()
	list := writeFile(t, dir, "proxies.txt", fmt.Sprintf("http://%s pool=dead\n%s\n%s pool=paid\n", closedAddr(t), open.URL, authed.AuthURL()))
	var urls strings.Builder
	fmt.Fprintf(&urls, "%s/gate\n", g.URL)
	for i := range 30 {
		q := "size=100"
		switch {
		case i%7 == 3:
			q = "status=503"
		case i%5 == 0:
			q = "status=404"
		}
		fmt.Fprintf(&urls, "%s/m/%d?%s\n", target.URL, i, q)
	}
	out, repPath := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	args := []string{"-p", list, "-o", out, "--report", repPath, "--policy", "round-robin", "-c", "4",
		"--proxy-max-failures", "1", "--proxy-cooldown", "5m", "--retry-backoff", "1ms",
		"--metrics", "127.0.0.1:0", "--metrics-linger", "1m", writeFile(t, dir, "urls.txt", urls.String())}

	stderr := newStderrLog()
	ios, _, _, _ := Test()
	ios.ErrOut = stderr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() { code <- Run(ctx, ios, args) }()

	url := stderr.waitFor(t, servingRE)[1]
	select {
	case <-g.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the gated URL was not asked for in 30s:\n%s", stderr)
	}
	during, _ := scrapeMetrics(t, url)
	if n := sampleSum(during, "fetch_in_flight", nil); n < 1 {
		t.Errorf("during the run: %v in flight, want at least the gated URL", n)
	}
	close(g.open)
	stderr.waitFor(t, lingerRE)
	final, body := scrapeMetrics(t, url)
	cancel()
	select {
	case c := <-code:
		if c != ExitNotAllOK {
			t.Errorf("exit %d, want %d (the 503s fail):\n%s", c, ExitNotAllOK, stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an interrupt did not end the linger in 10s")
	}
	if c, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/metrics")); err == nil {
		c.Close()
		t.Errorf("the endpoint still takes connections after the run")
	}

	recs := recordsOf(t, out)
	rep, _ := readReport(t, repPath)
	if len(recs) != 31 {
		t.Fatalf("%d records, want 31", len(recs))
	}
	// Attempts and phases as the records tell them.
	attempts := map[attemptKey]float64{}
	phases := map[string]float64{}
	var leased float64
	count := func(proxy, pool string, e *results.Error, p results.PhaseTimes) {
		if proxy == "" { // no proxy: not an attempt
			return
		}
		k := attemptKey{pool: pool}
		if e != nil {
			k.kind, k.phase = e.Kind, e.Phase
		}
		attempts[k]++
		for ph := range p.All() {
			phases[ph]++
		}
	}
	okByKind := map[[2]string]float64{}
	for _, r := range recs {
		for _, tr := range r.Tries {
			count(tr.Proxy, tr.Pool, tr.Error, tr.Phases)
		}
		count(r.Proxy, r.Pool, r.Error, r.Phases)
		leased += float64(r.Attempts)
		kind := ""
		if r.Error != nil {
			kind = r.Error.Kind
		}
		okByKind[[2]string{fmt.Sprint(r.OK), kind}]++
	}
	if got := sampleSum(final, "fetch_attempts_total", nil); got != leased {
		t.Errorf("fetch_attempts_total adds up to %v; the records' attempts to %v", got, leased)
	}
	for k, want := range attempts {
		if got := sampleSum(final, "fetch_attempts_total", map[string]string{"pool": k.pool, "kind": k.kind, "phase": k.phase}); got != want {
			t.Errorf("fetch_attempts_total%+v = %v, records say %v", k, got, want)
		}
	}
	byPool := map[string]float64{}
	for _, p := range rep.Proxies {
		byPool[p.Pool] += float64(p.Attempts)
	}
	for pool, want := range byPool {
		if got := sampleSum(final, "fetch_attempts_total", map[string]string{"pool": pool}); got != want {
			t.Errorf("fetch_attempts_total{pool=%q} = %v, the report says %v", pool, got, want)
		}
	}
	for ph, want := range phases {
		if got := sampleSum(final, "fetch_phase_seconds", map[string]string{"phase": ph}); got != want {
			t.Errorf("fetch_phase_seconds{phase=%q} counts %v, records say %v", ph, got, want)
		}
	}
	for k, want := range okByKind {
		if got := sampleSum(final, "fetch_records_total", map[string]string{"ok": k[0], "kind": k[1]}); got != want {
			t.Errorf("fetch_records_total{ok=%s,kind=%q} = %v, records say %v", k[0], k[1], got, want)
		}
	}
	if ok, failed := sampleSum(final, "fetch_records_total", map[string]string{"ok": "true"}), sampleSum(final, "fetch_records_total", map[string]string{"ok": "false"}); int(ok) != rep.OK || int(failed) != rep.Failed || rep.Failed == 0 {
		t.Errorf("records: %v ok, %v failed; the report says %d and %d (want some failed)", ok, failed, rep.OK, rep.Failed)
	}
	for kind, n := range rep.ByKind {
		if got := sampleSum(final, "fetch_records_total", map[string]string{"ok": "false", "kind": kind}); int(got) != n {
			t.Errorf("fetch_records_total{kind=%q} = %v, the report says %d", kind, got, n)
		}
	}
	for _, s := range []struct {
		pool, state string
		want        float64
	}{
		{"dead", "benched", 1}, {"dead", "healthy", 0},
		{"paid", "healthy", 1}, {"", "healthy", 1}, {"", "benched", 0},
	} {
		if got := sampleSum(final, "fetch_proxies", map[string]string{"pool": s.pool, "state": s.state}); got != s.want {
			t.Errorf("fetch_proxies{pool=%q,state=%q} = %v, want %v", s.pool, s.state, got, s.want)
		}
	}
	for id, p := range rep.Proxies {
		if p.Pool == "dead" && p.State != "benched" {
			t.Errorf("the report has %s %q, want benched", id, p.State)
		}
	}
	if n, w := sampleSum(final, "fetch_in_flight", nil), sampleSum(final, "fetch_waiting", nil); n != 0 || w != 0 {
		t.Errorf("after the run: %v in flight, %v waiting; want 0", n, w)
	}
	if strings.Contains(body, pass) || strings.Contains(body, user) {
		t.Errorf("the scrape shows a credential:\n%s", body)
	}
	if _, ok := final["fetch_proxy_attempts_total"]; ok {
		t.Errorf("fetch_proxy_attempts_total without --metrics-proxies")
	}
}

// TestRun_metricsUsage: an address that is in use is a usage error that
// names it, before any request; so are the linger and the busiest count
// without --metrics, and a count out of range.
func TestRun_metricsUsage(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", target.URL+"/a\n")
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"in use", []string{"--metrics", ln.Addr().String()}, "--metrics " + ln.Addr().String()},
		{"no port", []string{"--metrics", "127.0.0.1"}, "--metrics 127.0.0.1"},
		{"linger alone", []string{"--metrics-linger", "1s"}, "need --metrics"},
		{"negative linger", []string{"--metrics", "127.0.0.1:0", "--metrics-linger", "-1s"}, "--metrics-linger"},
		{"busiest alone", []string{"--metrics-proxies", "3"}, "need --metrics"},
		{"busiest out of range", []string{"--metrics", "127.0.0.1:0", "--metrics-proxies", "-1"}, "--metrics-proxies -1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, stderr := Test()
			code := Run(context.Background(), ios, append(tt.args, "-o", filepath.Join(dir, "out.jsonl"), urls))
			if code != ExitUsage || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("exit %d, want %d with %q:\n%s", code, ExitUsage, tt.want, stderr)
			}
			if n := target.Requests(); n != 0 {
				t.Errorf("%d requests made", n)
			}
		})
	}
	for _, args := range [][]string{{"demo", "--metrics-linger", "1s"}, {"demo", "--metrics", ln.Addr().String()}} {
		ios, _, _, stderr := Test()
		if code := Run(context.Background(), ios, args); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d:\n%s", args, code, ExitUsage, stderr)
		}
	}
}

// TestDemo_metrics: the demo serves its metrics too; with --metrics-proxies
// its three proxies each get series of their own.
func TestDemo_metrics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	stderr := newStderrLog()
	ios, _, _, _ := Test()
	ios.ErrOut = stderr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- Run(ctx, ios, []string{"demo", "--urls", "20", "--metrics", "127.0.0.1:0", "--metrics-linger", "1m", "--metrics-proxies", "3"})
	}()
	url := stderr.waitFor(t, servingRE)[1]
	stderr.waitFor(t, lingerRE)
	f, _ := scrapeMetrics(t, url)
	cancel()
	if c := <-code; c != ExitOK {
		t.Errorf("exit %d, want 0:\n%s", c, stderr)
	}
	if n := sampleSum(f, "fetch_records_total", map[string]string{"ok": "true"}); n != 20 {
		t.Errorf("%v ok records, want 20", n)
	}
	if n := sampleSum(f, "fetch_proxies", map[string]string{"state": "healthy"}); n != 3 {
		t.Errorf("%v healthy proxies, want 3", n)
	}
	ids := map[string]bool{}
	for _, m := range f["fetch_proxy_attempts_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "proxy" {
				ids[l.GetValue()] = true
			}
		}
	}
	if len(ids) != 3 || ids["other"] {
		t.Errorf("proxy labels %v, want the 3 proxies", ids)
	}
	if got, want := sampleSum(f, "fetch_proxy_attempts_total", nil), sampleSum(f, "fetch_attempts_total", nil); got != want {
		t.Errorf("fetch_proxy_attempts_total adds up to %v, fetch_attempts_total to %v", got, want)
	}
}
