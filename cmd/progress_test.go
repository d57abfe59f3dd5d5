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
			stop := startProgress(context.Background(), &out, st, func(context.Context) int64 { return tc.total }, nil)
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
	for _, tc := range []struct {
		name    string
		max     int64
		s       fetch.Stats
		rate    float64
		elapsed time.Duration
		want    string
	}{
		{"known total", 10, s, 2.0, 2500 * time.Millisecond,
			"ok 3 failed 1 in flight 2  40% |████████████                  | (4/10, 2.00 url/s) [2s:3s]"},
		{"done", 4, s, 1234.4, 75 * time.Second,
			"ok 3 failed 1 in flight 2 100% |██████████████████████████████| (4/4, 1234 url/s) [1m15s:0s]"},
		{"nothing moves", 10, s, 0, time.Second,
			"ok 3 failed 1 in flight 2  40% |████████████                  | (4/10, 0.00 url/s) [1s:?]"},
		{"no total", -1, s, 45.67, 2*time.Hour + 3*time.Minute,
			"⠋ ok 3 failed 1 in flight 2 (4/-, 45.7 url/s) [2h3m]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := progressText(tc.max, tc.s, tc.rate, tc.elapsed, 0); got != tc.want {
				t.Errorf("progressText:\n got %q\nwant %q", got, tc.want)
			}
		})
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
	p := &progressLine{w: &out, columns: func() int { return cols }, start: start, max: 1000}
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
	if got := strings.TrimSuffix(lastLine(out.String()), eraseLine); utf8.RuneCountInString(got) != 19 {
		t.Errorf("line on 20 columns: %q (%d runes), want 19", got, utf8.RuneCountInString(got))
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
