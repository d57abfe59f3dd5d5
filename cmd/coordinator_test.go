package cmd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestDistributed_redisGoneStopsAndResumes: Redis shut down for good in
// the middle of a run. The run stops within --pool-wait and a few seconds
// (not after every URL's -t): exit 3, "stopped":"coordinator unreachable"
// in the report, one record per line taken. With Redis back, the same
// command with --resume takes again every line whose record was
// cancelled or coordinator, and every line ends with one ok record.
// Before, each waiting URL waited out its -t (here 2m) as coordinator,
// and --resume took none of them again. On each transport, the two at
// once (each its own Redis) through one proxy to one target.
func TestDistributed_redisGoneStopsAndResumes(t *testing.T) {
	target := startTarget(t, fetchtest.TargetOptions{})
	proxy, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			t.Parallel()
			redisGone(t, target, proxy, tp)
		})
	}
}

func redisGone(t *testing.T, target *fetchtest.Target, proxy *fetchtest.Proxy, tp string) {
	rds := redistest.Start(t)
	dir := t.TempDir()
	const n = 200
	var lines strings.Builder
	for i := range n {
		fmt.Fprintf(&lines, "%s/d?i=%d&size=512&chunks=2&drip=20ms\n", target.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", lines.String())
	out, rep := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	args := []string{"--transport", tp, "-q", "-c", "8", "--proxy-concurrency", "2", "--proxy", proxy.URL, "-t", "2m",
		"--redis", rds.URL, "--lease-ttl", "1s", "--pool-wait", "1s", "-o", out, "--report", rep, urls}
	p := startFetch(t, "", args...)
	// Wait for the first records: the run is under way.
	p.waitFor(t, 30*time.Second, "5 records", func() bool {
		b, _ := os.ReadFile(out)
		return strings.Count(string(b), "\n") >= 5
	})
	rds.Shutdown()
	down := time.Now()
	// --pool-wait 1s, the dispatcher's back-off (at most 3s) and the grace
	// of the work in flight: well within 20s, against -t 2m.
	if code := p.wait(t, 20*time.Second); code != ExitNoProxy {
		t.Fatalf("exit %d, want 3; stderr:\n%s", code, p.stderr.String())
	}
	t.Logf("stopped %s after Redis went", time.Since(down).Round(time.Millisecond))
	if !strings.Contains(p.stderr.String(), "coordinator unreachable") || !strings.Contains(p.stderr.String(), "--resume") {
		t.Errorf("stderr does not name the cause and the way on:\n%s", p.stderr.String())
	}
	var stopped report.Report
	if b, err := os.ReadFile(rep); err != nil || json.Unmarshal(b, &stopped) != nil {
		t.Fatalf("report: %v", err)
	}
	if stopped.Stopped != fetch.StoppedCoordinator {
		t.Errorf("report stopped %q, want %q", stopped.Stopped, fetch.StoppedCoordinator)
	}
	first := recordsOf(t, out)
	perLine := map[int]int{}
	for _, r := range first {
		perLine[r.Line]++
	}
	for line, c := range perLine {
		if c != 1 {
			t.Errorf("line %d has %d records from the stopped run", line, c)
		}
	}
	if len(first) >= n {
		t.Fatalf("the stopped run wrote %d records for %d lines: it did not stop", len(first), n)
	}
	t.Logf("the stopped run: %d records, by kind %v", len(first), stopped.ByKind)

	rds.Restart()
	p = startFetch(t, "", append([]string{"--resume"}, args...)...)
	if code := p.wait(t, time.Minute); code != ExitOK {
		t.Fatalf("resume: exit %d; stderr:\n%s", code, p.stderr.String())
	}
	last := map[int]results.Record{}
	oks := map[int]int{}
	for _, r := range recordsOf(t, out) {
		last[r.Line] = r
		if r.OK {
			oks[r.Line]++
		}
	}
	for line := 1; line <= n; line++ {
		if r, ok := last[line]; !ok || !r.OK || oks[line] != 1 {
			t.Errorf("line %d: last record %+v, %d ok records; want one, ok", line, r.Error, oks[line])
		}
	}
}
