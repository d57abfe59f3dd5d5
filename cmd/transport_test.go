package cmd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
)

// transports are the values of --transport that the tests of the request
// path run on: fast, the default (fetch's own HTTP/1.1 client for plain
// http:// requests), and std (net/http for every request), the reference
// the fast path is held to. Each such test makes the same assertions on
// both; where both runs fetch the same URLs from the same servers, their
// records are compared too (sameRecords).
var transports = []string{"fast", "std"}

// timeless is r without what may differ between two runs of the same URL
// list on the same servers: the timings (elapsed_ms and phases, of the
// record and of each try), and the directories of its input and saved body
// (each run writes its own).
func timeless(r results.Record) results.Record {
	r.ElapsedMS, r.Phases = 0, results.PhaseTimes{}
	r.Tries = slices.Clone(r.Tries)
	for i := range r.Tries {
		r.Tries[i].ElapsedMS, r.Tries[i].Phases = 0, results.PhaseTimes{}
	}
	r.Input = filepath.Base(r.Input)
	if r.File != "" {
		r.File = filepath.Base(r.File)
	}
	return r
}

// routes says whether sameRecords compares the way each URL went.
type routes bool

const (
	sameRoute routes = false // one way out: each URL went the same way on both runs
	// anyRoute: several proxies, so which one served a URL (proxy, pool,
	// remote_addr, and those of each try) is the scheduler's choice, not
	// the transport's, and is not compared.
	anyRoute routes = true
)

// sameRecords fails t unless the records of a run on the fast transport and
// those of the same run on std are the same, field by field, apart from
// what timeless drops (and the route, with anyRoute). Records are matched
// by input, line and URL, as their order is the order in which URLs
// finished.
func sameRecords(t testing.TB, fast, std []results.Record, how routes) {
	t.Helper()
	sorted := func(recs []results.Record) []results.Record {
		out := make([]results.Record, len(recs))
		for i, r := range recs {
			r = timeless(r)
			if how == anyRoute {
				r.Proxy, r.Pool, r.RemoteAddr = "", "", ""
				for j := range r.Tries {
					r.Tries[j].Proxy, r.Tries[j].Pool = "", ""
				}
			}
			out[i] = r
		}
		slices.SortFunc(out, func(a, b results.Record) int {
			return cmp.Or(cmp.Compare(a.Input, b.Input), cmp.Compare(a.Line, b.Line), cmp.Compare(a.URL, b.URL))
		})
		return out
	}
	f, s := sorted(fast), sorted(std)
	if len(f) != len(s) {
		t.Errorf("%d records on fast, %d on std", len(f), len(s))
		return
	}
	for i := range f {
		if f[i].Input != s[i].Input || f[i].Line != s[i].Line || f[i].URL != s[i].URL {
			t.Errorf("record %d: %s:%d %s on fast, %s:%d %s on std", i, f[i].Input, f[i].Line, f[i].URL, s[i].Input, s[i].Line, s[i].URL)
			continue
		}
		for _, d := range fieldDiffs(t, f[i], s[i]) {
			t.Errorf("%s line %d (%s): %s", f[i].Input, f[i].Line, f[i].URL, d)
		}
	}
}

// fieldDiffs compares the JSON fields of two records and describes each
// one that differs: "field: fast VALUE, std VALUE".
func fieldDiffs(t testing.TB, fast, std results.Record) []string {
	t.Helper()
	fields := func(r results.Record) map[string]json.RawMessage {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]json.RawMessage{}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	f, s := fields(fast), fields(std)
	var names []string
	for k := range f {
		names = append(names, k)
	}
	for k := range s {
		if _, ok := f[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var diffs []string
	for _, k := range names {
		if !bytes.Equal(f[k], s[k]) {
			diffs = append(diffs, fmt.Sprintf("%s: fast %s, std %s", k, orNone(f[k]), orNone(s[k])))
		}
	}
	return diffs
}

func orNone(b json.RawMessage) string {
	if b == nil {
		return "(none)"
	}
	return string(b)
}

// TestSameRecords: sameRecords finds a field that differs, and nothing in
// records that differ only in timings, directories and order.
func TestSameRecords(t *testing.T) {
	rec := func(line, attempts int, ms float64, input string) results.Record {
		r := results.Record{URL: fmt.Sprint("http://h/", line), Input: input, Line: line, OK: true, Status: 200,
			Attempts: attempts, ElapsedMS: ms, Tries: []results.Try{{Status: 200, ElapsedMS: ms}}}
		r.Phases.Set(results.PhaseHeaders, ms)
		return r
	}
	fast := []results.Record{rec(1, 1, 3, "/a/urls.txt"), rec(2, 1, 5, "/a/urls.txt")}
	same := []results.Record{rec(2, 1, 7, "/b/urls.txt"), rec(1, 1, 9, "/b/urls.txt")}
	var got errorsOf
	sameRecords(&got, fast, same, sameRoute)
	if len(got.errs) != 0 {
		t.Errorf("records the same but for timings, directories and order: %q", got.errs)
	}
	other := []results.Record{rec(1, 1, 3, "/a/urls.txt"), rec(2, 2, 5, "/a/urls.txt")}
	other[0].Proxy = "http://127.0.0.2:8080"
	got = errorsOf{}
	sameRecords(&got, fast, other, sameRoute)
	if len(got.errs) != 2 || !strings.Contains(got.errs[0], "proxy: fast (none), std") || !strings.Contains(got.errs[1], "attempts: fast 1, std 2") {
		t.Errorf("records that differ in proxy and attempts: %q", got.errs)
	}
	got = errorsOf{}
	sameRecords(&got, fast, other, anyRoute)
	if len(got.errs) != 1 {
		t.Errorf("records that differ in proxy and attempts, any route: %q", got.errs)
	}
}

// errorsOf is a testing.TB that keeps what Errorf says.
type errorsOf struct {
	testing.TB
	errs []string
}

func (e *errorsOf) Helper() {}
func (e *errorsOf) Errorf(format string, args ...any) {
	e.errs = append(e.errs, fmt.Sprintf(format, args...))
}

// startTarget starts a fetchtest target, closed when t ends.
func startTarget(t *testing.T, opts fetchtest.TargetOptions) *fetchtest.Target {
	t.Helper()
	target, err := fetchtest.StartTarget(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	return target
}

// TestTransports_sameRecords fetches one list of URLs through every kind
// of route, direct and through real proxies (fetchtest's HTTP and HTTPS
// proxies, microsocks, tinyproxy and squid, with credentials where they
// take them), on both transports: each run gives the records expected of
// each URL, and the two runs of a route give the same records but for
// timings. The list covers what the fast path does itself for plain
// http:// URLs (bodies with a length and chunked, statuses, retries, a
// redirect, --max-body, the request as the target sees it: /echo, whose
// bytes would differ if the transports sent different headers), an https
// target (net/http on both, through CONNECT or SOCKS) and a target that
// refuses connections.
func TestTransports_sameRecords(t *testing.T) {
	target := startTarget(t, fetchtest.TargetOptions{})
	tlsTarget := startTarget(t, fetchtest.TargetOptions{TLS: true})
	const user, pass = "alice", "s3cret"
	httpPx, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpPx.Close)
	httpsPx, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{TLS: true, User: user, Password: pass, BindIP: fetchtest.LoopbackIP(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(httpsPx.Close)
	squid, err := fetchtest.StartSquid(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(squid.Close)
	dir := t.TempDir()
	cacert := writeFile(t, dir, "ca.pem", string(httpsPx.CertPEM)+string(tlsTarget.CertPEM))
	closed := closedAddr(t)

	// The list: a path and what its record must say on every route.
	type want struct {
		ok       bool
		status   int
		bytes    int64 // -1: any
		attempts int
		kind     string // of the error, when not ok
		anything bool   // what the route makes of it: the same on both transports
	}
	lines := []struct {
		url  func(prefix string) string
		want want
	}{
		{func(p string) string { return target.URL + p + "/a?size=10" }, want{true, 200, 10, 1, "", false}},
		{func(p string) string { return target.URL + p + "/b?size=20000&chunks=4&drip=5ms" }, want{true, 200, 20000, 1, "", false}},
		{func(p string) string { return target.URL + p + "/c?status=404&size=7" }, want{true, 404, 7, 1, "", false}},
		{func(p string) string { return target.URL + p + "/d?fail=1&size=30" }, want{true, 200, 30, 2, "", false}},
		{func(p string) string { return target.URL + p + "/e?status=503" }, want{false, 503, -1, 2, results.KindStatus, false}},
		{func(p string) string {
			return target.URL + "/redirect?route=" + url.QueryEscape(p) + "&to=" + url.QueryEscape(target.URL+p+"/f?size=5")
		}, want{true, 200, 5, 1, "", false}},
		{func(p string) string { return target.URL + p + "/g?size=200000" }, want{false, 200, -1, 1, results.KindTooLarge, false}},
		{func(p string) string { return target.URL + "/echo?route=" + url.QueryEscape(p) }, want{true, 200, -1, 1, "", false}},
		{func(p string) string { return tlsTarget.URL + p + "/s?size=100" }, want{true, 200, 100, 1, "", false}},
		// Refused: direct, a failed connect; a proxy answers 502 (fetchtest),
		// 500 (tinyproxy), 503 (squid), or refuses (microsocks).
		{func(p string) string { return "http://" + closed + p + "/x" }, want{anything: true}},
	}

	for _, route := range []struct {
		name  string
		proxy func(t *testing.T) string // "" for direct
	}{
		{"direct", func(*testing.T) string { return "" }},
		{"http proxy", func(*testing.T) string { return withUser(httpPx.URL, user, pass) }},
		{"https proxy", func(*testing.T) string { return withUser(httpsPx.URL, user, pass) }},
		{"socks5 microsocks", func(t *testing.T) string { return withUser(microsocks(t, user, pass).URL, user, pass) }},
		{"tinyproxy", func(t *testing.T) string { return withUser(tinyproxy(t, user, pass).URL, user, pass) }},
		{"squid", func(*testing.T) string { return squid.URL }},
	} {
		t.Run(route.name, func(t *testing.T) {
			proxy := route.proxy(t)
			prefix := "/" + strings.ReplaceAll(route.name, " ", "-")
			var list strings.Builder
			for _, l := range lines {
				list.WriteString(l.url(prefix) + "\n")
			}
			urls := writeFile(t, t.TempDir(), "urls.txt", list.String())
			var recs [2][]results.Record
			for i, tp := range transports {
				t.Run(tp, func(t *testing.T) {
					target.ResetStats() // fail=1 fails the first request again
					out := filepath.Join(t.TempDir(), "out.jsonl")
					args := []string{"-q", "--transport", tp, "--retries", "1", "--retry-backoff", "1ms",
						"--max-body", "100KB", "--cacert", cacert, "-o", out}
					if proxy != "" {
						args = append(args, "--proxy", proxy)
					}
					ios, _, _, stderr := Test()
					if code := Run(context.Background(), ios, append(args, urls)); code != ExitNotAllOK {
						t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitNotAllOK, stderr)
					}
					recs[i] = recordsOf(t, out)
					if len(recs[i]) != len(lines) {
						t.Fatalf("%d records, want %d", len(recs[i]), len(lines))
					}
					for _, r := range recs[i] {
						if r.Line < 1 || r.Line > len(lines) {
							t.Fatalf("record for line %d", r.Line)
						}
						w := lines[r.Line-1].want
						kind := ""
						if r.Error != nil {
							kind = r.Error.Kind
						}
						if (proxy != "") != (r.Proxy != "" && r.Proxy != "direct") {
							t.Errorf("line %d: proxy %q through %q", r.Line, r.Proxy, proxy)
						}
						if w.anything {
							continue
						}
						if r.OK != w.ok || w.status != 0 && r.Status != w.status || w.bytes >= 0 && r.Bytes != w.bytes ||
							w.attempts >= 0 && r.Attempts != w.attempts || w.kind != "" && kind != w.kind || r.OK != (r.Error == nil) {
							t.Errorf("line %d %s: ok %v status %d bytes %d attempts %d error %+v; want %+v",
								r.Line, r.URL, r.OK, r.Status, r.Bytes, r.Attempts, r.Error, w)
						}
					}
				})
			}
			if recs[0] != nil && recs[1] != nil {
				sameRecords(t, recs[0], recs[1], sameRoute)
			}
		})
	}
}
