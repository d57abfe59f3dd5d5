package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// okServer is a loopback target that answers every request 200 "ok".
func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	return srv
}

// TestRun_outputIsAnInput: an output that is the same file as an input or
// as another output, however it is spelled, is a usage error found before
// anything is opened for writing: every file keeps its bytes, and none is
// made.
func TestRun_outputIsAnInput(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	const urlText = "# the list\n"
	urlLine := urlText + srv.URL + "/a\n"
	urls := writeFile(t, dir, "urls.txt", urlLine)
	proxyList := writeFile(t, dir, "proxies.txt", "http://127.0.0.1:1\n")
	earlier := writeFile(t, dir, "earlier.jsonl", "{\"url\":\"earlier\"}\n")
	hard := filepath.Join(dir, "hard.txt")
	if err := os.Link(urls, hard); err != nil {
		t.Fatal(err)
	}
	soft := filepath.Join(dir, "soft.txt")
	if err := os.Symlink(urls, soft); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(dir, "fresh.jsonl") // does not exist
	rel, err := filepath.Rel(mustGetwd(t), urls)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"-o is the input", []string{"-o", urls, urls}, "--output " + urls + " is the same file as input " + urls},
		{"-o is the input spelled ./", []string{"-o", filepath.Join(dir, ".", "sub", "..", "urls.txt"), urls}, "same file as input"},
		{"-o is the input by a relative name", []string{"-o", rel, urls}, "same file as input"},
		{"-o is a hard link of the input", []string{"-o", hard, urls}, "same file as input"},
		{"-o is a symbolic link to the input", []string{"-o", soft, urls}, "same file as input"},
		{"--report is the input", []string{"--report", urls, urls}, "--report " + urls + " is the same file as input"},
		{"--report is a later input", []string{"--report", hard, srv.URL, urls}, "same file as input"},
		{"-o is the proxy list", []string{"-p", proxyList, "-o", proxyList, urls}, "same file as proxy list"},
		{"-o and --report are one file", []string{"-o", earlier, "--report", earlier, urls}, "--output " + earlier + " and --report " + earlier + " are the same file"},
		{"-o and --report are one new file", []string{"-o", fresh, "--report", filepath.Join(sub, "..", "fresh.jsonl"), urls}, "are the same file"},
		{"--resume -o is the input", []string{"--resume", "-o", urls, urls}, "same file as input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, stdout, stderr := Test()
			if code := Run(context.Background(), ios, tt.args); code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr does not say %q:\n%s", tt.want, stderr)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q", stdout)
			}
			for name, want := range map[string]string{urls: urlLine, proxyList: "http://127.0.0.1:1\n", earlier: "{\"url\":\"earlier\"}\n"} {
				if got, err := os.ReadFile(name); err != nil || string(got) != want {
					t.Errorf("%s now holds %q (%v), want %q", name, got, err, want)
				}
			}
			if _, err := os.Lstat(fresh); err == nil {
				t.Errorf("%s was made", fresh)
			}
		})
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestRun_streamsAreFiles: standard output or standard input that is a
// regular file counts as an output or an input (fetch urls.txt >> urls.txt
// would read its own records for ever; fetch -o x < x would empty its
// input).
func TestRun_streamsAreFiles(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	line := srv.URL + "/a\n"
	urls := writeFile(t, dir, "urls.txt", line)
	report := filepath.Join(dir, "report.json")

	t.Run("stdout is the input", func(t *testing.T) {
		f, err := os.OpenFile(urls, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ios, _, _, stderr := Test()
		ios.Out = f
		if code := Run(context.Background(), ios, []string{urls}); code != ExitUsage {
			t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
		}
		if !strings.Contains(stderr.String(), "standard output") || !strings.Contains(stderr.String(), "same file as input") {
			t.Errorf("stderr:\n%s", stderr)
		}
	})
	t.Run("stdout is the report", func(t *testing.T) {
		f, err := os.Create(report)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ios, _, _, stderr := Test()
		ios.Out = f
		if code := Run(context.Background(), ios, []string{"--report", report, urls}); code != ExitUsage {
			t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
		}
	})
	t.Run("stdin is the output", func(t *testing.T) {
		f, err := os.Open(urls)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ios, _, _, stderr := Test()
		ios.In = f
		if code := Run(context.Background(), ios, []string{"-o", urls}); code != ExitUsage {
			t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
		}
		if !strings.Contains(stderr.String(), "same file as standard input") {
			t.Errorf("stderr:\n%s", stderr)
		}
	})
	if got, _ := os.ReadFile(urls); string(got) != line {
		t.Errorf("the input now holds %q", got)
	}
	t.Run("stdout and report may share a terminal or /dev/null", func(t *testing.T) {
		ios, _, _, stderr := Test()
		if code := Run(context.Background(), ios, []string{"-q", "-o", os.DevNull, "--report", os.DevNull, urls}); code != ExitOK {
			t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
		}
	})
}

// TestRun_reportToAStream: --report takes any writable file, as -o does: a
// FIFO (or >(cat), or /dev/stdout) is written, not truncated.
func TestRun_reportToAStream(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", srv.URL+"/a\n")
	fifo := filepath.Join(dir, "report.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		f, err := os.Open(fifo) // blocks until fetch opens it for writing
		if err != nil {
			got <- nil
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- b
	}()
	ios, _, stdout, stderr := Test()
	if code := Run(context.Background(), ios, []string{"-q", "--report", fifo, "-o", filepath.Join(dir, "out.jsonl"), urls}); code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	var rep struct{ Jobs, OK int }
	select {
	case b := <-got:
		if err := json.Unmarshal(b, &rep); err != nil || rep.Jobs != 1 || rep.OK != 1 {
			t.Errorf("report through the FIFO: %q (%v)", b, err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nothing read from the FIFO")
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout: %q", stdout)
	}
}

// TestRun_saveDirNotWritable: a --save-dir that exists but cannot be
// written is a usage error before any request. As root, permissions do not
// stop a write, so the directory is a read-only mount.
func TestRun_saveDirNotWritable(t *testing.T) {
	var hits int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", srv.URL+"/a\n")
	saved := filepath.Join(dir, "saved")
	if err := os.Mkdir(saved, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", saved).CombinedOutput(); err != nil {
			t.Fatalf("mount a read-only tmpfs: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", saved).Run() })
	}
	out := filepath.Join(dir, "out.jsonl")
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"--save-dir", saved, "-o", out, urls}); code != ExitUsage {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
	}
	if !strings.Contains(stderr.String(), "--save-dir: cannot write in "+saved) {
		t.Errorf("stderr:\n%s", stderr)
	}
	if hits != 0 {
		t.Errorf("%d requests sent", hits)
	}
	if _, err := os.Lstat(out); err == nil {
		t.Errorf("%s was made", out)
	}
}

// TestRun_partialBodiesRemoved: a partial body left in --save-dir by a run
// that was killed is removed by the next run once it is older than
// --timeout; a younger one (a live run's) is left alone, and no saved
// body is touched.
func TestRun_partialBodiesRemoved(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", srv.URL+"/a\n")
	saved := filepath.Join(dir, "saved")
	if err := os.Mkdir(saved, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := writeFile(t, saved, ".fetch-partial-123", "half a bo")
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	live := writeFile(t, saved, ".fetch-partial-456", "being written")
	body := writeFile(t, saved, "127.0.0.1_a-0123456789ab", "an earlier body")
	if err := os.Chtimes(body, old, old); err != nil {
		t.Fatal(err)
	}
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"-q", "-t", "1m", "--save-dir", saved, "-o", filepath.Join(dir, "out.jsonl"), urls}); code != ExitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
	}
	if _, err := os.Lstat(stale); err == nil {
		t.Errorf("stale partial body %s still there", stale)
	}
	for _, name := range []string{live, body} {
		if _, err := os.Lstat(name); err != nil {
			t.Errorf("%s removed: %v", name, err)
		}
	}
}

// TestRun_outputFails: a run that stops because its results could not be
// written says so in the summary's first line and in the report.
func TestRun_outputFails(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	var lines strings.Builder
	for i := range 50 {
		fmt.Fprintf(&lines, "%s/%d\n", srv.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", lines.String())
	report := filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	ios.Out = failingWriter{}
	code := Run(context.Background(), ios, []string{"-c", "2", "--report", report, urls})
	if code != ExitNotAllOK {
		t.Errorf("exit code %d, want %d", code, ExitNotAllOK)
	}
	first := ""
	sc := bufio.NewScanner(strings.NewReader(stderr.String()))
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			first = sc.Text()
			break
		}
	}
	if !strings.Contains(first, "stopped early: output could not be written") {
		t.Errorf("summary's first line %q; stderr:\n%s", first, stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil || !bytes.Contains(b, []byte(`"stopped": "output could not be written"`)) {
		t.Errorf("report (%v):\n%s", err, b)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestRun_quietSilencesGoLogs: what Go's own packages log (here net/http's
// "Unsolicited response received on idle HTTP channel", from a 204 that
// carries a body) is a warning on stderr, and -q silences it.
func TestRun_quietSilencesGoLogs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					req.Body.Close()
					io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\nthis body should not be here")
				}
			}()
		}
	}()
	dir := t.TempDir()
	var lines strings.Builder
	for i := range 5 {
		fmt.Fprintf(&lines, "http://%s/%d\n", ln.Addr(), i)
	}
	// The transport logs as soon as a response is done and stray bytes
	// wait: the last URL, on a well-behaved server, makes sure that every
	// log line comes while the run still goes.
	fmt.Fprintf(&lines, "%s/last\n", okServer(t).URL)
	urls := writeFile(t, dir, "urls.txt", lines.String())

	// The log package's own output stands in for the process's stderr:
	// whatever is not routed lands here.
	var unrouted bytes.Buffer
	prev := log.Writer()
	log.SetOutput(&unrouted)
	defer log.SetOutput(prev)

	for _, quiet := range []bool{false, true} {
		t.Run(fmt.Sprintf("quiet=%v", quiet), func(t *testing.T) {
			unrouted.Reset()
			args := []string{"-c", "1", "-o", filepath.Join(dir, "out.jsonl"), urls}
			if quiet {
				args = append([]string{"-q"}, args...)
			}
			ios, _, _, stderr := Test()
			if code := Run(context.Background(), ios, args); code != ExitOK {
				t.Fatalf("exit code %d; stderr:\n%s", code, stderr)
			}
			if unrouted.Len() != 0 {
				t.Errorf("Go's log went to the process's stderr: %q", unrouted.String())
			}
			warned := strings.Contains(stderr.String(), "fetch: warning: Unsolicited response")
			if quiet && stderr.Len() != 0 {
				t.Errorf("-q, yet stderr:\n%s", stderr)
			}
			if !quiet && !warned {
				t.Errorf("no warning for the stray bytes; stderr:\n%s", stderr)
			}
		})
	}
}

// TestRun_resumeCountsThisRunsLines: "skipped N lines" counts the lines of
// this run's inputs that the results file had finished, not the records in
// the file (which may hold other inputs' lines, or cancelled ones).
func TestRun_resumeCountsThisRunsLines(t *testing.T) {
	srv := okServer(t)
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", srv.URL+"/1\n"+srv.URL+"/2\n"+srv.URL+"/3\n")
	var prior strings.Builder
	rec := func(input string, line int, u string, kind string) {
		errField := "null"
		if kind != "" {
			errField = `{"phase":"queue","kind":"` + kind + `","message":"x"}`
		}
		fmt.Fprintf(&prior, `{"url":%q,"input":%q,"line":%d,"ok":%v,"status":200,"attempts":1,"bytes":2,"elapsed_ms":1,"phases":{},"error":%s,"tries":[]}`+"\n",
			u, input, line, kind == "", errField)
	}
	for i := 1; i <= 5; i++ {
		rec("other.txt", i, fmt.Sprintf("http://x/%d", i), "") // another input's lines
	}
	rec(urls, 1, srv.URL+"/1", "")          // finished
	rec(urls, 2, srv.URL+"/2", "cancelled") // not finished: taken again
	out := writeFile(t, dir, "out.jsonl", prior.String())
	ios, _, _, stderr := Test()
	if code := Run(context.Background(), ios, []string{"--resume", "-o", out, urls}); code != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "skipped 1 line it had already finished") {
		t.Errorf("stderr does not count this run's one skipped line:\n%s", stderr)
	}
}

// TestPathID: where files have no inode (Windows), a file is known by its
// absolute path, compared without case: the names of one file spelt
// otherwise are one identity, other files are not.
func TestPathID(t *testing.T) {
	t.Chdir(t.TempDir())
	id := func(path, base string) fileID {
		t.Helper()
		got, ok := pathID(path, base)
		if !ok {
			t.Fatalf("pathID(%q, %q) has no identity", path, base)
		}
		return got
	}
	for _, tc := range []struct {
		a, b [2]string // path and base
		same bool
	}{
		{[2]string{"out.jsonl", ""}, [2]string{"./out.jsonl", ""}, true},
		{[2]string{"out.jsonl", ""}, [2]string{"sub/../OUT.jsonl", ""}, true},
		{[2]string{".", "new.jsonl"}, [2]string{"sub/..", "NEW.jsonl"}, true},
		{[2]string{"out.jsonl", ""}, [2]string{"urls.txt", ""}, false},
		{[2]string{".", "new.jsonl"}, [2]string{"sub", "new.jsonl"}, false},
		{[2]string{"new.jsonl", ""}, [2]string{".", "new.jsonl"}, false}, // a file made since: checked at different times
	} {
		if got := id(tc.a[0], tc.a[1]) == id(tc.b[0], tc.b[1]); got != tc.same {
			t.Errorf("%q and %q: same %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}
