package cmd

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestDistributed_hostBannedByEveryProxy: two processes share one proxy
// through Redis; one host bans it (--ban-status 403), the other does not.
// Every URL of the banning host fails as banned, within seconds rather
// than its 1m deadline, whichever process saw the ban; every URL of the
// other host is fetched; and --resume takes the banned lines (phase queue)
// again.
func TestDistributed_hostBannedByEveryProxy(t *testing.T) {
	rds := redistest.Start(t)
	banning, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer banning.Close()
	fine, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer fine.Close()
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	dir := t.TempDir()
	const n = 40
	var lines strings.Builder
	for i := range n / 2 {
		fmt.Fprintf(&lines, "%s/b%d?status=403\n%s/f%d\n", banning.URL, i, fine.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", lines.String())
	args := func(k int, more ...string) []string {
		return append([]string{"-q", "--redis", rds.URL, "--namespace", "ban", "--shard", fmt.Sprintf("%d/2", k),
			"--lease-ttl", "1s", "--proxy", px.URL, "--ban-status", "403", "-t", "1m", "-o", filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k))}, append(more, urls)...)
	}
	fetchBinary(t) // built before the clock starts
	t0 := time.Now()
	var procs []*proc
	for k := 1; k <= 2; k++ {
		procs = append(procs, startFetch(t, "", args(k)...))
	}
	for i, p := range procs {
		if code := p.wait(t, time.Minute); code != ExitNotAllOK {
			t.Fatalf("process %d: exit %d, want 1; stderr:\n%s", i+1, code, p.stderr.String())
		}
	}
	// Tolerance: the URLs are decided by the first answers, in milliseconds;
	// 10s is the slack of a loaded 2-core machine, far below the 1m deadline.
	took := time.Since(t0)
	if took > 10*time.Second {
		t.Errorf("took %s, want under 10s", took)
	}
	var all []results.Record
	for k := 1; k <= 2; k++ {
		all = append(all, recordsOf(t, filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k)))...)
	}
	if len(all) != n {
		t.Fatalf("%d records, want %d", len(all), n)
	}
	queued := 0
	for _, r := range all {
		switch {
		case strings.HasPrefix(r.URL, fine.URL):
			if !r.OK {
				t.Errorf("%s: %+v, want ok", r.URL, r.Error)
			}
		case r.Error == nil || r.Error.Kind != results.KindBanned:
			t.Errorf("%s: %+v, want banned", r.URL, r.Error)
		case r.Error.Phase == results.PhaseQueue:
			queued++
			if !strings.Contains(r.Error.Message, banning.Addr) {
				t.Errorf("%s: message %q does not name the host", r.URL, r.Error.Message)
			}
		}
	}
	if queued == 0 {
		t.Fatal("no URL failed in phase queue")
	}
	t.Logf("2 processes: %d URLs in %s, %d banned in phase queue", n, took.Round(time.Millisecond), queued)

	// --resume takes the lines failed in phase queue again (they fail so
	// again: the host still bans the proxy).
	var again int
	for k := 1; k <= 2; k++ {
		p := startFetch(t, "", args(k, "--resume")...)
		if code := p.wait(t, time.Minute); code != ExitNotAllOK {
			t.Fatalf("resumed process %d: exit %d, want 1; stderr:\n%s", k, code, p.stderr.String())
		}
		again += len(recordsOf(t, filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k))))
	}
	if again-n != queued {
		t.Errorf("--resume added %d records, want %d (the lines banned in phase queue)", again-n, queued)
	}
}
