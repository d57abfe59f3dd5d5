package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
)

// The proxies of these tests are real: tinyproxy with Basic
// authentication, microsocks with a user and password, fetchtest's HTTP
// proxy, and a closed port.

func tinyproxy(t *testing.T, user, pass string) *fetchtest.Proxy {
	t.Helper()
	p, err := fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// authProxy is fetchtest's HTTP proxy with Basic authentication: 407 to a
// request or a CONNECT without the right credentials.
func authProxy(t *testing.T, user, pass string) *fetchtest.Proxy {
	t.Helper()
	p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func microsocks(t *testing.T, user, pass string) *fetchtest.Proxy {
	t.Helper()
	p, err := fetchtest.StartSOCKS5(fetchtest.ProxyOptions{User: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// withUser is proxy URL raw with user and password in it.
func withUser(raw, user, pass string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	return scheme + "://" + user + ":" + pass + "@" + rest
}

// closedAddr is a loopback address that refuses connections.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// urlList writes n lines of base+"/i" to a file and returns its name.
func urlList(t *testing.T, dir, base string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s/%d\n", base, i)
	}
	return writeFile(t, dir, "urls.txt", b.String())
}

// recordsOf reads a results file.
func recordsOf(t *testing.T, name string) []results.Record {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return readRecords(t, b)
}

// TestPool_rejectedStops: a pool whose only proxy has a wrong password
// stops within 2 s however long the list, exit 3, with one warning that
// names the proxy (never the password), the cause and what to do. For
// https targets (a CONNECT, or SOCKS, refused) and plain http ones (the
// request itself refused: the fast transport's own client sends it through
// an http proxy), on each transport.
func TestPool_rejectedStops(t *testing.T) {
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer tlsTarget.Close()
	plainTarget := okServer(t)
	for _, tt := range []struct {
		name  string
		proxy func(t *testing.T) string
		// httpsOnly: tinyproxy answers a plain request with a wrong
		// password 401 with WWW-Authenticate, as a target would, not 407:
		// on both transports fetch records it as the target's answer.
		httpsOnly bool
	}{
		{"tinyproxy 401 to CONNECT", func(t *testing.T) string { return withUser(tinyproxy(t, "alice", "s3cret").URL, "alice", "wrong-pw") }, true},
		{"tinyproxy 407", func(t *testing.T) string { return tinyproxy(t, "alice", "s3cret").URL }, false},
		{"fetchtest proxy 407, wrong password", func(t *testing.T) string {
			return withUser(authProxy(t, "alice", "s3cret").URL, "alice", "wrong-pw")
		}, false},
		{"microsocks", func(t *testing.T) string { return withUser(microsocks(t, "alice", "s3cret").URL, "alice", "wrong-pw") }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			proxy := tt.proxy(t) // one for all its runs
			for _, target := range []*httptest.Server{tlsTarget, plainTarget} {
				if tt.httpsOnly && target == plainTarget {
					continue
				}
				for _, tp := range transports {
					name := strings.SplitN(target.URL, ":", 2)[0] + "/" + tp
					t.Run(name, func(t *testing.T) { testRejectedStops(t, target.URL, proxy, tp) })
				}
			}
		})
	}
}

// testRejectedStops is a run of TestPool_rejectedStops: 10,000 URLs of
// target through proxy, on transport tp.
func testRejectedStops(t *testing.T, target, proxy, tp string) {
	dir := t.TempDir()
	urls := urlList(t, dir, target, 10_000)
	out, reportPath := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	start := time.Now()
	code := Run(context.Background(), ios, []string{"--transport", tp, "-k", "--proxy", proxy, "-o", out, "--report", reportPath, urls})
	took := time.Since(start)
	if code != ExitNoProxy {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitNoProxy, stderr)
	}
	if took > 2*time.Second {
		t.Errorf("took %s, want under 2s", took)
	}
	msg := stderr.String()
	if strings.Contains(msg, "wrong-pw") || strings.Contains(msg, "s3cret") || strings.Contains(msg, "alice") {
		t.Errorf("stderr shows a credential:\n%s", msg)
	}
	if n := strings.Count(msg, "rejected its credentials"); n != 1 {
		t.Errorf("%d rejection warnings, want 1:\n%s", n, msg)
	}
	for _, want := range []string{"no usable proxy: 1 of 1 rejected", "--resume", "stopped early: no usable proxy"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr does not say %q:\n%s", want, msg)
		}
	}
	recs := recordsOf(t, out)
	seen := map[int]bool{}
	for _, r := range recs {
		if seen[r.Line] {
			t.Fatalf("two records for line %d", r.Line)
		}
		seen[r.Line] = true
		if r.OK || r.Error == nil || r.Error.Kind != results.KindCancelled || r.Error.Phase != results.PhaseQueue || !strings.Contains(r.Error.Message, "no usable proxy") {
			t.Fatalf("record %+v: want cancelled in the queue for no usable proxy", r)
		}
	}
	var rep report.Report
	b, _ := os.ReadFile(reportPath)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Stopped != fetch.StoppedNoProxy || rep.Jobs != len(recs) {
		t.Errorf("report (%v): %s", err, b)
	}
	for id, p := range rep.Proxies {
		if p.State != "rejected" {
			t.Errorf("proxy %s state %q, want rejected", id, p.State)
		}
	}
}

// TestPool_deadThenResume: a pool whose only proxy is down stops once it
// has been unusable for --pool-wait; with the list mended, --resume
// finishes the run, every line with exactly one final record. On each
// transport, the two at once: most of a run is waiting.
func TestPool_deadThenResume(t *testing.T) {
	target := okServer(t)
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			t.Parallel()
			testDeadThenResume(t, target.URL, tp)
		})
	}
}

func testDeadThenResume(t *testing.T, target, tp string) {
	dir := t.TempDir()
	const n = 300
	urls := urlList(t, dir, target, n)
	out := filepath.Join(dir, "out.jsonl")
	dead := writeFile(t, dir, "dead.txt", "http://"+closedAddr(t)+"\n")
	const cooldown, wait = time.Second, 3 * time.Second
	args := []string{"--transport", tp, "--proxy-cooldown", cooldown.String(), "--pool-wait", wait.String(), "-o", out}
	ios, _, _, stderr := Test()
	start := time.Now()
	code := Run(context.Background(), ios, append(append([]string{"-p", dead}, args...), urls))
	if took := time.Since(start); took > cooldown+wait+2*time.Second {
		t.Errorf("stopped after %s, want within %s", took, cooldown+wait+2*time.Second)
	}
	if code != ExitNoProxy {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitNoProxy, stderr)
	}
	if !strings.Contains(stderr.String(), "1 of 1 benched for 3s; last failure: ") || !strings.Contains(stderr.String(), "connection refused") {
		t.Errorf("stderr does not give the cause:\n%s", stderr)
	}
	first := recordsOf(t, out)
	if len(first) == 0 || len(first) >= n {
		t.Fatalf("%d records after the stop, want some and not all of %d", len(first), n)
	}

	// Mend the list, and go on.
	good := tinyproxy(t, "", "")
	if err := os.WriteFile(dead, []byte(good.URL+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ios, _, _, stderr = Test()
	if code := Run(context.Background(), ios, append(append([]string{"-p", dead, "--resume"}, args...), urls)); code != ExitOK {
		t.Fatalf("resume: exit %d; stderr:\n%s", code, stderr)
	}
	oneOKPerLine(t, recordsOf(t, out), n)
}

// oneOKPerLine checks that lines 1..n each have exactly one final record
// (one that is not cancelled), and that it is ok.
func oneOKPerLine(t *testing.T, recs []results.Record, n int) {
	t.Helper()
	final := map[int]int{}
	for _, r := range recs {
		if r.Error == nil || r.Error.Kind != results.KindCancelled {
			final[r.Line]++
			if !r.OK {
				t.Errorf("line %d: final record not ok: %+v", r.Line, r.Error)
			}
		}
	}
	for line := 1; line <= n; line++ {
		if final[line] != 1 {
			t.Errorf("line %d has %d final records, want 1", line, final[line])
		}
	}
}

// TestPool_oneRejected: a mixed pool with one proxy that refuses its
// credentials runs through: that proxy leaves after its first answer, the
// other carries the list, exit 0. Both are identities of one tinyproxy:
// for an https target, one with a wrong password (its CONNECT answered
// 401); for a plain http one, one without credentials (its requests
// answered 407: tinyproxy answers a plain request with a wrong password as
// a target would, see TestPool_rejectedStops). On each transport.
func TestPool_oneRejected(t *testing.T) {
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer tlsTarget.Close()
	plainTarget := okServer(t)
	px := tinyproxy(t, "alice", "s3cret")
	for _, route := range []struct {
		target *httptest.Server
		wrong  string
		n      int // URLs: fewer plain ones, as tinyproxy closes each connection after its answer
	}{
		{tlsTarget, withUser(px.URL, "alice", "wrong-pw"), 2000},
		{plainTarget, px.URL, 500},
	} {
		for _, tp := range transports {
			name := strings.SplitN(route.target.URL, ":", 2)[0] + "/" + tp
			t.Run(name, func(t *testing.T) {
				testOneRejected(t, route.target.URL, withUser(px.URL, "alice", "s3cret"), route.wrong, tp, route.n)
			})
		}
	}
}

func testOneRejected(t *testing.T, target, right, wrong, tp string, n int) {
	dir := t.TempDir()
	urls := urlList(t, dir, target, n)
	reportPath := filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	code := Run(context.Background(), ios, []string{"--transport", tp, "-k", "--proxy-concurrency", "8",
		"--proxy", right, "--proxy", wrong, "-o", filepath.Join(dir, "out.jsonl"), "--report", reportPath, urls})
	if code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if n := strings.Count(stderr.String(), "rejected its credentials"); n != 1 {
		t.Errorf("%d rejection warnings, want 1:\n%s", n, stderr)
	}
	var rep report.Report
	b, _ := os.ReadFile(reportPath)
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	rejected := 0
	for id, p := range rep.Proxies {
		if p.State == "rejected" {
			rejected++
			// Its attempts in flight when the first answer came, at most.
			if p.Attempts > 8 || p.OK != 0 {
				t.Errorf("rejected proxy %s: %d attempts, %d ok", id, p.Attempts, p.OK)
			}
		}
	}
	if rejected != 1 || rep.OK != n {
		t.Errorf("%d rejected proxies, %d ok records; report %s", rejected, rep.OK, b)
	}
}

// TestCheck: fetch check gives the right row for a good, a closed, a
// wrong-password and a slow proxy, and the address the target saw.
func TestCheck(t *testing.T) {
	ipSite := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		json.NewEncoder(w).Encode(map[string]string{"origin": host})
	}))
	defer ipSite.Close()
	good := tinyproxy(t, "alice", "s3cret")
	slow, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(2), Latency: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	closed := "http://" + closedAddr(t)
	wrong := withUser(microsocks(t, "bob", "s3cret").URL, "bob", "wrong-pw")
	dir := t.TempDir()
	list := writeFile(t, dir, "proxies.txt", strings.Join([]string{withUser(good.URL, "alice", "s3cret"), closed, wrong, slow.URL}, "\n")+"\n")
	out := filepath.Join(dir, "check.jsonl")

	ios, _, stdout, stderr := Test()
	code := Run(context.Background(), ios, []string{"check", "-p", list, "--url", ipSite.URL + "/ip", "--count", "2", "-o", out})
	if code != ExitNotAllOK {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitNotAllOK, stderr)
	}
	var rows []CheckResult
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r CheckResult
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		rows = append(rows, r)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4:\n%s", len(rows), b)
	}
	want := []struct {
		ok           bool
		phase, kind  string
		exitIP       string
		slowerThanMS float64 // headers phase, for the slow proxy
	}{
		{ok: true, exitIP: "127.0.0.1"},
		{phase: "connect", kind: "refused"},
		{phase: "proxy", kind: "proxy"},
		{ok: true, exitIP: fetchtest.LoopbackIP(2), slowerThanMS: 250},
	}
	for i, w := range want {
		r := rows[i]
		// The wrong-password proxy is rejected at its first failure, so
		// its second URL may be cancelled before an attempt: 1 or 2.
		minAttempts := 2
		if w.kind == "proxy" {
			minAttempts = 1
		}
		if r.OK != w.ok || r.Attempts < minAttempts || r.Attempts > 2 {
			t.Errorf("row %d (%s): ok=%v attempts=%d, want ok=%v attempts %d..2", i, r.Proxy, r.OK, r.Attempts, w.ok, minAttempts)
		}
		if !w.ok && (r.Error == nil || r.Error.Phase != w.phase || r.Error.Kind != w.kind) {
			t.Errorf("row %d (%s): error %+v, want %s/%s", i, r.Proxy, r.Error, w.phase, w.kind)
		}
		if r.ExitIP != w.exitIP {
			t.Errorf("row %d (%s): exit ip %q, want %q", i, r.Proxy, r.ExitIP, w.exitIP)
		}
		if headers, _ := r.Phases.Get("headers"); w.slowerThanMS > 0 && headers < w.slowerThanMS {
			t.Errorf("row %d (%s): headers %.1fms, want over %.0fms", i, r.Proxy, headers, w.slowerThanMS)
		}
	}
	table := stdout.String()
	for _, s := range []string{"usable", "connect/refused", "proxy/proxy", fetchtest.LoopbackIP(2), "2 of 4 proxies usable"} {
		if !strings.Contains(table, s) {
			t.Errorf("table does not show %q:\n%s", s, table)
		}
	}
	for _, secret := range []string{"s3cret", "wrong-pw", "alice", "bob"} {
		if strings.Contains(table+stderr.String()+string(b), secret) {
			t.Errorf("output shows %q", secret)
		}
	}

	// Every proxy usable: exit 0.
	ios, _, _, stderr = Test()
	if code := Run(context.Background(), ios, []string{"check", "--proxy", slow.URL, "--url", ipSite.URL + "/ip"}); code != ExitOK {
		t.Errorf("one good proxy: exit %d; stderr:\n%s", code, stderr)
	}
	// A proxy that refuses its credentials, tried one request at a time:
	// its first refusal takes it out, the rest are cancelled, and the row
	// shows the refusal with exit 1, not the run stopping for want of a
	// usable proxy (exit 3).
	ios, _, _, stderr = Test()
	out = filepath.Join(dir, "wrong.jsonl")
	code = Run(context.Background(), ios, []string{"check", "--proxy", wrong, "--proxy-concurrency", "1", "--url", ipSite.URL + "/ip", "--count", "3", "-o", out})
	if code != ExitNotAllOK {
		t.Fatalf("wrong password alone: exit %d, want %d; stderr:\n%s", code, ExitNotAllOK, stderr)
	}
	if b, err = os.ReadFile(out); err != nil {
		t.Fatal(err)
	}
	var row CheckResult
	if err := json.Unmarshal(b, &row); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if row.OK || row.Attempts != 1 || row.Error == nil || row.Error.Phase != "proxy" || row.Error.Kind != "proxy" {
		t.Errorf("wrong password alone: row %s, want 1 attempt failed proxy/proxy", b)
	}

	// Usage errors: exit 2.
	for _, args := range [][]string{{"check", "--url", ipSite.URL}, {"check", "--proxy", slow.URL}, {"check", "--proxy", slow.URL, "--url", ipSite.URL, "--count", "0"}} {
		ios, _, _, stderr = Test()
		if code := Run(context.Background(), ios, args); code != ExitUsage {
			t.Errorf("%q: exit %d, want 2; stderr:\n%s", args, code, stderr)
		}
	}
}
