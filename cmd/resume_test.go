package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
)

// The tests in this file run the real binary, built once (on first use) by
// fetchBinary and removed by TestMain, so that signals reach a real process.

var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary.dir != "" {
		os.RemoveAll(binary.dir)
	}
	os.Exit(code)
}

// fetchBinary builds the fetch command and returns its path.
func fetchBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		if binary.dir, binary.err = os.MkdirTemp("", "fetch-bin-"); binary.err != nil {
			return
		}
		binary.path = filepath.Join(binary.dir, "fetch")
		out, err := exec.Command("go", "build", "-o", binary.path, "..").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// proc is a running fetch. Its stdout and stderr may be read while it runs.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *lockedBuffer
	done           chan struct{}
	start          time.Time
}

// startFetch starts the fetch binary with args and stdin.
func startFetch(t *testing.T, stdin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(fetchBinary(t), args...), done: make(chan struct{}),
		stdout: newLockedBuffer(), stderr: newLockedBuffer()}
	p.cmd.Stdin = strings.NewReader(stdin)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.start = time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatal(err)
	}
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitFor waits as waitFor does, while p runs: it fails t, with p's
// stderr, if p ends before cond holds.
func (p *proc) waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	waitFor(t, within, what, func() bool {
		if cond() {
			return true
		}
		if !p.running() {
			t.Fatalf("fetch ended before %s; stderr:\n%s", what, p.stderr)
		}
		return false
	}, func() { t.Logf("stderr:\n%s", p.stderr) })
}

// wait waits for the process to end, at most limit, and returns its exit
// code, or -N when signal N ended it.
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("fetch still running after %s; stderr:\n%s", limit, p.stderr)
	}
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return -int(ws.Signal())
	}
	return ws.ExitStatus()
}

// resumeCase is a list of URL lines on a loopback target, to be fetched in
// two runs or more: the lines, the request URI of each, and what was
// hit and written after the first run.
type resumeCase struct {
	target *fetchtest.Target
	text   string         // the URL list
	uris   map[int]string // line -> request URI of the URLs fetched
	lines  int            // URL lines, invalid ones included
}

// newResumeCase writes n slowish URLs (delays, and bodies that drip),
// with a comment, a blank line, an invalid line and one URL repeated on
// another line. Lines are 1-based as in records.
func newResumeCase(target *fetchtest.Target, rng *rand.Rand, id string, n int) *resumeCase {
	rc := &resumeCase{target: target, uris: map[int]string{}}
	var b strings.Builder
	line := 0
	add := func(s string) { b.WriteString(s + "\n"); line++ }
	add("# resume test " + id)
	var urlLines []int
	for i := range n {
		var uri string
		switch rng.IntN(3) {
		case 0:
			uri = fmt.Sprintf("/r/%s/%d?size=%d&chunks=3&drip=%dms", id, i, 300+rng.IntN(3000), 10+rng.IntN(40))
		default:
			uri = fmt.Sprintf("/r/%s/%d?size=%d&delay=%dms", id, i, 100+rng.IntN(2000), 10+rng.IntN(140))
		}
		add(target.URL + uri)
		rc.uris[line] = uri
		urlLines = append(urlLines, line)
		rc.lines++
		switch i {
		case n / 3:
			add("")
			add("not a url " + id)
			rc.lines++
		case n / 2:
			dup := rc.uris[urlLines[n/3]]
			add(target.URL + dup) // an earlier URL again
			rc.uris[line] = dup
			rc.lines++
		}
	}
	rc.text = b.String()
	return rc
}

// hits returns how many requests each request URI received so far.
func (rc *resumeCase) hits() map[string]int {
	h := map[string]int{}
	for _, uri := range rc.uris {
		h[uri] = rc.target.Hits(uri)
	}
	return h
}

// parseRecords decodes whole JSON lines, failing on a line that is not one.
func parseRecords(t *testing.T, data []byte) []results.Record {
	t.Helper()
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("output does not end with a whole line: ...%q", data[max(len(data)-80, 0):])
	}
	var recs []results.Record
	for l := range bytes.Lines(data) {
		var r results.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatalf("output line is not a whole record: %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func final(r results.Record) bool { return r.Error == nil || r.Error.Kind != results.KindCancelled }

// check asserts what an interrupted (or killed) first run and a resumed
// run to completion must leave: first is the output after the first run
// (its whole lines), hits1 the hits then, all the output at the end.
// killed says the first run died without recording its work in flight.
func (rc *resumeCase) check(t *testing.T, first, all []byte, hits1 map[string]int, killed bool) {
	t.Helper()
	if !bytes.HasPrefix(all, first) {
		t.Errorf("the resumed run did not append to the first run's records")
	}
	recs1 := parseRecords(t, first)
	recs := parseRecords(t, all)
	byLine1 := map[int][]results.Record{}
	for _, r := range recs1 {
		byLine1[r.Line] = append(byLine1[r.Line], r)
	}
	byLine := map[int][]results.Record{}
	for _, r := range recs {
		byLine[r.Line] = append(byLine[r.Line], r)
	}
	if len(byLine) != rc.lines {
		t.Errorf("records for %d lines, want %d", len(byLine), rc.lines)
	}
	// Bounds on the hits of each URI, summed over its lines.
	lo1, hi1 := map[string]int{}, map[string]int{}
	lo, hi := map[string]int{}, map[string]int{}
	for line, rs := range byLine {
		finals := 0
		for i, r := range rs {
			if final(r) {
				finals++
				if i != len(rs)-1 {
					t.Errorf("line %d has a record after its final one: %+v", line, rs)
				}
			}
		}
		if finals != 1 {
			t.Errorf("line %d has %d final records, want 1: %+v", line, finals, rs)
		}
		if len(byLine1[line]) > 1 {
			t.Errorf("line %d has %d records after the first run", line, len(byLine1[line]))
		}
		uri, ok := rc.uris[line]
		if !ok {
			continue // the invalid line: no request
		}
		switch rs1 := byLine1[line]; {
		case len(rs1) == 1 && final(rs1[0]):
			// Finished in the first run: fetched once, never again.
			lo1[uri]++
			hi1[uri]++
			lo[uri]++
			hi[uri]++
		case len(rs1) == 1 || killed:
			// Cancelled (or lost in flight): maybe sent once before.
			hi1[uri]++
			lo[uri]++
			hi[uri] += 2
		default:
			// Not taken in the first run: fetched by the resumed one.
			lo[uri]++
			hi[uri]++
		}
	}
	now := rc.hits()
	for _, uri := range rc.uris {
		// A request cancelled as the first run ended may reach the target
		// only after hits1 was read: the upper bound of hits1 does not hold
		// for those, so hits1 is checked against hi1 only when they match.
		if h := hits1[uri]; h < lo1[uri] || (lo1[uri] == hi1[uri] && h > hi1[uri]) {
			t.Errorf("%s: %d requests in the first run, want %d..%d", uri, h, lo1[uri], hi1[uri])
		}
		if h := now[uri]; h < lo[uri] || h > hi[uri] {
			t.Errorf("%s: %d requests in all, want %d..%d", uri, h, lo[uri], hi[uri])
		}
	}
	if t.Failed() {
		t.Logf("first run:\n%s", first)
	}
}

// resume runs fetch --resume on out to completion, checks its exit code and
// the records it appended, and returns its stderr.
func (rc *resumeCase) resume(t *testing.T, out string, args []string) string {
	t.Helper()
	before, _ := os.ReadFile(out)
	p := startFetch(t, rc.stdin(args), append([]string{"--resume", "-o", out}, args...)...)
	code := p.wait(t, 20*time.Second)
	after, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The bytes before may have had a torn last line, cut by the resume.
	appended := parseRecords(t, after[min(bytes.LastIndexByte(before, '\n')+1, len(after)):])
	want := ExitOK
	for _, r := range appended {
		if !final(r) {
			t.Errorf("resumed run without interrupt wrote a cancelled record: %+v", r)
		}
		if !r.OK {
			want = ExitNotAllOK
		}
	}
	if code != want {
		t.Errorf("resume: exit code %d, want %d; stderr:\n%s", code, want, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "resumed "+out) {
		t.Errorf("resume: stderr does not say what was resumed:\n%s", p.stderr)
	}
	return p.stderr.String()
}

// stdin is the URL list when args read standard input.
func (rc *resumeCase) stdin(args []string) string {
	if len(args) > 0 && args[len(args)-1] != "-" {
		return ""
	}
	return rc.text
}

// TestResume_interruptAnywhere interrupts runs at random moments, from
// start-up to the final flush, then resumes each to completion: every line
// ends with exactly one final record, no finished URL is fetched again, and
// every output line is whole. The cases of a chosen moment run on each
// transport (the same list but for its path, on one target); the random
// ones on one transport or the other.
func TestResume_interruptAnywhere(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)

	const runs = 12
	for k := range runs {
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		n := 36
		var at time.Duration
		var atLine int // signal when the output has this many lines
		switch k {
		case 0: // right at start-up, maybe before the handler is in place
		case 1, 2: // a tiny input: the signal lands as the run ends
			n = 2
			atLine = 3 + k // all but one line, or all: the final flush
		case 3: // as the output opens and the first URLs start
			at = time.Duration(5+rng.IntN(40)) * time.Millisecond
		default:
			at = time.Duration(rng.IntN(900)) * time.Millisecond
		}
		sig := os.Signal(os.Interrupt)
		if k%4 == 3 {
			sig = syscall.SIGTERM
		}
		grace := []string{"0s", "100ms", "300ms"}[rng.IntN(3)]
		// The cases of a chosen moment run on each transport; the random
		// moments are samples, and take the transports in turns of two,
		// so that each has inputs from a file and from stdin.
		tps := transports
		if k >= 4 {
			tps = transports[k/2%2 : k/2%2+1]
		}
		for _, tp := range tps {
			// Each transport the same case: its own rng, of the same seed.
			rng := rand.New(rand.NewPCG(seed, uint64(k)))
			t.Run(fmt.Sprintf("%d/%s/after=%s,%dlines/grace=%s/%s", k, sig, at, atLine, grace, tp), func(t *testing.T) {
				t.Parallel()
				rc := newResumeCase(target, rng, fmt.Sprint(k, tp), n)
				dir := t.TempDir()
				out := filepath.Join(dir, "out.jsonl")
				args := []string{"--transport", tp, "-c", "4", "--retries", "0", "--grace", grace}
				if k%2 == 0 {
					args = append(args, writeFile(t, dir, "urls.txt", rc.text))
				} else {
					args = append(args, "-")
				}

				p := startFetch(t, rc.stdin(args), append([]string{"-o", out}, args...)...)
				// Not a wait for an event: the signal is to land at an
				// arbitrary moment of the run, and that is what is tested.
				time.Sleep(at)
				if atLine > 0 {
					// Or as the output reaches atLine lines: the run's end.
					waitFor(t, 20*time.Second, fmt.Sprintf("%d lines of output or the run's end", atLine), func() bool {
						data, _ := os.ReadFile(out)
						return bytes.Count(data, []byte("\n")) >= atLine || !p.running()
					}, func() { t.Logf("stderr:\n%s", p.stderr) })
				}
				p.signal(t, sig)
				code := p.wait(t, 20*time.Second)
				first, _ := os.ReadFile(out)
				hits1 := rc.hits()
				switch {
				case code == ExitInterrupted:
					for _, s := range []string{"fetch: interrupted", "jobs", "(interrupted)"} {
						if !strings.Contains(p.stderr.String(), s) {
							t.Errorf("stderr does not contain %q:\n%s", s, p.stderr)
						}
					}
				case code == ExitOK || code == ExitNotAllOK:
					// Done before the signal came.
				case code < 0 && len(first) == 0:
					// Killed before the signal handler was in place: nothing was
					// written then.
				default:
					t.Fatalf("exit code %d, want 130; stderr:\n%s", code, p.stderr)
				}
				t.Logf("first run: exit %d after %s, %d lines", code, time.Since(p.start).Round(time.Millisecond), bytes.Count(first, []byte("\n")))

				rc.resume(t, out, args)
				all, _ := os.ReadFile(out)
				rc.check(t, first, all, hits1, false)
			})
		}
	}
}

// TestResume_afterKill kills runs with SIGKILL at random moments, tears the
// last line as a write cut short would, and resumes: the torn line is
// repaired and said so, and every line ends with exactly one final record.
// One run on each transport.
func TestResume_afterKill(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for k, tp := range transports { // a random moment each: samples
		rng := rand.New(rand.NewPCG(seed, uint64(k)))
		at := time.Duration(200+rng.IntN(600)) * time.Millisecond
		t.Run(fmt.Sprintf("%d/after=%s/%s", k, at, tp), func(t *testing.T) {
			t.Parallel()
			rc := newResumeCase(target, rng, fmt.Sprint("kill", k, tp), 36)
			dir := t.TempDir()
			out := filepath.Join(dir, "out.jsonl")
			args := []string{"-q", "--transport", tp, "-c", "4", "--retries", "0", writeFile(t, dir, "urls.txt", rc.text)}
			p := startFetch(t, "", append([]string{"-o", out}, args...)...)
			// Not a wait for an event: the kill is to land at an
			// arbitrary moment of the run, and that is what is tested.
			time.Sleep(at)
			p.signal(t, os.Kill)
			p.wait(t, 20*time.Second)
			hits1 := rc.hits()

			first, _ := os.ReadFile(out)
			first = first[:bytes.LastIndexByte(first, '\n')+1] // whole lines
			torn := `{"url":"` + target.URL + `/r/torn","input":"`
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(torn)
			f.Close()

			stderr := rc.resume(t, out, args[1:]) // not quiet: the repair is reported
			if !strings.Contains(stderr, "fetch: repaired torn last line of "+out) {
				t.Errorf("resume: stderr does not report the repair:\n%s", stderr)
			}
			all, _ := os.ReadFile(out)
			rc.check(t, first, all, hits1, true)
		})
	}
}

// TestResume_startsFresh resumes into a file that does not exist: the run
// starts from nothing, reading standard input. On each transport.
func TestResume_startsFresh(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			rc := newResumeCase(target, rand.New(rand.NewPCG(1, 2)), "fresh-"+tp, 6)
			out := filepath.Join(t.TempDir(), "out.jsonl")
			rc.resume(t, out, []string{"--transport", tp, "-c", "4", "-"})
			all, _ := os.ReadFile(out)
			rc.check(t, nil, all, map[string]int{}, false)
		})
	}
}

// hangingRun starts a run of 6 URLs that never answer, 4 at a time, with
// a long grace period, on transport tp, and waits until 4 are in flight.
func hangingRun(t *testing.T, tp string) (*proc, string) {
	t.Helper()
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	var urls strings.Builder
	for i := range 6 {
		fmt.Fprintf(&urls, "%s/hang/%d?hang=1\n", target.URL, i)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.jsonl")
	p := startFetch(t, "", "--transport", tp, "-o", out, "-c", "4", "--grace", "30s", writeFile(t, dir, "urls.txt", urls.String()))
	p.waitFor(t, 10*time.Second, "4 requests in flight", func() bool { return target.InFlight() >= 4 })
	return p, out
}

// TestInterrupt_secondStopsNow: the first SIGINT leaves work in flight its
// grace period; a second ends it at once, with every line taken recorded as
// cancelled, whole, and the summary printed. On each transport.
func TestInterrupt_secondStopsNow(t *testing.T) {
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) { testSecondStopsNow(t, tp) })
	}
}

func testSecondStopsNow(t *testing.T, tp string) {
	p, out := hangingRun(t, tp)
	p.signal(t, os.Interrupt)
	// Handled: the second comes after it, not coalesced with it. That the
	// run went on meanwhile shows in "stopping now" below.
	p.stderr.waitFor(t, "finishing work in flight")
	if !p.running() {
		t.Fatalf("the first interrupt did not leave a grace period; stderr:\n%s", p.stderr)
	}
	second := time.Now()
	p.signal(t, os.Interrupt)
	code := p.wait(t, 10*time.Second)
	if took := time.Since(second); took > 3*time.Second {
		t.Errorf("the second interrupt took %s to end the run", took)
	}
	if code != ExitInterrupted {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitInterrupted, p.stderr)
	}
	for _, s := range []string{"finishing work in flight", "stopping now", "fetch: interrupted", "jobs", "cancelled"} {
		if !strings.Contains(p.stderr.String(), s) {
			t.Errorf("stderr does not contain %q:\n%s", s, p.stderr)
		}
	}
	data, _ := os.ReadFile(out)
	recs := parseRecords(t, data)
	if len(recs) != 4 {
		t.Errorf("%d records, want 4 (the lines in flight):\n%s", len(recs), data)
	}
	for _, r := range recs {
		// The target sends nothing: the requests wait for headers.
		if r.Error == nil || r.Error.Kind != results.KindCancelled || r.Error.Phase != results.PhaseHeaders {
			t.Errorf("record not cancelled in phase headers: %+v, error %+v", r, r.Error)
		}
	}
}

// TestInterrupt_third: three interrupts in a row end the run at once,
// leaving whole lines only. On each transport.
func TestInterrupt_third(t *testing.T) {
	for _, tp := range transports {
		t.Run(tp, func(t *testing.T) { testThird(t, tp) })
	}
}

func testThird(t *testing.T, tp string) {
	p, out := hangingRun(t, tp)
	start := time.Now()
	// Each signal after the one before was handled: signals sent at once
	// may be coalesced into one.
	for _, handled := range []string{"finishing work in flight", "stopping now", ""} {
		p.signal(t, os.Interrupt)
		if handled != "" {
			p.stderr.waitFor(t, handled)
		}
	}
	code := p.wait(t, 10*time.Second)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("three interrupts took %s to end the run", took)
	}
	if code != ExitInterrupted {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitInterrupted, p.stderr)
	}
	data, _ := os.ReadFile(out)
	for _, r := range parseRecords(t, data) {
		if final(r) {
			t.Errorf("record not cancelled: %+v", r)
		}
	}
}

// TestResume_interruptedWhileLoading: an interrupt while --resume reads a
// large FILE ends the run (130) with FILE untouched.
func TestResume_interruptedWhileLoading(t *testing.T) {
	dir := t.TempDir()
	prev := `{"url":"http://127.0.0.1:1/a","input":"-","line":1,"ok":true,"error":null}` + "\n"
	out := writeFile(t, dir, "out.jsonl", prev)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ios, stdin, _, stderr := Test()
	stdin.WriteString("http://127.0.0.1:1/a\nhttp://127.0.0.1:1/b\n")
	if code := Run(ctx, ios, []string{"--resume", "-o", out}); code != ExitInterrupted {
		t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitInterrupted, stderr)
	}
	if data, _ := os.ReadFile(out); string(data) != prev {
		t.Errorf("FILE changed:\n%s", data)
	}
}
