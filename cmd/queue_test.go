package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestQueue_usageErrors: the queue commands' usage errors exit 2 before
// any work, naming what is wrong, never a password.
func TestQueue_usageErrors(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	urls := writeFile(t, dir, "urls.txt", "http://127.0.0.1:1/\n")
	closed := closedAddr(t)
	rds := "redis://" + closed
	for _, tt := range []struct {
		name      string
		args      []string
		want, not string
	}{
		{"work without redis", []string{"work", "-o", out}, "needs --redis", ""},
		{"work without -o", []string{"work", "--redis", rds}, "needs -o", ""},
		{"work to stdout", []string{"work", "--redis", rds, "-o", "-"}, "needs -o", ""},
		{"work with a shard", []string{"work", "--redis", rds, "-o", out, "--shard", "1/2"}, "--shard", ""},
		{"work with inputs", []string{"work", "--redis", rds, "-o", out, urls}, "takes no URL files", ""},
		{"status with an argument", []string{"status", "--redis", rds, "x"}, "takes no arguments", ""},
		{"work claims too soon", []string{"work", "--redis", rds, "-o", out, "--claim-after", "10ms"}, "--claim-after", ""},
		{"work unreachable", []string{"work", "--redis", "redis://:hunter2@" + closed, "-o", out}, closed, "hunter2"},
		{"enqueue without redis", []string{"enqueue", urls}, "--redis is required", ""},
		{"enqueue of a missing file", []string{"enqueue", "--redis", rds, filepath.Join(dir, "nope")}, "nope", ""},
		{"enqueue unreachable", []string{"enqueue", "--redis", "redis://:hunter2@" + closed, urls}, closed, "hunter2"},
		{"status without redis", []string{"status"}, "--redis is required", ""},
		{"status with a bad namespace", []string{"status", "--redis", rds, "--namespace", "a{b}"}, "--namespace", ""},
		{"status unreachable", []string{"status", "--redis", "redis://:hunter2@" + closed}, closed, "hunter2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, stderr := Test()
			code := Run(context.Background(), ios, tt.args)
			if code != ExitUsage {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr.String(), tt.want) || tt.not != "" && strings.Contains(stderr.String(), tt.not) {
				t.Errorf("stderr does not name %q (or shows %q):\n%s", tt.want, tt.not, stderr)
			}
		})
	}
}

// TestWork_sigtermPutsLinesBack: a worker stopped by SIGTERM takes no
// more lines, records what it had in flight as cancelled after the grace
// period, and puts every line it held back in the queue, acknowledging
// none: status shows none pending and none done, and the next worker
// takes them at once (no claim period) and drains the queue. summarize of
// both files counts each line once, ok. The second worker serves
// fetch_queue_lines on --metrics.
func TestWork_sigtermPutsLinesBack(t *testing.T) {
	rds := redistest.Start(t)
	var block atomic.Bool
	block.Store(true)
	unblock := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block.Load() {
			select {
			case <-unblock:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	defer close(unblock)
	dir := t.TempDir()
	const n = 20
	urls := urlList(t, dir, srv.URL, n)
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"enqueue", "--redis", rds.URL, urls}); code != ExitOK {
		t.Fatalf("enqueue: exit %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("enqueued %d lines of %s", n, urls)) {
		t.Errorf("enqueue's stderr:\n%s", stderr)
	}

	first := filepath.Join(dir, "w1.jsonl")
	w1 := startFetch(t, "", "work", "-q", "--redis", rds.URL, "--lease-ttl", "1s", "-c", "4", "--grace", "100ms",
		"--claim-after", "1h", "-o", first)
	pending := func() int64 { return queueStatus(t, rds, "").Pending }
	w1.waitFor(t, 10*time.Second, "the worker holding lines", func() bool { return pending() > 0 })
	t.Logf("worker 1 holds lines after %s", time.Since(w1.start))
	w1.signal(t, syscall.SIGTERM)
	if code := w1.wait(t, 30*time.Second); code != ExitInterrupted {
		t.Fatalf("worker 1: exit %d, want 130; stderr:\n%s", code, w1.stderr)
	}
	st := queueStatus(t, rds, "")
	if st.Pending != 0 || st.Done != 0 || st.Enqueued != n || st.Workers != 0 {
		t.Errorf("status after SIGTERM: %+v; want none pending, done or alive", st)
	}
	recs := recordsOf(t, first)
	for _, r := range recs {
		if r.Error == nil || r.Error.Kind != results.KindCancelled {
			t.Errorf("worker 1 recorded line %d, not cancelled: %+v", r.Line, r.Error)
		}
	}
	t.Logf("worker 1 recorded %d lines cancelled", len(recs))

	block.Store(false)
	second := filepath.Join(dir, "w2.jsonl")
	w2 := startFetch(t, "", "work", "--redis", rds.URL, "--lease-ttl", "1s", "--claim-after", "1h", "-o", second,
		"--metrics", "127.0.0.1:0", "--metrics-linger", "1m")
	w2.waitFor(t, 30*time.Second, "worker 2 drained the queue", func() bool {
		return strings.Contains(w2.stderr.String(), "run over; metrics stay at")
	})
	t.Logf("worker 2 drained the queue in %s", time.Since(w2.start))

	url := regexp.MustCompile(`serving metrics at (\S+)`).FindStringSubmatch(w2.stderr.String())
	if url == nil {
		t.Fatalf("no metrics address in stderr:\n%s", w2.stderr)
	}
	resp, err := http.Get(url[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		fmt.Sprintf(`fetch_queue_lines{state="acked"} %d`, n),
		fmt.Sprintf(`fetch_queue_lines{state="taken"} %d`, n),
		`fetch_queue_lines{state="held"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s:\n%s", want, grepLines(string(body), "fetch_queue_lines"))
		}
	}
	w2.signal(t, syscall.SIGTERM) // cuts the linger short
	w2.wait(t, 30*time.Second)

	summarizeAllOK(t, n, first, second)
	if st := queueStatus(t, rds, ""); st.Done != n || st.Pending != 0 || st.Failed != 0 {
		t.Errorf("status after the second worker: %+v", st)
	}
}

// queueStatus runs status --json on the namespace fetch of rds.
func queueStatus(t *testing.T, rds *redistest.Server, ns string) statusJSON {
	t.Helper()
	args := []string{"status", "--redis", rds.URL, "--json"}
	if ns != "" {
		args = append(args, "--namespace", ns)
	}
	ios, _, stdout, stderr := Test()
	if code := Run(context.Background(), ios, args); code != ExitOK {
		t.Fatalf("status: exit %d; stderr:\n%s", code, stderr)
	}
	var st statusJSON
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	return st
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestWork_pausedWorkerFetchedTwice: a worker stopped (SIGSTOP) with lines
// in flight past --claim-after has them claimed and finished by another;
// started again (SIGCONT), it finishes its own copies, so those lines
// have a record in each worker's file. summarize counts each line once,
// status counts each done once, and no file has a line ok twice.
func TestWork_pausedWorkerFetchedTwice(t *testing.T) {
	rds := redistest.Start(t)
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	dir := t.TempDir()
	const n = 40
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s/p?i=%d&delay=300ms\n", target.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", b.String())
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"enqueue", "-q", "--redis", rds.URL, urls}); code != ExitOK {
		t.Fatalf("enqueue: exit %d; stderr:\n%s", code, stderr)
	}
	// Leases outlive the pause (10s), lines do not (--claim-after 2s).
	common := []string{"work", "-q", "--redis", rds.URL, "--lease-ttl", "10s", "--claim-after", "2s"}
	outA, outB := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	a := startFetch(t, "", append(common, "-c", "4", "-o", outA)...)
	// On a Redis younger than a lease, the first process waits for one
	// (see limits/redis): 10s, then its requests go out.
	a.waitFor(t, 30*time.Second, "worker a's requests at the target", func() bool { return target.InFlight() >= 4 })
	a.signal(t, syscall.SIGSTOP)
	stopped := time.Now()
	wb := startFetch(t, "", append(common, "-c", "16", "-o", outB)...)
	if code := wb.wait(t, time.Minute); code != ExitOK {
		t.Fatalf("worker b: exit %d; stderr:\n%s", code, wb.stderr)
	}
	drained := time.Since(stopped)
	t.Logf("worker b drained the queue %s after a stopped", drained.Round(time.Millisecond))
	// a's lines were touched at most a beat (a third of --claim-after)
	// before it stopped: none could be claimed sooner.
	if least := 2*time.Second - 2*time.Second/3; drained < least {
		t.Errorf("worker b drained the queue %s after a stopped: a's lines were claimed before they were idle %s", drained, least)
	}
	a.signal(t, syscall.SIGCONT)
	if code := a.wait(t, time.Minute); code != ExitOK {
		t.Fatalf("worker a: exit %d; stderr:\n%s", code, a.stderr)
	}

	files := map[string]map[int]int{} // file -> line -> ok records
	for _, out := range []string{outA, outB} {
		files[out] = map[int]int{}
		for _, r := range recordsOf(t, out) {
			if !r.OK {
				t.Errorf("%s: line %d not ok: %+v", filepath.Base(out), r.Line, r.Error)
			}
			if files[out][r.Line]++; files[out][r.Line] > 1 {
				t.Errorf("%s recorded line %d ok twice", filepath.Base(out), r.Line)
			}
		}
	}
	twice := 0
	for line := range files[outA] {
		if files[outB][line] > 0 {
			twice++
		}
	}
	t.Logf("a recorded %d lines, b %d; %d lines by both", len(files[outA]), len(files[outB]), twice)
	if twice == 0 {
		t.Errorf("no line recorded by both workers: a's requests in flight when it stopped should have been")
	}
	summarizeAllOK(t, n, outB, outA)
	if st := queueStatus(t, rds, ""); st.Done != n || st.Pending != 0 || st.Failed != 0 {
		t.Errorf("status: %+v; want %d done, each once", st, n)
	}
}

// summarizeAllOK checks that fetch summarize of files counts n jobs, all
// ok: each line once, whichever file holds its final record.
func summarizeAllOK(t *testing.T, n int, files ...string) {
	t.Helper()
	code, rep, stdout, stderr := summarize(t, files...)
	if code != ExitOK || rep == nil {
		t.Fatalf("summarize: exit %d; stderr:\n%s\nstdout:\n%s", code, stderr, stdout)
	}
	if rep.Jobs != n || rep.OK != n {
		t.Errorf("summarize counts %d jobs, %d ok; want %d each", rep.Jobs, rep.OK, n)
	}
}
