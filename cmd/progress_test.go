package cmd

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

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
			stop := startProgress(context.Background(), &out, st, func(context.Context) int64 { return tc.total })
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
