package fetch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
)

// DoneSet is the set of URL lines that already have a final record: ok, or
// failed with any kind but cancelled. It keeps 8 bytes per record (the line
// number and a 32-bit hash of the URL, per input) so that resuming a run of
// millions of URLs does not hold its records in memory. The zero value is an
// empty set; build one with LoadDone. A DoneSet is read-only once built and
// safe for concurrent use.
type DoneSet struct {
	byInput map[string][]uint64 // sorted line<<32 | hash(url)
	n       int
}

// ErrNotResults is wrapped by LoadDone's error for a file that does not
// hold fetch's results.
var ErrNotResults = errors.New("this is not a results file of fetch")

// notRecord says what a line that is not a record holds, without quoting
// it: a file taken for results by mistake may hold anything, passwords
// too.
func notRecord(line []byte, err error) string {
	var ute *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ute):
		return "is a JSON " + ute.Value + ", not a record"
	case err != nil:
		return "is not JSON"
	}
	return "is a JSON object without the url, input and line of a record"
}

// LoadDone reads the records of a results file and returns the set of lines
// they finished. Lines that are not whole JSON records are an error, except
// that a torn last line (see RepairTail) is not looked at.
func LoadDone(r io.Reader) (*DoneSet, error) {
	d := &DoneSet{byInput: map[string][]uint64{}}
	br := bufio.NewReaderSize(r, 256<<10)
	var rec struct {
		URL   string `json:"url"`
		Input string `json:"input"`
		Line  int    `json:"line"`
		Error *struct {
			Kind string `json:"kind"`
		} `json:"error"`
	}
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			rec.URL, rec.Input, rec.Line, rec.Error = "", "", 0, nil
			if jerr := json.Unmarshal(line, &rec); jerr != nil || rec.URL == "" || rec.Input == "" || rec.Line < 1 {
				return nil, fmt.Errorf("fetch: line %d %s: %w", n, notRecord(line, jerr), ErrNotResults)
			}
			if rec.Error == nil || rec.Error.Kind != KindCancelled {
				d.add(rec.Input, rec.Line, rec.URL)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fetch: reading results: %w", err)
		}
	}
	for in, keys := range d.byInput {
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if cap(keys)-len(keys) > len(keys)/8 {
			keys = slices.Clone(keys) // give back what append over-allocated
		}
		d.byInput[in] = keys
		d.n += len(keys)
	}
	return d, nil
}

func doneKey(line int, url string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(url))
	return uint64(line)<<32 | uint64(h.Sum32())
}

func (d *DoneSet) add(input string, line int, url string) {
	d.byInput[input] = append(d.byInput[input], doneKey(line, url))
}

// Len returns how many lines have a final record (a line with more than
// one counts once).
func (d *DoneSet) Len() int {
	if d == nil {
		return 0
	}
	return d.n
}

// Has reports whether the URL at input:line already has a final record. The
// URL is compared as records show it (credentials removed).
func (d *DoneSet) Has(input string, line int, url string) bool {
	if d == nil {
		return false
	}
	keys := d.byInput[input]
	_, found := slices.BinarySearch(keys, doneKey(line, url))
	return found
}

// RepairTail makes f end with a whole line: if a run was killed while
// writing, its last line may be torn, and it is cut off. It reports whether
// anything was cut.
func RepairTail(f *os.File) (bool, error) {
	st, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("fetch: repairing results: %w", err)
	}
	size := st.Size()
	if size == 0 {
		return false, nil
	}
	// Walk back to the last newline, a block at a time.
	const block = 64 << 10
	buf := make([]byte, block)
	end := size
	for end > 0 {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return false, fmt.Errorf("fetch: repairing results: %w", err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			cut := start + int64(i) + 1
			if cut == size {
				return false, nil
			}
			if err := f.Truncate(cut); err != nil {
				return false, fmt.Errorf("fetch: repairing results: %w", err)
			}
			return true, nil
		}
		end = start
	}
	if err := f.Truncate(0); err != nil {
		return false, fmt.Errorf("fetch: repairing results: %w", err)
	}
	return true, nil
}
