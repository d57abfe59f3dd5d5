package results

import (
	"bufio"
	"fmt"
	"io"
)

// JSONLWriter writes records as JSON lines. Every write it makes to the
// underlying writer holds whole lines only, so a run killed at any moment
// leaves at most a torn last line, never a torn middle. It is not safe for
// concurrent use: the engine calls Write from one goroutine.
type JSONLWriter struct {
	bw   *bufio.Writer
	line []byte // the line being written, reused
}

// NewJSONLWriter returns a writer of records to w. Call Flush at the end.
func NewJSONLWriter(w io.Writer) *JSONLWriter {
	return &JSONLWriter{bw: bufio.NewWriterSize(w, 64<<10)}
}

// Write encodes r as one line, as encoding/json would (without HTML
// escaping).
func (w *JSONLWriter) Write(r *Record) error {
	line, err := appendRecord(w.line[:0], r)
	if err != nil {
		return fmt.Errorf("fetch: encoding record: json: %w", err)
	}
	line = append(line, '\n')
	if cap(line) <= 64<<10 {
		w.line = line // keep the room for the next line, unless one was huge
	}
	if len(line) > w.bw.Available() && w.bw.Buffered() > 0 {
		if err := w.bw.Flush(); err != nil {
			return fmt.Errorf("fetch: writing records: %w", err)
		}
	}
	if _, err := w.bw.Write(line); err != nil {
		return fmt.Errorf("fetch: writing records: %w", err)
	}
	return nil
}

// Flush writes out what is buffered.
func (w *JSONLWriter) Flush() error {
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("fetch: writing records: %w", err)
	}
	return nil
}
