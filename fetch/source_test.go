package fetch_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// sliceSource hands out lines from a slice, and checks that Written is
// told only of records already flushed by w.
type sliceSource struct {
	t     *testing.T
	lines []*input.Line
	w     *flushCounter

	mu      sync.Mutex
	written map[int]int // by line number
}

func (s *sliceSource) Next(ctx context.Context) (*input.Line, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(s.lines) == 0 {
		return nil, io.EOF
	}
	l := s.lines[0]
	s.lines = s.lines[1:]
	return l, nil
}

func (s *sliceSource) Written(recs []*results.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	flushed := s.w.flushedLines()
	for _, r := range recs {
		if !flushed[r.Line] {
			s.t.Errorf("Written told of line %d before its record was flushed", r.Line)
		}
		if r.Input != "queued.txt" {
			s.t.Errorf("line %d: input %q, want the source's queued.txt", r.Line, r.Input)
		}
		s.written[r.Line]++
	}
}

// flushCounter is a RecordWriter with a Flush that notes which records it
// has flushed.
type flushCounter struct {
	mu               sync.Mutex
	pending, flushed []int
}

func (w *flushCounter) Write(r *results.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = append(w.pending, r.Line)
	return nil
}

func (w *flushCounter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.flushed = append(w.flushed, w.pending...)
	w.pending = w.pending[:0]
	return nil
}

func (w *flushCounter) flushedLines() map[int]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := map[int]bool{}
	for _, n := range w.flushed {
		m[n] = true
	}
	return m
}

// TestRunSource_writtenAfterFlush: a run over a LineSource fetches every
// line it hands out, keeps their input names and line numbers, ends when
// the source has none left, and tells the source of each record once,
// only after the writer flushed it.
func TestRunSource_writtenAfterFlush(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	const n = 300
	w := &flushCounter{}
	src := &sliceSource{t: t, w: w, written: map[int]int{}}
	for i := range n {
		text := fmt.Sprintf("%s/s/%d", tg.URL, i)
		if i == 7 {
			text = "not a url"
		}
		src.lines = append(src.lines, input.Raw{Input: "queued.txt", Number: 10 + i, Text: []byte(text)}.Parse(0))
	}
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 8
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rep, err := e.RunSource(context.Background(), src, w)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != n || rep.OK != n-1 || rep.ByKind[results.KindInvalid] != 1 {
		t.Errorf("report: %d jobs, %d ok, %v; want %d, %d, one invalid", rep.Jobs, rep.OK, rep.ByKind, n, n-1)
	}
	for i := range n {
		if got := src.written[10+i]; got != 1 {
			t.Errorf("line %d: Written told %d times, want once", 10+i, got)
		}
	}
}
