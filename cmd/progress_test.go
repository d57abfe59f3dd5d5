package cmd

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch"
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

// lockedBuffer is a bytes.Buffer safe for the bar's goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestProgressBar(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int64
		want  []string
	}{
		{"known total", 10, []string{"ok 3 failed 1 in flight 2", "(4/10, ", "url/s"}},
		{"standard input: no total", -1, []string{"ok 3 failed 1 in flight 2", "(4/-, ", "url/s"}}, // done of an unknown total
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out lockedBuffer
			st := &fakeStats{}
			stop := startProgress(context.Background(), &lockedWriter{w: &out}, st, func(context.Context) int64 { return tc.total }, nil)
			st.set(fetch.Stats{Done: 4, OK: 3, Failed: 1, InFlight: 2})
			deadline := time.Now().Add(3 * time.Second)
			for !strings.Contains(out.String(), tc.want[0]) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			stop()
			got := out.String()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("progress output lacks %q:\n%q", w, got)
				}
			}
		})
	}
}

func TestProgressText(t *testing.T) {
	s := fetch.Stats{Done: 4, OK: 3, Failed: 1, InFlight: 2}
	big := fetch.Stats{Done: 1246912, OK: 1234567, Failed: 12345, InFlight: 64}
	for _, tc := range []struct {
		name    string
		max     int64
		s       fetch.Stats
		rate    float64
		elapsed time.Duration
		cols    int
		want    string
	}{
		{"known total", 10, s, 2.0, 2500 * time.Millisecond, 0,
			" 40% |############                  | (4/10, 2.00 url/s) ok 3 failed 1 in flight 2 [2s:3s]"},
		{"done", 4, s, 1234.4, 75 * time.Second, 0,
			"100% |##############################| (4/4, 1234 url/s) ok 3 failed 1 in flight 2 [1m15s:0s]"},
		{"nothing moves", 10, s, 0, time.Second, 0,
			" 40% |############                  | (4/10, 0.00 url/s) ok 3 failed 1 in flight 2 [1s:?]"},
		{"no total", -1, s, 45.67, 2*time.Hour + 3*time.Minute, 0,
			"⠋ (4/-, 45.7 url/s) ok 3 failed 1 in flight 2 [2h3m]"},
		{"count past the total", 3, s, 1, time.Second, 0,
			"100% |##############################| (4/3, 1.00 url/s) ok 3 failed 1 in flight 2 [1s:0s]"},
		{"rates round up into the next form", 10, s, 99.96, time.Second, 0,
			" 40% |############                  | (4/10, 100 url/s) ok 3 failed 1 in flight 2 [1s:0s]"},
		{"a time left too long to show", 1 << 40, s, 0.001, time.Second, 0,
			"  0% |                              | (4/1099511627776, 0.00 url/s) ok 3 failed 1 in flight 2 [1s:?]"},
		// 80 columns and a big run: the bar narrows to what is left.
		{"80 columns, a narrower bar", 30000, fetch.Stats{Done: 15000, OK: 14999, Failed: 1, InFlight: 64}, 300, 50 * time.Second, 80,
			" 50% |###   | (15000/30000, 300 url/s) ok 14999 failed 1 in flight 64 [50s:50s]"},
		// Bigger still: the bar goes, then the times are cut; done/total
		// and the rate stay.
		{"80 columns, no room for a bar", 3000000, big, 30000, 100 * time.Second, 80,
			" 41% (1246912/3000000, 30000 url/s) ok 1234567 failed 12345 in flight 64"},
		{"2 columns, a bar", 10, s, 2, time.Second, 2, ""},
		{"2 columns, a spinner", -1, s, 2, time.Second, 2, "⠋"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := progressText(tc.max, tc.s, tc.rate, tc.elapsed, 0, tc.cols, barWidth)
			if got != tc.want {
				t.Errorf("progressText:\n got %q\nwant %q", got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("progressText %q is not valid UTF-8", got)
			}
			if n := utf8.RuneCountInString(got); tc.cols > 0 && n > tc.cols-1 {
				t.Errorf("progressText on %d columns is %d runes", tc.cols, n)
			}
		})
	}
}

// TestProgressTextFits checks every width from 1 to past the whole line:
// the line takes at most cols-1 runes, is valid UTF-8, is cut at a space
// (never after one), and a line that fits in cols-1 is left whole.
func TestProgressTextFits(t *testing.T) {
	s := fetch.Stats{Done: 4, OK: 3, Failed: 1, InFlight: 2}
	for _, max := range []int64{10, -1} {
		for frame := range 3 {
			whole, _ := progressText(max, s, 2, time.Second, frame, 0, barWidth)
			n := utf8.RuneCountInString(whole)
			for cols := 1; cols <= n+2; cols++ {
				got, _ := progressText(max, s, 2, time.Second, frame, cols, barWidth)
				if !utf8.ValidString(got) || utf8.RuneCountInString(got) > cols-1 {
					t.Fatalf("max %d frame %d on %d columns: %q", max, frame, cols, got)
				}
				if cols > n && got != whole {
					t.Errorf("max %d on %d columns: %q, want the whole line %q", max, cols, got, whole)
				}
				if max < 0 && !strings.HasPrefix(whole, got) {
					t.Errorf("spinner line on %d columns: %q, not the start of %q", cols, got, whole)
				}
				if strings.HasSuffix(got, " ") {
					t.Errorf("line on %d columns ends in a space: %q", cols, got)
				}
			}
		}
	}
}

// TestProgressLine draws on a buffer with a clock the test moves: each
// draw writes over the last one, erasing what a longer line left, the
// rate is over the last rateWindow draws, a narrow terminal gets a line cut
// to fit, a count that outgrows the total grows the bar's total, and clear
// erases the line.
func TestProgressLine(t *testing.T) {
	var out bytes.Buffer
	cols := 0
	start := time.Unix(1000, 0)
	p := &progressLine{w: &lockedWriter{w: &out}, columns: func() int { return cols }, start: start, max: 1000}
	at := func(d time.Duration) time.Time { return start.Add(d) }

	p.draw(at(time.Second), fetch.Stats{Done: 100, OK: 100})
	first := out.String()
	if !strings.HasPrefix(first, "\r") || !strings.Contains(first, "(100/1000, 100 url/s)") {
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
		done += 10
		p.draw(at(time.Duration(i)*time.Second), fetch.Stats{Done: done})
	}
	if got := lastLine(out.String()); !strings.Contains(got, "10.0 url/s") {
		t.Errorf("rate after the window turned over: %q, want 10.0 url/s", got)
	}
	if p.max != done {
		t.Errorf("total %d after the count outgrew it, want %d", p.max, done)
	}

	out.Reset()
	cols = 20
	p.draw(at(100*time.Second), fetch.Stats{Done: done})
	if got := strings.TrimSuffix(lastLine(out.String()), eraseLine); utf8.RuneCountInString(got) > 19 || !strings.HasPrefix(got, "100% (") {
		t.Errorf("line on 20 columns: %q (%d runes), want at most 19, the percentage first", got, utf8.RuneCountInString(got))
	}
	cols = 0

	// The spinner turns one frame a draw.
	p.max = -1
	frames := []rune(spinner)
	f0 := p.frame
	for i := range len(frames) + 1 { // once round and one more
		out.Reset()
		p.draw(at(time.Duration(101+i)*time.Second), fetch.Stats{Done: done})
		want := frames[(f0+i)%len(frames)]
		if got, _ := utf8.DecodeRuneInString(lastLine(out.String())); got != want {
			t.Errorf("draw %d: spinner %q, want %q", i, got, want)
		}
	}
	if !strings.HasSuffix(out.String(), eraseLine) {
		t.Errorf("a draw does not erase what a longer line left: %q", out.String())
	}

	out.Reset()
	p.clear()
	if want := "\r" + eraseLine; out.String() != want {
		t.Errorf("clear wrote %q, want %q", out.String(), want)
	}
}

// lastLine is what the last draw in s put on the terminal.
func lastLine(s string) string { return s[strings.LastIndex(s, "\r")+1:] }

// TestWarningOverBar: whatever is written to the bar's writer while the
// bar is up (a warning, an interrupt's message) erases the bar's line
// first, so that it does not land after the bar's text; the next draw puts
// the bar back on the line below it. Without the bar, a warning is the
// line alone, and clear writes nothing.
func TestWarningOverBar(t *testing.T) {
	var out bytes.Buffer
	ws := newWarnings(&lockedWriter{w: &out}, false)
	p := &progressLine{w: ws.out, start: time.Unix(1000, 0), max: 10}

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
	if !strings.HasPrefix(lines[2], "\r") || !strings.Contains(lines[2], "(5/10, ") {
		t.Errorf("the bar is not redrawn below the warnings: %q", lines[2])
	}

	out.Reset()
	p.clear()
	ws.warn("proxy p1 refused")
	p.clear()
	if want := "\r" + eraseLine + "fetch: warning: proxy p1 refused\n"; out.String() != want {
		t.Errorf("after clear: %q, want %q", out.String(), want)
	}
}

// TestProgressBarWidth: on a terminal of the same width the bar only
// narrows, so that it does not come and go as the rate and times change
// length; a terminal of another width starts again from the full bar.
func TestProgressBarWidth(t *testing.T) {
	var out bytes.Buffer
	cols := 90
	start := time.Unix(1000, 0)
	p := &progressLine{w: &lockedWriter{w: &out}, columns: func() int { return cols }, start: start, max: 30000}
	bar := func() int {
		l := lastLine(out.String())
		i, j := strings.IndexByte(l, '|'), strings.LastIndexByte(l, '|')
		if i < 0 || j <= i {
			return 0
		}
		return j - i - 1
	}
	s := fetch.Stats{Done: 15000, OK: 14999, Failed: 1, InFlight: 64}
	p.draw(start.Add(50*time.Second), s)
	wide := bar()
	if wide < minBar+2 {
		t.Fatalf("bar %d wide on 90 columns, want at least %d: %q", wide, minBar+2, lastLine(out.String()))
	}
	s.Failed = 101 // two more columns of text
	p.draw(start.Add(50*time.Second), s)
	narrower := bar()
	if narrower != wide-2 {
		t.Fatalf("bar %d wide with two columns more text, want %d: %q", narrower, wide-2, lastLine(out.String()))
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
