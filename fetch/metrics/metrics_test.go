package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/metrics"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// families is a scrape, parsed.
type families map[string]*dto.MetricFamily

// parse reads a scrape in the text format.
func parse(t *testing.T, r io.Reader) families {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(r)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return mf
}

// scrapeHandler scrapes m through its handler, in process.
func scrapeHandler(t *testing.T, m *metrics.Metrics) families {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d: %s", rec.Code, rec.Body)
	}
	return parse(t, rec.Body)
}

// labels are a sample's labels.
func labels(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// value is a counter's or a gauge's value.
func value(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}

// sum adds up the samples of name whose labels include want.
func (f families) sum(name string, want map[string]string) float64 {
	var s float64
	for _, m := range f[name].GetMetric() {
		l := labels(m)
		match := true
		for k, v := range want {
			match = match && l[k] == v
		}
		if match {
			s += value(m)
		}
	}
	return s
}

// TestProxyStates follows proxies through changes of state and verdicts
// of their attempts: fetch_proxies counts each proxy once, in the state
// it is in, by pool.
func TestProxyStates(t *testing.T) {
	list := []proxies.Proxy{
		{ID: "http://127.0.0.1:1", Pool: "a"},
		{ID: "http://127.0.0.1:2", Pool: "a"},
		{ID: "http://127.0.0.1:3"},
	}
	health := func(p int, state string) func(*metrics.Metrics) {
		return func(m *metrics.Metrics) { m.Health(limits.HealthEvent{Proxy: p, State: state}) }
	}
	attempt := func(p int, o limits.Outcome) func(*metrics.Metrics) {
		return func(m *metrics.Metrics) { m.Attempt(fetch.AttemptEvent{Proxy: p, Outcome: o}) }
	}
	type counts struct{ healthy, benched, rejected, banned float64 }
	for _, tt := range []struct {
		name  string
		steps []func(*metrics.Metrics)
		a, b  counts // pool "a", and pool "" (proxy 2)
	}{
		{"all healthy at the start", nil, counts{healthy: 2}, counts{healthy: 1}},
		{"benched", []func(*metrics.Metrics){health(0, "benched")}, counts{healthy: 1, benched: 1}, counts{healthy: 1}},
		{"probing is still benched", []func(*metrics.Metrics){health(0, "benched"), health(0, "probing")}, counts{healthy: 1, benched: 1}, counts{healthy: 1}},
		{"back", []func(*metrics.Metrics){health(0, "benched"), health(0, "probing"), health(0, "healthy")}, counts{healthy: 2}, counts{healthy: 1}},
		{"rejected is for good", []func(*metrics.Metrics){health(2, "rejected"), health(2, "healthy"), attempt(2, limits.Banned)}, counts{healthy: 2}, counts{rejected: 1}},
		{"banned until a success", []func(*metrics.Metrics){attempt(1, limits.Banned), attempt(1, limits.ProxyFault)}, counts{healthy: 1, banned: 1}, counts{healthy: 1}},
		{"a success ends the ban", []func(*metrics.Metrics){attempt(1, limits.Banned), attempt(1, limits.Success)}, counts{healthy: 2}, counts{healthy: 1}},
		{"a 429 ends the ban", []func(*metrics.Metrics){attempt(1, limits.Banned), attempt(1, limits.PushedBack)}, counts{healthy: 2}, counts{healthy: 1}},
		{"bans bench", []func(*metrics.Metrics){attempt(1, limits.Banned), health(1, "benched")}, counts{healthy: 1, benched: 1}, counts{healthy: 1}},
		{"a ban while benched", []func(*metrics.Metrics){health(1, "benched"), attempt(1, limits.Banned), attempt(1, limits.Success)}, counts{healthy: 1, benched: 1}, counts{healthy: 1}},
		{"unknown proxy and state ignored", []func(*metrics.Metrics){health(7, "benched"), health(0, "resting"), attempt(-1, limits.Banned)}, counts{healthy: 2}, counts{healthy: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := metrics.New(metrics.Options{Proxies: list})
			for _, step := range tt.steps {
				step(m)
			}
			f := scrapeHandler(t, m)
			for pool, want := range map[string]counts{"a": tt.a, "": tt.b} {
				got := counts{}
				for _, s := range []struct {
					state string
					p     *float64
				}{{"healthy", &got.healthy}, {"benched", &got.benched}, {"rejected", &got.rejected}, {"banned", &got.banned}} {
					*s.p = f.sum("fetch_proxies", map[string]string{"pool": pool, "state": s.state})
				}
				if got != want {
					t.Errorf("pool %q: %+v, want %+v", pool, got, want)
				}
			}
			if n := len(f["fetch_proxies"].GetMetric()); n != 8 {
				t.Errorf("%d fetch_proxies series, want 8 (4 states, 2 pools)", n)
			}
		})
	}
}

// TestAttemptAllocatesNothing: counting an attempt, its phases among
// them, allocates nothing once its counters exist.
func TestAttemptAllocatesNothing(t *testing.T) {
	for _, busiest := range []int{0, 10} {
		m := metrics.New(metrics.Options{Proxies: []proxies.Proxy{{ID: "a", Pool: "p"}, {ID: "b"}}, Busiest: busiest})
		ev := fetch.AttemptEvent{Proxy: 1, Outcome: limits.ProxyFault, Kind: results.KindRefused, Phase: results.PhaseConnect}
		ev.Phases.SetAt(results.IndexQueue, 1)
		ev.Phases.SetAt(results.IndexConnect, 2)
		m.Attempt(ev) // makes the pool's counters
		if n := testing.AllocsPerRun(1000, func() { m.Attempt(ev) }); n != 0 {
			t.Errorf("busiest %d: %.1f allocations an attempt, want 0", busiest, n)
		}
		rec := &results.Record{Error: &results.Error{Kind: results.KindRefused}}
		if n := testing.AllocsPerRun(1000, func() { m.Record(rec) }); n != 0 {
			t.Errorf("%.1f allocations a record, want 0", n)
		}
	}
}

// gated is a target whose /gate answers only once open is closed, and
// says on entered when each request comes.
type gated struct {
	*httptest.Server
	entered chan struct{}
	open    chan struct{}
}

func startGated(t *testing.T) *gated {
	g := &gated{entered: make(chan struct{}, 100), open: make(chan struct{})}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gate" {
			g.entered <- struct{}{}
			select {
			case <-g.open:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(g.Close)
	return g
}

// acquires is a scheduler that says on entered when each Acquire begins.
type acquires struct {
	limits.Scheduler
	entered chan struct{}
}

func (a *acquires) Acquire(ctx context.Context, req limits.Request) (*limits.Lease, error) {
	a.entered <- struct{}{}
	return a.Scheduler.Acquire(ctx, req)
}

// wait receives n times from ch, or fails after 10 s.
func wait(t *testing.T, ch <-chan struct{}, n int, what string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("%d of %d %s in 10s", i, n, what)
		}
	}
}

// TestGauges: while 4 URLs hold the host's 4 permits and 2 more wait for
// one, the scrape says 6 in flight and 2 waiting; once the run is over, 0
// and 0, and every record counted.
func TestGauges(t *testing.T) {
	g := startGated(t)
	sched := &acquires{
		Scheduler: limits.NewLocal(limits.Config{
			Budgets: []limits.Spec{{}}, BudgetOf: []int{0},
			Host: limits.Spec{Concurrency: 4, Burst: 1},
		}),
		entered: make(chan struct{}, 100),
	}
	defer sched.Close()
	m := metrics.New(metrics.Options{})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	scrape := func() families {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return parse(t, resp.Body)
	}

	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 6
	cfg.Scheduler = sched
	cfg.Observer = m
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m.Watch(e)
	var urls strings.Builder
	for range 6 {
		fmt.Fprintf(&urls, "%s/gate\n", g.URL)
	}
	for i := range 20 {
		fmt.Fprintf(&urls, "%s/x/%d\n", g.URL, i)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(urls.String())}}, results.NewJSONLWriter(io.Discard))
		done <- err
	}()
	wait(t, g.entered, 4, "requests")
	wait(t, sched.entered, 6, "acquires")
	f := scrape()
	if in, w := f.sum("fetch_in_flight", nil), f.sum("fetch_waiting", nil); in != 6 || w != 2 {
		t.Errorf("during: %v in flight, %v waiting; want 6 and 2", in, w)
	}
	if h := f.sum("fetch_proxies", map[string]string{"pool": metrics.DirectPool, "state": "healthy"}); h != 1 {
		t.Errorf("direct: %v healthy, want 1", h)
	}
	close(g.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f = scrape()
	if in, w := f.sum("fetch_in_flight", nil), f.sum("fetch_waiting", nil); in != 0 || w != 0 {
		t.Errorf("after: %v in flight, %v waiting; want 0 and 0", in, w)
	}
	if n := f.sum("fetch_records_total", map[string]string{"ok": "true", "kind": ""}); n != 26 {
		t.Errorf("%v ok records, want 26", n)
	}
	if n := f.sum("fetch_attempts_total", map[string]string{"outcome": "success", "pool": metrics.DirectPool}); n != 26 {
		t.Errorf("%v successful attempts, want 26", n)
	}
}

// TestLabelsBounded runs 500 URLs, each to a host of its own, through
// 1,000 sessions of a proxy whose user name holds the session and whose
// password is a secret: the series are a handful, and no label holds a
// host, a user name, a password or, but for the 5 busiest, a proxy.
func TestLabelsBounded(t *testing.T) {
	const hosts, sessions, busiest = 500, 1000, 5
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	dir := t.TempDir()
	list := filepath.Join(dir, "proxies.txt")
	line := strings.Replace(px.URL, "://", "://user-{session}:pw-Zq9-secret@", 1) + fmt.Sprintf(" sessions=%d pool=gw\n", sessions)
	if err := os.WriteFile(list, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	ps, err := proxies.Load([]string{list}, nil, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{Proxies: ps, Busiest: busiest})
	cfg := fetch.DefaultConfig()
	cfg.Proxies, cfg.Observer = ps, m
	cfg.Retries = 0
	cfg.HostMaxFailures = 0
	cfg.Concurrency = 32
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	m.Watch(e)
	var urls strings.Builder
	for i := range hosts { // 127.0.x.y port 1: nothing listens; the proxy is refused at once
		fmt.Fprintf(&urls, "http://127.0.%d.%d:1/\n", 1+i/250, 1+i%250)
	}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(urls.String())}}, results.NewJSONLWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	f := parse(t, strings.NewReader(body))
	series, proxyLabels := 0, map[string]bool{}
	for name, mf := range f {
		for _, s := range mf.GetMetric() {
			series++
			for k, v := range labels(s) {
				if k == "proxy" {
					proxyLabels[v] = true
				} else if strings.Contains(v, "127.") {
					t.Errorf("%s: label %s=%q holds an address", name, k, v)
				}
				if strings.Contains(v, "user") || strings.Contains(v, "Zq9") {
					t.Errorf("%s: label %s=%q", name, k, v)
				}
			}
		}
	}
	if strings.Contains(body, "Zq9") || strings.Contains(body, "user-") {
		t.Errorf("the scrape shows a credential")
	}
	// fetch_phase_seconds: 8 phases; fetch_proxies: 4; gauges: 2; the
	// rest: a few outcomes, kinds and phases.
	if series > 40 {
		t.Errorf("%d series, want at most 40:\n%s", series, body)
	}
	if len(proxyLabels) > busiest+1 || !proxyLabels["other"] || len(proxyLabels) < 2 {
		t.Errorf("proxy labels %v: want at most %d proxies and other", proxyLabels, busiest)
	}
	if got := f.sum("fetch_records_total", nil); got != hosts || int(got) != rep.Jobs {
		t.Errorf("%v records, report %d jobs; want %d", got, rep.Jobs, hosts)
	}
	if got, want := f.sum("fetch_proxy_attempts_total", nil), f.sum("fetch_attempts_total", nil); got != want || got < hosts {
		t.Errorf("fetch_proxy_attempts_total adds up to %v, fetch_attempts_total to %v; want equal, at least %d", got, want, hosts)
	}
	if got := f.sum("fetch_proxies", map[string]string{"pool": "gw"}); got != sessions {
		t.Errorf("fetch_proxies{pool=gw} adds up to %v, want %d", got, sessions)
	}
}

// TestBusiestStayListed: the listed proxies are the busiest at the scrape
// that listed them, and stay listed when others overtake them.
func TestBusiestStayListed(t *testing.T) {
	list := []proxies.Proxy{{ID: "p0"}, {ID: "p1"}, {ID: "p2"}}
	m := metrics.New(metrics.Options{Proxies: list, Busiest: 1})
	ok := fetch.AttemptEvent{Outcome: limits.Success, OK: true}
	attempts := func(p, n int) {
		for range n {
			ev := ok
			ev.Proxy = p
			m.Attempt(ev)
		}
	}
	proxyCounts := func() map[string]float64 {
		got := map[string]float64{}
		for _, s := range scrapeHandler(t, m)["fetch_proxy_attempts_total"].GetMetric() {
			got[labels(s)["proxy"]] += value(s)
		}
		return got
	}
	attempts(1, 3)
	attempts(2, 1)
	if got := proxyCounts(); len(got) != 2 || got["p1"] != 3 || got["other"] != 1 {
		t.Errorf("first scrape: %v, want p1 3 and other 1", got)
	}
	attempts(2, 10)
	attempts(0, 1)
	if got := proxyCounts(); len(got) != 2 || got["p1"] != 3 || got["other"] != 12 {
		t.Errorf("second scrape: %v, want p1 3 and other 12", got)
	}
}

// BenchmarkAttempt is what telling the metrics of an attempt costs the
// engine: its counter, its three phases in the histogram, from every
// core at once.
func BenchmarkAttempt(b *testing.B) {
	m := metrics.New(metrics.Options{Proxies: []proxies.Proxy{{ID: "a", Pool: "p"}}})
	ev := fetch.AttemptEvent{Outcome: limits.Success, OK: true}
	for _, i := range []int{results.IndexQueue, results.IndexConnect, results.IndexBody} {
		ev.Phases.SetAt(i, 1)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Attempt(ev)
		}
	})
}
