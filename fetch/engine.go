package fetch

import (
	"context"
	"errors"
	"io"
)

// Input is one source of URL lines: a file as named on the command line, or
// "-" for standard input.
type Input struct {
	Name string
	R    io.Reader
}

// RecordWriter receives each finished record exactly once. Write is called
// from one goroutine at a time.
type RecordWriter interface {
	Write(r *Record) error
}

// Stats is a snapshot of a run's progress.
type Stats struct {
	Done, OK, Failed int64
	InFlight         int64
}

// Engine runs jobs. Create one with New; it is safe for one Run at a time.
type Engine struct {
	cfg Config
}

// New checks cfg and builds an Engine.
func New(cfg Config) (*Engine, error) {
	return &Engine{cfg: cfg}, nil
}

// Stats returns the progress so far. It is safe to call while Run runs.
func (e *Engine) Stats() Stats { return Stats{} }

// Run reads every input in order, fetches each URL line, writes one record
// per line taken to w, and returns the report. When ctx is cancelled Run
// stops taking lines, gives work in flight the grace period, records the rest
// as cancelled, and returns the report with Interrupted set and an error
// wrapping context.Canceled.
func (e *Engine) Run(ctx context.Context, inputs []Input, w RecordWriter) (*Report, error) {
	return nil, errors.New("fetch: not implemented")
}
