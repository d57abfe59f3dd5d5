package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
)

// loopback is a target and two HTTP proxies on loopback, with a proxy list
// naming both.
type loopback struct {
	target    *fetchtest.Target
	proxies   []*fetchtest.Proxy
	proxyFile string
	dir       string
}

func startLoopback(t *testing.T) *loopback {
	t.Helper()
	lb := &loopback{dir: t.TempDir()}
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	lb.target = target
	var list strings.Builder
	list.WriteString("# two loopback proxies\n")
	for i := range 2 {
		p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		lb.proxies = append(lb.proxies, p)
		fmt.Fprintf(&list, "%s concurrency=%d\n", p.URL, i+2)
	}
	lb.proxyFile = writeFile(t, lb.dir, "proxies.txt", list.String())
	return lb
}

// readReport reads and decodes the report file at path; it returns its
// bytes too, for messages.
func readReport(t *testing.T, path string) (*report.Report, []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rep := &report.Report{}
	if err := json.Unmarshal(data, rep); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	return rep, data
}

// readRecords decodes JSON lines.
func readRecords(t *testing.T, data []byte) []results.Record {
	t.Helper()
	var recs []results.Record
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r results.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("bad record line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	return recs
}

func TestRun_endToEnd(t *testing.T) {
	lb := startLoopback(t)
	base := lb.target.URL
	okURLs := fmt.Sprintf("# comment\n%s/a?size=10\n\n%s/b?size=20000\r\n  %s/c?status=404  \n%s/d?fail=1\n", base, base, base, base)

	tests := []e2eCase{
		{
			name: "all ok through proxies, output and report files",
			args: func(dir string) []string {
				return []string{"-p", lb.proxyFile, "-o", filepath.Join(dir, "out.jsonl"), "--report", filepath.Join(dir, "report.json"),
					"--retry-backoff", "1ms", writeFile(t, dir, "urls.txt", okURLs)}
			},
			wantCode:   ExitOK,
			wantLines:  4,
			wantStderr: []string{"jobs", lb.proxies[0].URL, lb.proxies[1].URL},
			check: func(t *testing.T, recs []results.Record) {
				for _, r := range recs {
					if !r.OK || r.Input == "" || r.Line == 0 {
						t.Errorf("record not ok or without input/line: %+v", r)
					}
					if strings.Contains(r.URL, "status=404") && r.Status != 404 {
						t.Errorf("404 record has status %d", r.Status)
					}
				}
			},
		},
		{
			name:      "invalid line from stdin makes exit 1, quiet",
			args:      func(string) []string { return []string{"-q", "--proxy", lb.proxies[0].URL} },
			stdin:     base + "/x?size=1\nnot a url\n",
			wantCode:  ExitNotAllOK,
			wantLines: 2,
			notStderr: []string{"jobs"},
			check: func(t *testing.T, recs []results.Record) {
				var bad int
				for _, r := range recs {
					if r.Input != "-" {
						t.Errorf("input %q, want -", r.Input)
					}
					if r.Error != nil {
						bad++
						if r.Error.Phase != "input" || r.Error.Kind != "invalid" || r.Line != 2 {
							t.Errorf("bad line record = %+v, error %+v", r, r.Error)
						}
					}
				}
				if bad != 1 {
					t.Errorf("%d failed records, want 1", bad)
				}
			},
		},
		{
			name:       "final retry status fails, direct",
			args:       func(string) []string { return []string{"--retries", "1", "--retry-backoff", "1ms", "-"} },
			stdin:      base + "/x?status=503\n",
			wantCode:   ExitNotAllOK,
			wantLines:  1,
			wantStderr: []string{"status", "direct"},
			check: func(t *testing.T, recs []results.Record) {
				if r := recs[0]; r.OK || r.Error == nil || r.Error.Kind != "status" || r.Attempts != 2 {
					t.Errorf("record = %+v, error %+v", r, r.Error)
				}
			},
		},
		{
			name: "duplicate proxy warning, progress on a terminal",
			args: func(dir string) []string {
				dup := writeFile(t, dir, "dup.txt", lb.proxies[0].URL+"\n"+lb.proxies[0].URL+"\n")
				return []string{"-p", dup, writeFile(t, dir, "urls.txt", okURLs)}
			},
			tty:        true,
			wantCode:   ExitOK,
			wantLines:  4,
			wantStderr: []string{"duplicate", "dup.txt:2", "jobs"},
		},
		{
			name: "quiet silences warnings",
			args: func(dir string) []string {
				dup := writeFile(t, dir, "dup.txt", lb.proxies[0].URL+"\n"+lb.proxies[0].URL+"\n")
				return []string{"-q", "-p", dup, writeFile(t, dir, "urls.txt", okURLs)}
			},
			wantCode:  ExitOK,
			wantLines: 4,
			notStderr: []string{"duplicate", "jobs"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The same run on each transport, one after the other on the
			// same servers: the same assertions, and the same records but
			// for timings and which of the two proxies served a URL.
			var byTransport [2][]results.Record
			for i, tp := range transports {
				t.Run(tp, func(t *testing.T) {
					lb.target.ResetStats() // fail=1 fails the first request again
					byTransport[i] = tt.run(t, tp)
				})
			}
			if byTransport[0] != nil && byTransport[1] != nil {
				sameRecords(t, byTransport[0], byTransport[1], anyRoute)
			}
		})
	}
}

// e2eCase is a case of TestRun_endToEnd.
type e2eCase struct {
	name       string
	args       func(dir string) []string
	stdin      string
	tty        bool
	wantCode   int
	wantLines  int // records
	wantStderr []string
	notStderr  []string
	check      func(t *testing.T, recs []results.Record)
}

// run runs the case on transport tp and checks what it left; it returns
// the records, or nil when a check failed.
func (tt e2eCase) run(t *testing.T, tp string) []results.Record {
	t.Helper()
	args := append([]string{"--transport", tp}, tt.args(t.TempDir())...)
	ios, stdin, stdout, stderr := Test()
	stdin.WriteString(tt.stdin)
	ios.SetStderrTTY(tt.tty)
	code := Run(context.Background(), ios, args)
	if code != tt.wantCode {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
	}
	out := stdout.Bytes()
	if i := indexOf(args, "-o"); i >= 0 {
		if stdout.Len() != 0 {
			t.Errorf("stdout not empty with -o:\n%s", stdout)
		}
		var err error
		if out, err = os.ReadFile(args[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	recs := readRecords(t, out)
	if len(recs) != tt.wantLines {
		t.Errorf("%d records, want %d:\n%s", len(recs), tt.wantLines, out)
	}
	for _, s := range tt.wantStderr {
		if !strings.Contains(stderr.String(), s) {
			t.Errorf("stderr does not contain %q:\n%s", s, stderr)
		}
	}
	for _, s := range tt.notStderr {
		if strings.Contains(stderr.String(), s) {
			t.Errorf("stderr contains %q:\n%s", s, stderr)
		}
	}
	if i := indexOf(args, "--report"); i >= 0 {
		data, err := os.ReadFile(args[i+1])
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Report
		if err := json.Unmarshal(data, &rep); err != nil {
			t.Fatalf("report: %v\n%s", err, data)
		}
		if rep.Jobs != len(recs) || rep.OK+rep.Failed != rep.Jobs || len(rep.Proxies) == 0 {
			t.Errorf("report does not match the records: %s", data)
		}
	}
	if tt.check != nil && len(recs) == tt.wantLines {
		tt.check(t, recs)
	}
	if t.Failed() {
		return nil
	}
	return recs
}

func indexOf(args []string, s string) int {
	for i, a := range args {
		if a == s {
			return i
		}
	}
	return -1
}

// TestRun_interrupted cancels the root context while a URL hangs: the run
// exits 130, every line has a record, and the hanging one is cancelled.
// On each transport, through the same proxies.
func TestRun_interrupted(t *testing.T) {
	lb := startLoopback(t)
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			lb.target.ResetStats() // the hits of /hang are this run's
			testInterrupted(t, lb, tp)
		})
	}
}

func testInterrupted(t *testing.T, lb *loopback, tp string) {
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", lb.target.URL+"/ok\n"+lb.target.URL+"/hang?hang=1\n")
	reportPath := filepath.Join(dir, "report.json")
	ios, _, _, _ := Test()
	stdout, stderr := newLockedBuffer(), newLockedBuffer() // read while Run writes them
	ios.Out, ios.ErrOut = stdout, stderr

	ctx, cancel := context.WithCancel(context.Background())
	var code int
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		code = Run(ctx, ios, []string{"--transport", tp, "-p", lb.proxyFile, "--grace", "100ms", "--report", reportPath, urls})
	}()
	defer func() { cancel(); <-ended }()
	// Cancel once the fast URL's record is out and the hanging request has
	// reached the target.
	waitFor(t, 10*time.Second, "the fast URL's record and the hanging request at the target", func() bool {
		return strings.Count(stdout.String(), "\n") >= 1 && lb.target.Hits("/hang?hang=1") >= 1
	}, func() { t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr) })
	cancelled := time.Now()
	cancel()
	<-ended
	if code != ExitInterrupted {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitInterrupted, stderr)
	}
	// --grace 100ms, and a wide margin for a loaded machine.
	if d := time.Since(cancelled); d > 10*time.Second {
		t.Errorf("interrupted run took %v to end after the cancel", d)
	}
	recs := readRecords(t, []byte(stdout.String()))
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(recs), stdout)
	}
	for _, r := range recs {
		if strings.Contains(r.URL, "hang") && (r.Error == nil || r.Error.Kind != "cancelled") {
			t.Errorf("hanging URL record = %+v, error %+v; want kind cancelled", r, r.Error)
		}
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr does not say interrupted:\n%s", stderr)
	}
	data, err := os.ReadFile(reportPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep report.Report
	if err := json.Unmarshal(data, &rep); err != nil || !rep.Interrupted {
		t.Errorf("report not marked interrupted (%v): %s", err, data)
	}
}

func TestRun_demo(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "demo.jsonl")
	ios, _, _, stderr := Test()
	ios.SetStderrTTY(true)
	code := Run(context.Background(), ios, []string{"demo", "--urls", "60", "-o", out})
	if code != ExitOK {
		t.Fatalf("demo exit code %d; stderr:\n%s", code, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if recs := readRecords(t, data); len(recs) != 60 {
		t.Errorf("%d records, want 60", len(recs))
	}
	if !strings.Contains(stderr.String(), "jobs") {
		t.Errorf("no summary on stderr:\n%s", stderr)
	}
}
