package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/limits"
)

// TestInterruptWithBlockedInput: an input that blocks in Read (a pipe or a
// terminal) does not hold up an interrupted run.
func TestInterruptWithBlockedInput(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // lets the abandoned reader go at the end
	go fmt.Fprintf(pw, "%s/a\n", tg.URL)
	e, err := fetch.New(fetch.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	w := &memWriter{}
	rep, err := e.Run(ctx, []fetch.Input{{Name: "-", R: pr}}, w)
	if !errors.Is(err, fetch.ErrInterrupted) || !rep.Interrupted {
		t.Fatalf("err %v, interrupted %v; want interrupted", err, rep.Interrupted)
	}
	// Tolerance: 300ms past the interrupt for scheduling under -race.
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("Run returned %s after start, interrupt at 200ms", el)
	}
	if len(w.recs) != 1 || !w.recs[0].OK {
		t.Errorf("records %+v, want the one line read", w.recs)
	}
}

// TestInterruptStopsAdmitting: after an interrupt no attempt starts: URLs
// waiting for a permit are cancelled at once (phase queue) while the one in
// flight finishes within the grace period.
func TestInterruptStopsAdmitting(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.HostConcurrency = 1
	cfg.Grace = 3 * time.Second
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 6 {
		lines = append(lines, fmt.Sprintf("%s/q/%d?delay=500ms", tg.URL, i))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(250*time.Millisecond, cancel)
	start := time.Now()
	w := &memWriter{}
	rep, err := e.Run(ctx, []fetch.Input{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, w)
	if !errors.Is(err, context.Canceled) || !rep.Interrupted {
		t.Fatalf("err %v, interrupted %v", err, rep.Interrupted)
	}
	if el := time.Since(start); el > 900*time.Millisecond {
		t.Errorf("run took %s; the one request in flight needs 500ms", el)
	}
	if got := tg.Requests(); got != 1 {
		t.Errorf("target saw %d requests after the interrupt stopped admitting; want 1", got)
	}
	var ok, queued int
	for _, r := range w.recs {
		switch {
		case r.OK:
			ok++
		case r.Error.Kind == fetch.KindCancelled && r.Error.Phase == fetch.PhaseQueue && r.Attempts == 0:
			queued++
		default:
			t.Errorf("record %+v error %+v", r, r.Error)
		}
	}
	if ok != 1 {
		t.Errorf("%d ok, want the 1 in flight", ok)
	}
	if ok+queued != len(w.recs) {
		t.Errorf("records %d", len(w.recs))
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(*fetch.Record) error {
	w.n++
	return errors.New("disk full")
}

// TestWriteFailureStopsRun: when records cannot be written, fetching stops
// instead of going on with nothing recorded.
func TestWriteFailureStopsRun(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Rate = limits.Rate{N: 10, Per: time.Second}
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("%s/w/%d", tg.URL, i))
	}
	start := time.Now()
	_, err = e.Run(context.Background(), []fetch.Input{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, &failingWriter{})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err %v, want the write error", err)
	}
	// At 10/s the 30 URLs take 3s; the run must stop after the first record.
	if el := time.Since(start); el > time.Second {
		t.Errorf("run went on for %s after its output failed", el)
	}
	if got := tg.Requests(); got > 3 {
		t.Errorf("target saw %d requests", got)
	}
}

// TestQueueFailureIsNoAttempt: a URL whose deadline ends while it waits for
// a permit made no attempt.
func TestQueueFailureIsNoAttempt(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Rate = limits.Rate{N: 1, Per: time.Minute}
	cfg.Timeout = 300 * time.Millisecond
	recs, rep := run(t, cfg, tg.URL+"/1", tg.URL+"/2")
	var queued *fetch.Record
	for _, r := range recs {
		if !r.OK {
			queued = r
		}
	}
	if queued == nil || queued.Attempts != 0 || queued.Proxy != "" || queued.Error.Phase != fetch.PhaseQueue || queued.Error.Kind != fetch.KindDeadline {
		t.Fatalf("record %+v error %+v; want 0 attempts, queue/deadline", queued, queued.Error)
	}
	if a := rep.Proxies["direct"].Attempts; a != 1 {
		t.Errorf("report counts %d attempts, want 1", a)
	}
}
