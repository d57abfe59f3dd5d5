package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// writeCounter is a lockedBuffer (hostile_test.go) that also counts the
// writes it is given and, if wrote is not nil, tells of each on it (a
// send that would block is dropped: one pending tells of all since).
type writeCounter struct {
	lockedBuffer
	writes atomic.Int64
	wrote  chan struct{}
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes.Add(1)
	n, err := w.lockedBuffer.Write(p)
	if w.wrote != nil {
		select {
		case w.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

// lines returns the lines written so far and the writes they took.
func (w *writeCounter) lines() (int, int) {
	return strings.Count(w.String(), "\n"), int(w.writes.Load())
}

// TestRecordsAreNotStale: a finished URL's record reaches the output
// while a slow URL is still in flight, within the flush delay (50 ms),
// not when the run ends. Tolerance: 2 s, for a loaded machine; the slow
// URL takes 10 s, and the run is cut short once the record is seen.
func TestRecordsAreNotStale(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 2
	cfg.Grace = 0 // the slow URL is cut short at once
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	out := &writeCounter{wrote: make(chan struct{}, 1)}
	w := results.NewJSONLWriter(out)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	in := tg.URL + "/slow?delay=10s\n" + tg.URL + "/fast\n"
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(ctx, []input.Source{{Name: "u", R: strings.NewReader(in)}}, w)
		done <- err
	}()
	late := time.NewTimer(2 * time.Second)
	defer late.Stop()
	for n := 0; n < 1; n, _ = out.lines() {
		select {
		case <-out.wrote:
		case <-late.C:
			t.Fatal("no record written within 2 s while a URL was in flight")
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, fetch.ErrInterrupted) {
		t.Fatalf("run: %v, want interrupted", err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _ := out.lines(); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

// TestRecordsAreWrittenInBlocks: a fast run does not write each record,
// or each few, on its own: 2,000 records of a few hundred bytes, finished
// within a second or so, take a handful of writes of up to 64 KiB.
func TestRecordsAreWrittenInBlocks(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 16
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const urls = 2000
	var in strings.Builder
	for i := range urls {
		fmt.Fprintf(&in, "%s/b/%d?size=10\n", tg.URL, i)
	}
	out := &writeCounter{}
	w := results.NewJSONLWriter(out)
	start := time.Now()
	rep, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(in.String())}}, w)
	if err != nil || rep.OK != urls {
		t.Fatalf("err %v, %d of %d ok", err, rep.OK, urls)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	n, writes := out.lines()
	// At most one write per 64 KiB, one per flush delay, and the last.
	most := len(out.String())/(64<<10) + int(elapsed/(50*time.Millisecond)) + 2
	if n != urls || writes > most {
		t.Errorf("%d records in %d writes over %v, want %d in at most %d", n, writes, elapsed, urls, most)
	}
	t.Logf("%d records, %d bytes, in %d writes over %v", n, len(out.String()), writes, elapsed)
}
