package cmd

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestDistributed_processesShareLimits: three fetch processes, each with
// its shard of one list, share two proxies through one Redis. No proxy ever
// has more in flight than its --proxy-concurrency, although each process
// alone would allow -c 16; and the shards cover every line exactly once.
// On each transport, through the same Redis (a namespace each) and proxies;
// the records of the two are the same but for timings and routes.
func TestDistributed_processesShareLimits(t *testing.T) {
	rds := redistest.Start(t)
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	var pxs []*fetchtest.Proxy
	for i := range 2 {
		p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		pxs = append(pxs, p)
	}
	dir := t.TempDir()
	const n = 90
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "%s/d?i=%d&size=2048&chunks=4&drip=10ms\n", target.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", lines.String())
	var byTransport [2][]results.Record
	for i, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			for _, p := range pxs {
				p.ResetStats()
			}
			byTransport[i] = shareLimits(t, rds, pxs, urls, n, tp)
		})
	}
	if byTransport[0] != nil && byTransport[1] != nil {
		sameRecords(t, byTransport[0], byTransport[1], anyRoute)
	}
}

// shareLimits is a run of TestDistributed_processesShareLimits on
// transport tp, in its own namespace; it returns the records of the three
// processes, or nil when a check failed.
func shareLimits(t *testing.T, rds *redistest.Server, pxs []*fetchtest.Proxy, urls string, n int, tp string) []results.Record {
	dir := t.TempDir()
	const cap = 2
	var procs []*proc
	var outs []string
	for k := 1; k <= 3; k++ {
		out := filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k))
		outs = append(outs, out)
		procs = append(procs, startFetch(t, "", "--transport", tp, "-q", "-c", "16", "--proxy-concurrency", fmt.Sprint(cap),
			"--redis", rds.URL, "--namespace", "t1-"+tp, "--shard", fmt.Sprintf("%d/3", k), "--lease-ttl", "2s",
			"--proxy", pxs[0].URL, "--proxy", pxs[1].URL, "-o", out, urls))
	}
	for i, p := range procs {
		if code := p.wait(t, time.Minute); code != ExitOK {
			t.Fatalf("process %d: exit %d; stderr:\n%s", i+1, code, p.stderr.String())
		}
	}
	var all []results.Record
	for _, out := range outs {
		recs := recordsOf(t, out)
		if len(recs) == 0 || len(recs) == n {
			t.Errorf("%s holds %d records: a shard should hold some, not all, of %d", out, len(recs), n)
		}
		all = append(all, recs...)
	}
	if len(all) != n {
		t.Errorf("%d records across the shards, want %d", len(all), n)
	}
	oneOKPerLine(t, all, n)
	for i, p := range pxs {
		st := p.Stats()
		t.Logf("proxy %d: %d requests, at most %d in flight", i, st.Requests, st.MaxInFlight)
		if st.MaxInFlight > cap {
			t.Errorf("proxy %d had %d in flight at once across the processes, cap %d", i, st.MaxInFlight, cap)
		}
	}
	if t.Failed() {
		return nil
	}
	return all
}

// TestDistributed_usageErrors: Redis that cannot be reached at the start,
// and limits that differ from those live in the namespace, are usage
// errors (exit 2) that name the address or the difference, never a
// password.
func TestDistributed_usageErrors(t *testing.T) {
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", "http://127.0.0.1:1/\n")
	closed := closedAddr(t)
	for _, tt := range []struct {
		name      string
		args      []string
		want, not string
	}{
		{"unreachable", []string{"--redis", "redis://:hunter2@" + closed}, closed, "hunter2"},
		{"empty", []string{"--redis", ""}, "--redis is empty", ""},
		{"slash in password", []string{"--redis", "redis://user:hunter2/word@" + closed}, "percent-encoded", "hunter2"},
		{"tab in password", []string{"--redis", "redis://user:hun\tter2@" + closed}, "control character", "hun"},
		{"password in the query", []string{"--redis", "redis://" + closed + "?password=hunter2"}, closed, "hunter2"},
		{"mixed cluster", []string{"--redis", "redis://" + closed, "--redis", "unix:///tmp/x.sock"}, "Cluster", ""},
		{"bad shard", []string{"--shard", "4/3"}, "--shard", ""},
		{"bad namespace", []string{"--redis", "redis://" + closed, "--namespace", "a{b}"}, "--namespace", ""},
		{"namespace without redis", []string{"--namespace", "x"}, "needs --redis", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, stderr := Test()
			code := Run(context.Background(), ios, append(tt.args, urls))
			if code != ExitUsage {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr.String(), tt.want) || tt.not != "" && strings.Contains(stderr.String(), tt.not) {
				t.Errorf("stderr:\n%s", stderr)
			}
		})
	}

	t.Run("limits differ from the namespace's", func(t *testing.T) {
		rds := redistest.Start(t)
		target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer target.Close()
		slow := writeFile(t, dir, "slow.txt", target.URL+"/d?delay=3s\n")
		px := "http://" + closedAddr(t) // never reached: the first process holds its URL in the proxy's budget... or fails it
		first := startFetch(t, "", "-q", "--redis", rds.URL, "--proxy-concurrency", "2", "--pool-wait", "0", "--proxy", px, "-o", filepath.Join(dir, "a.jsonl"), slow)
		// Wait until the first process has set the namespace up.
		waitFor(t, 10*time.Second, "the first process's namespace in Redis", func() bool {
			v, _ := rds.Do("EXISTS", "{fetch}:limits")
			n, ok := v.(int64)
			return ok && n == 1
		}, func() { t.Logf("stderr of the first process:\n%s", first.stderr) })
		ios, _, _, stderr := Test()
		code := Run(context.Background(), ios, []string{"--redis", rds.URL, "--proxy-concurrency", "3", "--proxy", px, urls})
		if code != ExitUsage {
			t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
		}
		if !strings.Contains(stderr.String(), "concurrency") {
			t.Errorf("stderr does not name the difference:\n%s", stderr)
		}
	})
}

// TestShard_resume: --resume works per shard: a shard resumed from its own
// results takes nothing its last run finished, and no line of the other
// shard.
func TestShard_resume(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	urls := urlList(t, dir, srv.URL, 200)
	out := filepath.Join(dir, "shard1.jsonl")
	args := []string{"-q", "--shard", "1/2", "-o", out, urls}
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, args); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	first := recordsOf(t, out)
	if len(first) == 0 || len(first) >= 200 {
		t.Fatalf("shard 1/2 of 200 lines has %d records", len(first))
	}
	for _, r := range first {
		if got := (input.Shard{K: 1, N: 2}).Of(urls, r.Line, []byte(r.URL)); got != 1 {
			t.Errorf("line %d belongs to shard %d", r.Line, got)
		}
	}
	ios, _, _, stderr = Test()
	if code := Run(context.Background(), ios, append([]string{"--resume"}, args[1:]...)); code != ExitOK {
		t.Fatalf("resume: exit %d; stderr:\n%s", code, stderr)
	}
	if again := recordsOf(t, out); len(again) != len(first) {
		t.Errorf("resume added %d records to a finished shard", len(again)-len(first))
	}
	if want := fmt.Sprintf("skipped %d lines", len(first)); !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
}

func TestValidNamespace(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tt := range []struct {
		s    string
		want bool
	}{
		{"fetch", true},
		{"A-z_0.9:x", true},
		{long, true},
		{long + "a", false},
		{"", false},
		{"a{b}", false},
		{"a b", false},
		{"ä", false},
		{"a\n", false},
		{"a/b", false},
	} {
		if got := validNamespace(tt.s); got != tt.want {
			t.Errorf("validNamespace(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}
