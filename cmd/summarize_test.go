package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/report"
)

// summarize runs fetch summarize with args and returns its exit code, its
// report (read from --report), stdout and stderr.
func summarize(t *testing.T, args ...string) (int, *report.Report, string, string) {
	t.Helper()
	reportPath := filepath.Join(t.TempDir(), "summary.json")
	ios, _, stdout, stderr := Test()
	code := Run(context.Background(), ios, append([]string{"summarize", "--report", reportPath}, args...))
	var rep *report.Report
	if data, err := os.ReadFile(reportPath); err == nil {
		rep = &report.Report{}
		if err := json.Unmarshal(data, rep); err != nil {
			t.Fatalf("report: %v\n%s", err, data)
		}
	}
	return code, rep, stdout.String(), stderr.String()
}

// totals are the figures of a report that a run gives whatever its
// timing: everything but elapsed times, phases and what was in flight.
func totals(r *report.Report) string {
	type counts struct{ Attempts, OK, Failed int }
	proxies, hosts := map[string]counts{}, map[string]counts{}
	for id, p := range r.Proxies {
		proxies[id] = counts{p.Attempts, p.OK, p.Failed}
	}
	for h, x := range r.Hosts {
		hosts[h] = counts{x.Attempts, x.OK, x.Failed}
	}
	b, _ := json.Marshal(map[string]any{"jobs": r.Jobs, "ok": r.OK, "failed": r.Failed,
		"by_kind": r.ByKind, "by_phase": r.ByPhase, "proxies": proxies, "hosts": hosts})
	return string(b)
}

// TestSummarize_resumedRunsAddUp stops a run twice and resumes it to the
// end, on loopback through a real proxy: summarize counts the same as it
// does for one run over the same list without a stop, and as that run's
// own report.
func TestSummarize_resumedRunsAddUp(t *testing.T) {
	lb := startLoopback(t)
	dir := t.TempDir()
	proxyFile := writeFile(t, dir, "proxy.txt", lb.proxies[0].URL+"\n")
	var urls strings.Builder
	urls.WriteString("# summarize test\n")
	for i := range 60 {
		switch i % 10 {
		case 3:
			fmt.Fprintf(&urls, "%s/s/%d?status=404&delay=20ms\n", lb.target.URL, i)
		case 6:
			fmt.Fprintf(&urls, "%s/s/%d?status=503&delay=20ms\n", lb.target.URL, i) // retried once, then failed
		case 9:
			fmt.Fprintf(&urls, "not a url %d\n", i)
		default:
			fmt.Fprintf(&urls, "%s/s/%d?size=%d&delay=%dms\n", lb.target.URL, i, 100+i*37, 20+i%4*10)
		}
	}
	list := writeFile(t, dir, "urls.txt", urls.String())
	args := []string{"-q", "-c", "3", "--grace", "0s", "--retries", "1", "--retry-backoff", "30ms", "--pushback-delay", "0", "-p", proxyFile}

	// One run, to the end.
	whole := filepath.Join(dir, "whole.jsonl")
	wholeReport := filepath.Join(dir, "whole-report.json")
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, append(args, "-o", whole, "--report", wholeReport, list)); code != ExitNotAllOK {
		t.Fatalf("whole run: exit code %d, want %d; stderr:\n%s", code, ExitNotAllOK, stderr)
	}

	// The same, stopped after about 10 and 30 records and resumed.
	parts := filepath.Join(dir, "parts.jsonl")
	for i, stopAt := range []int{10, 30, 0} {
		ctx, cancel := context.WithCancel(context.Background())
		ios, _, _, stderr := Test()
		var code int
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			code = Run(ctx, ios, append(args, "--resume", "-o", parts, list))
		}()
		if stopAt > 0 {
			waitFor(t, time.Minute, fmt.Sprintf("run %d: %d records in all, or its end", i+1, stopAt), func() bool {
				select {
				case <-ended:
					return true // too soon: the exit code below says so
				default:
				}
				data, _ := os.ReadFile(parts)
				return bytes.Count(data, []byte("\n")) >= stopAt
			}, func() { cancel(); <-ended; t.Logf("stderr:\n%s", stderr) })
			cancel()
		}
		<-ended
		cancel()
		if want := map[bool]int{true: ExitInterrupted, false: ExitNotAllOK}[stopAt > 0]; code != want {
			t.Fatalf("run %d: exit code %d, want %d; stderr:\n%s", i+1, code, want, stderr)
		}
	}
	data, _ := os.ReadFile(parts)
	cancelled := 0
	for _, r := range parseRecords(t, data) {
		if !final(r) {
			cancelled++
		}
	}
	if cancelled == 0 {
		t.Errorf("the stopped runs left no cancelled record: nothing to leave out")
	}
	t.Logf("%d records in the stopped and resumed runs, %d of them cancelled", bytes.Count(data, []byte("\n")), cancelled)

	code, fromParts, stdout, errs := summarize(t, parts)
	if code != ExitNotAllOK || fromParts == nil {
		t.Fatalf("summarize: exit code %d, want %d; stderr:\n%s", code, ExitNotAllOK, errs)
	}
	code, fromWhole, _, errs := summarize(t, whole)
	if code != ExitNotAllOK || fromWhole == nil {
		t.Fatalf("summarize: exit code %d, want %d; stderr:\n%s", code, ExitNotAllOK, errs)
	}
	var runReport report.Report
	if data, err := os.ReadFile(wholeReport); err != nil || json.Unmarshal(data, &runReport) != nil {
		t.Fatalf("the run's report: %v", err)
	}
	want := totals(&runReport)
	if got := totals(fromParts); got != want {
		t.Errorf("summarize of the stopped and resumed runs:\n%s\nwant, as the run without a stop:\n%s", got, want)
	}
	if got := totals(fromWhole); got != want {
		t.Errorf("summarize of the run without a stop:\n%s\nwant, as its own report:\n%s", got, want)
	}
	if fromParts.Jobs != 60 || fromParts.ByKind["invalid"] != 6 || fromParts.ByKind["status"] != 6 {
		t.Errorf("jobs %d, by_kind %v; want 60 jobs, 6 invalid, 6 status", fromParts.Jobs, fromParts.ByKind)
	}
	if p := fromParts.Proxies[lb.proxies[0].URL]; p == nil || p.Attempts != 54+6 || p.MaxInFlight != 0 {
		t.Errorf("proxy %+v: want 60 attempts (54 URLs, 6 of them twice) and max_in_flight 0", p)
	}
	if !strings.HasPrefix(stdout, "60 lines from ") || !strings.Contains(stdout, "jobs") {
		t.Errorf("summary:\n%s", stdout)
	}
}

func TestSummarize_files(t *testing.T) {
	dir := t.TempDir()
	okRec := `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":true,"status":200,"proxy":"direct","attempts":1,"phases":{"headers":5},"error":null,"tries":[]}` + "\n"
	cancelled := `{"url":"http://a.example/2","input":"u.txt","line":2,"ok":false,"status":0,"proxy":"direct","attempts":1,"phases":{"headers":5},"error":{"phase":"headers","kind":"cancelled","message":"interrupted"},"tries":[]}` + "\n"
	ok2 := strings.ReplaceAll(strings.ReplaceAll(okRec, "/1", "/2"), `"line":1`, `"line":2`)
	a := writeFile(t, dir, "a.jsonl", okRec+cancelled)
	b := writeFile(t, dir, "b.jsonl", ok2+`{"url":"http://a.example/3","inp`) // torn
	notResults := writeFile(t, dir, "urls.txt", "http://user:secret@a.example/\n")
	empty := writeFile(t, dir, "empty.jsonl", "")

	t.Run("a cancelled line counts as failed", func(t *testing.T) {
		code, rep, _, _ := summarize(t, a)
		if code != ExitNotAllOK || rep == nil || rep.Jobs != 2 || rep.ByKind["cancelled"] != 1 {
			t.Errorf("exit code %d, report %+v; want 1, 2 jobs, 1 cancelled", code, rep)
		}
	})
	t.Run("resumed in another file, with a torn last line", func(t *testing.T) {
		code, rep, stdout, stderr := summarize(t, a, b)
		if code != ExitOK || rep == nil || rep.Jobs != 2 || rep.OK != 2 {
			t.Errorf("exit code %d, report %+v; want 0, 2 jobs ok", code, rep)
		}
		if !strings.Contains(stderr, b+": left out its torn last line") {
			t.Errorf("stderr does not say the torn line was left out:\n%s", stderr)
		}
		if !strings.HasPrefix(stdout, "2 lines from 3 records in 2 files\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})
	t.Run("empty", func(t *testing.T) {
		if code, rep, _, _ := summarize(t, empty); code != ExitOK || rep == nil || rep.Jobs != 0 {
			t.Errorf("exit code %d, report %+v; want 0, no job", code, rep)
		}
	})

	usage := []struct {
		name string
		args []string
		msg  string
	}{
		{"not results", []string{"summarize", a, notResults}, "fetch: " + notResults + ": line 1 is not JSON: this is not a results file of fetch"},
		{"no file", []string{"summarize"}, "give at least one results file"},
		{"standard input", []string{"summarize", "-"}, "standard input cannot be summarized"},
		{"missing", []string{"summarize", filepath.Join(dir, "missing.jsonl")}, "no such file"},
		{"a directory", []string{"summarize", dir}, "is not a regular file"},
		{"report is an input", []string{"summarize", "--report", "./" + filepath.Base(a), a}, "the same file"},
		{"bad flag", []string{"summarize", "--nope", a}, "unknown flag"},
	}
	for _, tt := range usage {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadFile(a)
			wd := mustGetwd(t)
			if err := os.Chdir(dir); err != nil {
				t.Fatal(err)
			}
			defer os.Chdir(wd)
			reportPath := filepath.Join(dir, "new-report.json")
			ios, _, stdout, stderr := Test()
			args := tt.args
			if tt.name != "report is an input" && tt.name != "no file" && tt.name != "bad flag" {
				args = append([]string{"summarize", "--report", reportPath}, args[1:]...)
			}
			if code := Run(context.Background(), ios, args); code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			if !strings.Contains(stderr.String(), tt.msg) || strings.Contains(stderr.String(), "secret") {
				t.Errorf("stderr does not say %q (or quotes the file):\n%s", tt.msg, stderr)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout not empty:\n%s", stdout)
			}
			if _, err := os.Stat(reportPath); err == nil {
				t.Errorf("the report was made")
			}
			if after, _ := os.ReadFile(a); !bytes.Equal(before, after) {
				t.Errorf("the input changed")
			}
		})
	}
}

func TestNewCmdSummarize(t *testing.T) {
	var got *SummarizeOptions
	cmd := NewCmdSummarize(&IOStreams{}, func(o *SummarizeOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--report", "r.json", "a.jsonl", "b.jsonl"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := (&SummarizeOptions{IO: got.IO, Files: []string{"a.jsonl", "b.jsonl"}, Report: "r.json", ReportHosts: report.DefaultHosts, ReportProxies: report.DefaultProxies}); !reflect.DeepEqual(got, want) {
		t.Errorf("options %+v, want %+v", got, want)
	}
	cmd = NewCmdSummarize(&IOStreams{}, func(o *SummarizeOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--report-hosts", "5", "a.jsonl"})
	if err := cmd.Execute(); err != nil || got.ReportHosts != 5 {
		t.Errorf("--report-hosts 5: %v, ReportHosts %d", err, got.ReportHosts)
	}
	cmd = NewCmdSummarize(&IOStreams{}, func(o *SummarizeOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--report-proxies", "7", "a.jsonl"})
	if err := cmd.Execute(); err != nil || got.ReportProxies != 7 {
		t.Errorf("--report-proxies 7: %v, ReportProxies %d", err, got.ReportProxies)
	}
	for _, flag := range []string{"--report-hosts", "--report-proxies"} {
		cmd = NewCmdSummarize(&IOStreams{}, func(o *SummarizeOptions) error { got = o; return nil })
		cmd.SetArgs([]string{flag, "-1", "a.jsonl"})
		var ue *UsageError
		if err := cmd.Execute(); !errors.As(err, &ue) {
			t.Errorf("%s -1: %v, want a usage error", flag, err)
		}
	}
}
