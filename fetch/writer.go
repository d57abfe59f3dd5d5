package fetch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// JSONLWriter writes records as JSON lines. Every write it makes to the
// underlying writer holds whole lines only, so a run killed at any moment
// leaves at most a torn last line, never a torn middle. It is not safe for
// concurrent use: the engine calls Write from one goroutine.
type JSONLWriter struct {
	bw   *bufio.Writer
	line bytes.Buffer
	enc  *json.Encoder
}

// NewJSONLWriter returns a writer of records to w. Call Flush at the end.
func NewJSONLWriter(w io.Writer) *JSONLWriter {
	jw := &JSONLWriter{bw: bufio.NewWriterSize(w, 64<<10)}
	jw.enc = json.NewEncoder(&jw.line)
	jw.enc.SetEscapeHTML(false)
	return jw
}

// Write encodes r as one line.
func (w *JSONLWriter) Write(r *Record) error {
	w.line.Reset()
	if err := w.enc.Encode(r); err != nil {
		return fmt.Errorf("fetch: encoding record: %w", err)
	}
	if w.line.Len() > w.bw.Available() && w.bw.Buffered() > 0 {
		if err := w.bw.Flush(); err != nil {
			return fmt.Errorf("fetch: writing records: %w", err)
		}
	}
	if _, err := w.bw.Write(w.line.Bytes()); err != nil {
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
