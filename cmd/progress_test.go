package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// fakeStats is a statser whose numbers the test sets.
type fakeStats struct {
	mu sync.Mutex
	s  fetch.Stats
}

func (f *fakeStats) Stats() fetch.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.s
}

func (f *fakeStats) set(s fetch.Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.s = s
}

// lockedBuffer is a bytes.Buffer safe for the bar's goroutine and the
// test, which it tells of every write.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes chan struct{} // a value after writes, if made
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{writes: make(chan struct{}, 1)} }

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case l.writes <- struct{}{}:
	default:
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until l holds want, and returns what it holds.
func (l *lockedBuffer) waitFor(t *testing.T, want string) string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		if s := l.String(); strings.Contains(s, want) {
			return s
		}
		select {
		case <-l.writes:
		case <-timeout:
			t.Fatalf("no %q written in 10s:\n%q", want, l.String())
		}
	}
}

// lastDraw is the text of the last draw in s, as the terminal shows it:
// from the last "\r", without the erasing that ends it.
func lastDraw(s string) string {
	s = s[strings.LastIndex(s, "\r")+1:]
	s = strings.TrimSuffix(s, "\x1b[0K")
	return strings.TrimSuffix(s, eraseLine)
}

// TestProgressBar runs the bar on ticks the test sends: a spinner until the
// total is known, a bar from then on, and nothing left on the line once
// stopped.
func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int64 // -1: standard input
		late  bool  // the total comes after the first draw
		want  []string
	}{
		{"known total", 10, false, []string{"  40% |############                  |  (4/10, "}},
		{"standard input: no total", -1, false, []string{"⠋ ", "(4/-, ", " url/s) ok 3 failed 1 in flight 2 ["}},
		{"the total comes late: a spinner, then the bar", 10, true, []string{"(4/-, ", "  40% |####", "(4/10, "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := newLockedBuffer()
			st := &fakeStats{}
			st.set(fetch.Stats{Done: 4, OK: 3, Failed: 1, InFlight: 2})
			release := make(chan struct{})
			total := func(ctx context.Context) int64 {
				if tc.late {
					<-release
				}
				return tc.total
			}
			ticks := make(chan time.Time)
			stop := runProgress(context.Background(), &lockedWriter{w: out}, st, total, nil, ticks)
			if tc.late {
				ticks <- time.Now()
				out.waitFor(t, tc.want[0])
				close(release)
			}
			out.waitFor(t, tc.want[len(tc.want)-1])
			ticks <- time.Now() // once more: the bar or spinner is drawn again
			stop()
			got := out.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("progress output lacks %q:\n%q", w, got)
				}
			}
			if !strings.HasSuffix(got, "\r"+eraseLine) {
				t.Errorf("stop left the line drawn: %q", got)
			}
		})
	}
}

// TestProgressBarFits draws on terminals from 1 to 200 columns wide: the
// line, as the terminal shows it, takes at most cols-1 columns (the last
// would wrap on some), and on a terminal too narrow for any line nothing
// is left drawn. On 20 columns the bar shows; on 200 the whole line does,
// with the full bar.
func TestProgressBarFits(t *testing.T) {
	small := fetch.Stats{Done: 4, OK: 3, Failed: 1, InFlight: 2}
	big := fetch.Stats{Done: 1246912, OK: 1234567, Failed: 12345, InFlight: 64}
	for _, tc := range []struct {
		name  string
		max   int64
		s     fetch.Stats
		on20  string // the line on 20 columns
		on80  string // the line on 80 columns
		whole string // the line on 200 columns
	}{
		{"spinner", -1, small, "⠋   ",
			"⠋  (4/-, 4.00 url/s) ok 3 failed 1 in flight 2 [1s] ",
			"⠋  (4/-, 4.00 url/s) ok 3 failed 1 in flight 2 [1s] "},
		// On 20 columns the bar takes the room of the text, whose first
		// field does not fit.
		{"a bar", 10, small, "  40% |###     |   ",
			"  40% |######          |  (4/10, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:1s] ",
			"  40% |############                  |  (4/10, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:1s] "},
		// On 80 columns the bar narrows, then the text is cut at a space:
		// done/total and the rate stay.
		{"a big run", 3000000, big, "  41% |###     |   ",
			"  41% |##   |  (1246912/3000000, 1246912 url/s) ok 1234567 failed 12345 ",
			"  41% |############                  |  (1246912/3000000, 1246912 url/s) ok 1234567 failed 12345 in flight 64 [1s:1s] "},
		{"done", 4, small, " 100% |########|   ",
			" 100% |#################|  (4/4, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:0s] ",
			" 100% |##############################|  (4/4, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:0s] "},
		{"the count outgrew the total", 3, small, " 100% |########|   ",
			" 100% |#################|  (4/4, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:0s] ",
			" 100% |##############################|  (4/4, 4.00 url/s) ok 3 failed 1 in flight 2 [1s:0s] "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for cols := 1; cols <= 200; cols++ {
				var out bytes.Buffer
				start := time.Unix(1000, 0)
				p := newProgressBar(&lockedWriter{w: &out}, func() int { return cols }, start)
				p.max = tc.max
				p.draw(start.Add(time.Second), tc.s)
				got := lastDraw(out.String())
				if n := utf8.RuneCountInString(got); n > cols-1 {
					t.Fatalf("on %d columns the line takes %d: %q", cols, n, got)
				}
				for _, w := range []struct {
					cols int
					want string
				}{{20, tc.on20}, {80, tc.on80}, {200, tc.whole}} {
					if cols == w.cols && got != w.want {
						t.Errorf("on %d columns:\n got %q\nwant %q", cols, got, w.want)
					}
				}
			}
		})
	}
}

// TestProgressLine draws on a buffer with a clock the test moves: each
// draw is one write that returns to the start of the line and erases what
// a longer line left, the rate is over the last rateWindow draws, a count
// that outgrows the total grows the bar's total and the bar keeps being
// drawn, the spinner turns a frame a draw, and clear erases the line.
func TestProgressLine(t *testing.T) {
	var out bytes.Buffer
	start := time.Unix(1000, 0)
	p := newProgressBar(&lockedWriter{w: &out}, nil, start)
	p.max = 1000
	at := func(d time.Duration) time.Time { return start.Add(d) }

	p.draw(at(time.Second), fetch.Stats{Done: 100, OK: 100})
	first := out.String()
	if !strings.HasPrefix(first, "\r") || !strings.HasSuffix(first, "\x1b[0K") || !strings.Contains(first, "(100/1000, 100 url/s)") {
		t.Fatalf("first draw %q", first)
	}
	// Rate: 100 URLs a second for rateWindow draws, then 10 a second; once
	// the ring has turned over, the rate is the recent one.
	done := int64(100)
	for i := 2; i <= rateWindow+1; i++ {
		done += 100
		p.draw(at(time.Duration(i)*time.Second), fetch.Stats{Done: done})
	}
	for i := rateWindow + 2; i <= 2*rateWindow+2; i++ {
		out.Reset()
		done += 10
		p.draw(at(time.Duration(i)*time.Second), fetch.Stats{Done: done})
		if n := strings.Count(out.String(), "\r"); n != 1 {
			t.Fatalf("draw %d wrote %d lines: %q", i, n, out.String())
		}
	}
	got := lastDraw(out.String())
	if !strings.Contains(got, "10.0 url/s") {
		t.Errorf("rate after the window turned over: %q, want 10.0 url/s", got)
	}
	if p.max != done || !strings.HasPrefix(got, " 100% |") || !strings.Contains(got, fmt.Sprintf("(%d/%d, ", done, done)) {
		t.Errorf("total %d after the count outgrew it, want %d: %q", p.max, done, got)
	}
	// Past the total the bar is still drawn, with the new counts.
	out.Reset()
	p.draw(at(200*time.Second), fetch.Stats{Done: done + 1, OK: 7})
	if got := lastDraw(out.String()); !strings.Contains(got, fmt.Sprintf("(%d/%d, ", done+1, done+1)) || !strings.Contains(got, "ok 7 ") {
		t.Errorf("a draw after the bar was full: %q", got)
	}

	// The spinner turns one frame a draw.
	p = newProgressBar(&lockedWriter{w: &out}, nil, start)
	for i := range len(spinnerFrames) + 1 { // once round and one more
		out.Reset()
		p.draw(at(time.Duration(101+i)*time.Second), fetch.Stats{Done: done})
		want := spinnerFrames[i%len(spinnerFrames)]
		if got := lastDraw(out.String()); !strings.HasPrefix(got, want+" ") {
			t.Errorf("draw %d: %q, want the spinner frame %q", i, got, want)
		}
	}

	out.Reset()
	p.clear()
	if want := "\r" + eraseLine; out.String() != want {
		t.Errorf("clear wrote %q, want %q", out.String(), want)
	}
	out.Reset()
	p.clear()
	if out.Len() != 0 {
		t.Errorf("clear of a clear line wrote %q", out.String())
	}
}

// TestWarningOverBar: whatever is written to the bar's writer while the
// bar is up (a warning, an interrupt's message) erases the bar's line
// first, so that it does not land after the bar's text; the next draw puts
// the bar back on the line below it. Without the bar, a warning is the
// line alone, and clear writes nothing.
func TestWarningOverBar(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int64
		want string // in the redrawn bar
	}{
		{"bar", 10, "(5/10, "},
		{"spinner", -1, "(5/-, "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			ws := newWarnings(&lockedWriter{w: &out}, false)
			p := newProgressBar(ws.out, nil, time.Unix(1000, 0))
			p.max = tc.max

			p.draw(time.Unix(1001, 0), fetch.Stats{Done: 4, OK: 4})
			ws.warn("proxy p1 refused")
			ws.warn("proxy p2 refused")
			p.draw(time.Unix(1002, 0), fetch.Stats{Done: 5, OK: 5})
			lines := strings.Split(out.String(), "\n")
			if len(lines) != 3 {
				t.Fatalf("got %d lines, want the two warnings' and the bar's: %q", len(lines), out.String())
			}
			if want := "\r" + eraseLine + "fetch: warning: proxy p1 refused"; !strings.HasSuffix(lines[0], want) {
				t.Errorf("the first warning's line is %q, want it to end in %q", lines[0], want)
			}
			if want := "fetch: warning: proxy p2 refused"; lines[1] != want {
				t.Errorf("the second warning's line is %q, want %q: the bar was erased already", lines[1], want)
			}
			if !strings.HasPrefix(lines[2], "\r") || !strings.Contains(lines[2], tc.want) {
				t.Errorf("the bar is not redrawn below the warnings: %q", lines[2])
			}

			out.Reset()
			p.clear()
			ws.warn("proxy p1 refused")
			p.clear()
			if want := "\r" + eraseLine + "fetch: warning: proxy p1 refused\n"; out.String() != want {
				t.Errorf("after clear: %q, want %q", out.String(), want)
			}
		})
	}
}

// TestProgressBarWidth: on a terminal of the same width the bar only
// narrows, so that it does not come and go as the rate and times change
// length; a terminal of another width starts again from the full bar.
func TestProgressBarWidth(t *testing.T) {
	var out bytes.Buffer
	cols := 90
	start := time.Unix(1000, 0)
	p := newProgressBar(&lockedWriter{w: &out}, func() int { return cols }, start)
	p.max = 30000
	bar := func() int {
		l := lastDraw(out.String())
		i, j := strings.IndexByte(l, '|'), strings.LastIndexByte(l, '|')
		if i < 0 || j <= i {
			return -1
		}
		return j - i - 1
	}
	s := fetch.Stats{Done: 15000, OK: 14999, Failed: 1, InFlight: 64}
	p.draw(start.Add(50*time.Second), s)
	wide := bar()
	if wide < minBar+2 || wide >= barWidth {
		t.Fatalf("bar %d wide on 90 columns, want from %d to %d: %q", wide, minBar+2, barWidth-1, lastDraw(out.String()))
	}
	s.Failed = 101 // two more columns of text
	p.draw(start.Add(50*time.Second), s)
	narrower := bar()
	if narrower != wide-2 {
		t.Fatalf("bar %d wide with two columns more text, want %d: %q", narrower, wide-2, lastDraw(out.String()))
	}
	s.Failed = 1
	p.draw(start.Add(50*time.Second), s)
	if got := bar(); got != narrower {
		t.Errorf("bar %d wide with the shorter text again, want it to stay %d", got, narrower)
	}
	cols = 120
	p.draw(start.Add(53*time.Second), s)
	if got := bar(); got != barWidth {
		t.Errorf("bar %d wide on 120 columns, want %d", got, barWidth)
	}
}

// TestProgressTotal: the total is the number of lines the run takes: with
// --shard K/N the lines of shard K (by fetch.Shard.Of), with --resume
// those that the results file did not finish, with both the lines of the
// shard left. The want column is counted here, line by line, from the
// list as written.
func TestProgressTotal(t *testing.T) {
	dir := t.TempDir()
	var list strings.Builder
	list.WriteString("\ufeff# a list\n\n")
	var lines []int      // the URL lines' numbers
	text := []string{""} // by line number
	for i := range 300 {
		l := fmt.Sprintf("http://127.0.0.1:9/%d", i)
		switch i % 50 {
		case 7:
			l = "   # " + l
		case 8:
			l = "\t"
		case 9:
			l = "  " + l + " \r"
		}
		fmt.Fprintln(&list, l)
	}
	for _, l := range strings.Split(list.String(), "\n") {
		text = append(text, l)
	}
	for n, l := range text {
		if s := strings.TrimSpace(strings.TrimPrefix(l, "\ufeff")); n > 0 && s != "" && s[0] != '#' {
			lines = append(lines, n)
		}
	}
	urls := writeFile(t, dir, "urls.txt", list.String())

	// The results of an earlier run: every third URL line finished, every
	// fifth cancelled (taken again), one finished under a URL the line no
	// longer holds (taken again), and lines of another input.
	var prior strings.Builder
	finished := map[int]bool{}
	rec := func(input string, n int, u, kind string) {
		errField := "null"
		if kind != "" {
			errField = `{"phase":"request","kind":"` + kind + `","message":"x"}`
		}
		fmt.Fprintf(&prior, `{"url":%q,"input":%q,"line":%d,"ok":%v,"error":%s}`+"\n", u, input, n, kind == "", errField)
	}
	for i, n := range lines {
		u := strings.TrimSpace(text[n])
		switch {
		case i == 4:
			rec(urls, n, u+"/changed", "")
		case i%3 == 0:
			rec(urls, n, u, "")
			finished[n] = true
		case i%5 == 0:
			rec(urls, n, u, "cancelled")
		}
		rec("other.txt", n, u, "")
	}
	done, err := results.LoadDone(strings.NewReader(prior.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(finished) < 50 {
		t.Fatalf("only %d lines finished", len(finished))
	}

	for _, tc := range []struct {
		name   string
		names  []string
		shard  input.Shard
		resume bool
		want   int64 // -1: unknown; else counted from the lines
	}{
		{"every line", []string{urls}, input.Shard{}, false, 0},
		{"shard 1/2", []string{urls}, input.Shard{K: 1, N: 2}, false, 0},
		{"shard 2/2", []string{urls}, input.Shard{K: 2, N: 2}, false, 0},
		{"shard 3/7", []string{urls}, input.Shard{K: 3, N: 7}, false, 0},
		{"resume", []string{urls}, input.Shard{}, true, 0},
		{"resume shard 1/2", []string{urls}, input.Shard{K: 1, N: 2}, true, 0},
		{"resume shard 2/3", []string{urls}, input.Shard{K: 2, N: 3}, true, 0},
		{"standard input", []string{urls, "-"}, input.Shard{}, false, -1},
		{"a file gone", []string{urls, filepath.Join(dir, "gone.txt")}, input.Shard{}, false, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want == 0 {
				for _, n := range lines {
					inShard := tc.shard.N == 0 || tc.shard.Of(urls, n, []byte(strings.TrimPrefix(text[n], "\ufeff"))) == tc.shard.K
					if inShard && !(tc.resume && finished[n]) {
						want++
					}
				}
			}
			var d *results.DoneSet
			if tc.resume {
				d = done
			}
			if got := linesTaken(context.Background(), tc.names, tc.shard, d, 0); got != want {
				t.Errorf("total %d, want %d", got, want)
			}
		})
	}
}

// TestProgressTotalMatchesRun holds the total to the engine: over lines of
// every kind (blank, comments, byte order marks on any line, URLs shown
// otherwise than written, lines that are not fetched, long lines), the
// total is the number of records each run writes, sharded and resumed.
func TestProgressTotalMatchesRun(t *testing.T) {
	srv := okServer(t)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	host, port := u.Host, u.Port()
	base := srv.URL
	lines := []string{
		"\ufeff# a list", "", "   ",
		"  " + base + "/spaced\t",
		"HTTP://" + host + "/upper",
		"http://user:pw@" + host + "/user",
		base + "/frag#x",
		"http://[::ffff:127.0.0.1]:" + port + "/v6",
		"\ufeff" + base + "/bom",
		"\ufeff",
		"\ufeff# a comment after a BOM",
		base + "/crlf\r",
		"ftp://" + host + "/ftp",
		`{"url":"` + base + `/json"}`,
		"http://127.0.0.1:99999/port",
		"http://a:b:80/colons",
		"not a url",
		"http://user:pw@" + host + "/" + strings.Repeat("a", 9000),
		base + "/" + strings.Repeat("b", 20000) + "@x",
		base + "/" + strings.Repeat("c", input.MaxLineBytes-len(base)-1), // the longest line fetched
		base + "/" + strings.Repeat("d", input.MaxLineBytes-len(base)),   // one byte more
		strings.Repeat(" ", 20000) + base + "/after-space",
	}
	for i := range 120 {
		lines = append(lines, fmt.Sprintf("%s/%d", base, i))
	}
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", strings.Join(lines, "\n")) // the last line without a newline
	out := filepath.Join(dir, "out.jsonl")

	ctx := context.Background()
	for _, step := range []struct {
		name   string
		shard  input.Shard
		resume bool
	}{
		{"shard 1/2", input.Shard{K: 1, N: 2}, false},
		{"resume shard 2/3", input.Shard{K: 2, N: 3}, true},
		{"resume", input.Shard{}, true},
		{"resume again", input.Shard{}, true},
	} {
		var before []byte
		var done *results.DoneSet
		args := []string{"-q", "-o", out}
		if step.resume {
			if before, err = os.ReadFile(out); err != nil {
				t.Fatal(err)
			}
			if done, err = results.LoadDone(bytes.NewReader(before)); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--resume")
		}
		if step.shard.N > 0 {
			args = append(args, "--shard", step.shard.String())
		}
		want := linesTaken(ctx, []string{urls}, step.shard, done, 0)
		if step.name == "resume again" && want != 0 {
			t.Errorf("%s: total %d, want 0", step.name, want)
		} else if step.name != "resume again" && want < 1 {
			t.Errorf("%s: total %d, want more lines", step.name, want)
		}
		ios, _, _, stderr := Test()
		if code := Run(ctx, ios, append(args, urls)); code != ExitOK && code != ExitNotAllOK {
			t.Fatalf("%s: exit %d; stderr:\n%s", step.name, code, stderr)
		}
		after, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(bytes.Count(after[len(before):], []byte("\n"))); got != want {
			t.Errorf("%s: the run wrote %d records, the total is %d", step.name, got, want)
		}
	}
}

// TestRun_progressTotal: a run with --shard and --resume on a terminal
// shows the lines it takes as its total.
func TestRun_progressTotal(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before srv.Close, which waits for the handlers

	dir := t.TempDir()
	shard := input.Shard{K: 1, N: 2}
	var list, prior strings.Builder
	var want int64
	for n := 1; n <= 100; n++ {
		u := fmt.Sprintf("%s/%d", srv.URL, n)
		fmt.Fprintln(&list, u)
		if shard.Of("urls.txt", n, []byte(u)) != shard.K {
			continue
		}
		if n%4 == 0 {
			fmt.Fprintf(&prior, `{"url":%q,"input":"urls.txt","line":%d,"ok":true,"error":null}`+"\n", u, n)
			continue
		}
		want++
	}
	writeFile(t, dir, "urls.txt", list.String())
	out := writeFile(t, dir, "out.jsonl", prior.String())
	t.Chdir(dir) // the input named as given: urls.txt

	stderr := newLockedBuffer()
	ios := &IOStreams{In: &bytes.Buffer{}, Out: &bytes.Buffer{}, ErrOut: stderr}
	ios.SetStderrTTY(true)
	code := make(chan int, 1)
	go func() {
		code <- Run(context.Background(), ios, []string{"--shard", shard.String(), "--resume", "-o", out, "urls.txt"})
	}()
	stderr.waitFor(t, "/"+strconv.FormatInt(want, 10)+", ")
	free()
	if c := <-code; c != ExitOK {
		t.Fatalf("exit %d; stderr:\n%s", c, stderr)
	}
}
