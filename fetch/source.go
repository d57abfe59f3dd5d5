package fetch

import (
	"context"
	"errors"
	"io"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
)

// LineSource hands a run its lines in place of inputs: a shared work queue
// that other processes take lines from too (see fetch/workqueue). The run
// pulls lines with Next from one goroutine, and tells Written, from
// another, of the records written.
type LineSource interface {
	// Next returns the next line to fetch, waiting for one. It returns
	// io.EOF when no line will come, and ctx.Err() once ctx is done (the
	// run stopped admitting).
	Next(ctx context.Context) (*input.Line, error)
	// Written is told, in order, of the records written and flushed to
	// the RecordWriter since its last call: their lines may be let go
	// (acknowledged). A line taken by Next whose record never comes (the
	// run stopped first) or is cancelled is the source's to give back.
	Written(recs []*results.Record)
}

// RunSource is Run over the lines of src instead of inputs: it fetches
// each line src hands out, writes its record to w and tells src once the
// record is written (flushed, when w has a Flush method). It ends when
// src returns io.EOF and every line taken has its record, or as Run ends
// on an interrupt.
func (e *Engine) RunSource(ctx context.Context, src LineSource, w RecordWriter) (*report.Report, error) {
	return e.run(ctx, nil, src, w)
}

// readSource streams the lines of src to jobs until src has none left
// (nil) or admit ends (its error).
func readSource(admit context.Context, src LineSource, jobs *jobQueue) error {
	for {
		l, err := src.Next(admit)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return err
		}
		if err := jobs.put(admit, l); err != nil {
			return err
		}
	}
}

// written batches the records written for a LineSource: add between
// flushes, flushed after each.
type written struct {
	src  LineSource
	recs []*results.Record
}

func (s *written) add(r *results.Record) {
	if s.src != nil {
		s.recs = append(s.recs, r)
	}
}

func (s *written) flushed() {
	if s.src != nil && len(s.recs) > 0 {
		s.src.Written(s.recs)
		clear(s.recs)
		s.recs = s.recs[:0]
	}
}
