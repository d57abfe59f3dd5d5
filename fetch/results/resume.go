package results

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"unicode/utf16"
	"unicode/utf8"
)

// DoneSet is the set of URL lines that already have a final record: ok, or
// failed with any kind but cancelled and coordinator, and but banned in
// phase queue. Those failures were never the URL's (the run was stopped;
// the Redis that coordinates the processes could not be reached, or a
// lease was lost; its host had banned every proxy before its turn), so
// their lines are taken again. It keeps 8 bytes per record (the line number and a 32-bit
// hash of the URL, per input) so that resuming a run of millions of URLs
// does not hold its records in memory. The zero value is an empty set;
// build one with LoadDone. A DoneSet is read-only once built and safe for
// concurrent use.
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

// Unmarshal reads line, one line of a results file, into rec. Its
// error, for a line that is no record, says what the line holds, without
// quoting it, and wraps ErrNotResults.
func Unmarshal(line []byte, rec *Record) error {
	if err := json.Unmarshal(line, rec); err != nil {
		return fmt.Errorf("%s: %w", notRecord(line, err), ErrNotResults)
	}
	return nil
}

// LoadDone reads the records of a results file and returns the set of lines
// they finished. Lines that are not whole JSON records are an error, except
// that a torn last line (see RepairTail) is not looked at. It reads records
// as fetch writes them without allocating (see scanRecord), and any other
// valid record through encoding/json.
func LoadDone(r io.Reader) (*DoneSet, error) {
	d := &DoneSet{byInput: map[string][]uint64{}}
	keys := map[string]*keyChunks{} // by input, while loading
	br := bufio.NewReaderSize(r, 256<<10)
	var long []byte // a line longer than the reader's buffer
	var kr KeyReader
	add := func(input []byte, line int, key uint64) {
		ks := keys[string(input)] // no allocation for an input seen before
		if ks == nil {
			ks = &keyChunks{}
			keys[string(input)] = ks
		}
		ks.add(key)
	}
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			input, ln, key, end, err := kr.Read(line)
			if err != nil {
				return nil, fmt.Errorf("fetch: line %d %w", n, err)
			}
			if end == EndFinal {
				add(input, ln, key)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("fetch: reading results: %w", err)
		}
	}
	for in, ks := range keys {
		k := ks.take()
		slices.Sort(k)
		k = slices.Compact(k)
		d.byInput[in] = k
		d.n += len(k)
	}
	return d, nil
}

// keyChunks collects keys in chunks of a fixed size, so that growing never
// copies them (a slice grown by append leaves about four times its size
// behind as garbage on the way, which a resume of millions of records
// would hold at its peak).
type keyChunks struct {
	full [][]uint64
	last []uint64
	n    int
}

const keyChunk = 1 << 16

func (c *keyChunks) add(k uint64) {
	if len(c.last) == cap(c.last) {
		if c.last != nil {
			c.full = append(c.full, c.last)
		}
		c.last = make([]uint64, 0, keyChunk)
	}
	c.last = append(c.last, k)
	c.n++
}

// take returns every key in one slice of exactly their number, letting go
// of each chunk as soon as it is copied.
func (c *keyChunks) take() []uint64 {
	out := make([]uint64, 0, c.n)
	for i, ch := range c.full {
		out = append(out, ch...)
		c.full[i] = nil
	}
	out = append(out, c.last...)
	c.full, c.last = nil, nil
	return out
}

// End is how a record ended, as far as LoadDone and Summarize tell
// records apart: final, or failed in one of the ways that were never the
// URL's. LoadDone takes a line again unless a record of it is final;
// Summarize ranks a cancelled record below the others of its line and a
// coordinator or host-banned one as any other.
type End uint8

const (
	EndFinal       End = iota // ok, or failed with a kind of the URL's
	EndCancelled              // failed with kind cancelled
	EndCoordinator            // failed with kind coordinator
	EndHostBanned             // failed with kind banned in phase queue: its host banned every proxy
)

// KeyReader reads what identifies a record and how it ended from a line of
// a results file: its input, line and key (see DoneKey), and its
// End. Its zero value is ready; the input it returns is only good
// until the next read.
type KeyReader struct {
	scratch [2][]byte // unquoted URL and input
	rec     struct {
		URL   string `json:"url"`
		Input string `json:"input"`
		Line  int    `json:"line"`
		Error *struct {
			Phase string `json:"phase"`
			Kind  string `json:"kind"`
		} `json:"error"`
	}
}

// Read reads line, quickly when fetch wrote it (scanRecord), through
// encoding/json otherwise. Its error, for a line that is no record, says
// what the line holds and wraps ErrNotResults.
func (kr *KeyReader) Read(line []byte) (input []byte, n int, key uint64, end End, err error) {
	if url, input, n, end, ok := scanRecord(line, &kr.scratch); ok {
		return input, n, DoneKey(n, url), end, nil
	}
	rec := &kr.rec
	rec.URL, rec.Input, rec.Line, rec.Error = "", "", 0, nil
	if jerr := json.Unmarshal(line, rec); jerr != nil || rec.URL == "" || rec.Input == "" || rec.Line < 1 {
		return nil, 0, 0, EndFinal, fmt.Errorf("%s: %w", notRecord(line, jerr), ErrNotResults)
	}
	kr.scratch[1] = append(kr.scratch[1][:0], rec.Input...)
	end = EndFinal
	if rec.Error != nil {
		end = endOf(rec.Error.Kind, rec.Error.Phase)
	}
	return kr.scratch[1], rec.Line, DoneKey(rec.Line, rec.URL), end, nil
}

// endOf is the End of a record that failed with kind in phase, given as
// strings or as bytes (a record read, not yet decoded), without allocating.
// A ban in phase queue is not the URL's own answer: its host had banned
// every proxy before the URL's turn came, and a later run (with other
// proxies, or once the bans are lifted) takes it again.
func endOf[Kind string | []byte](kind, phase Kind) End {
	switch string(kind) {
	case KindCancelled:
		return EndCancelled
	case KindCoordinator:
		return EndCoordinator
	case KindBanned:
		if string(phase) == PhaseQueue {
			return EndHostBanned
		}
	}
	return EndFinal
}

// scanRecord reads the fields LoadDone needs from a record as fetch writes
// it: {"url":"…","input":"…","line":N,… "error":null or {"phase":"…",
// "kind":"…",…}…}, and how the record ended (see End). It reports
// false for anything else, which is then read by encoding/json. The URL and
// input it returns alias line, or scratch when they hold escapes
// (encoding/json writes & as \u0026).
func scanRecord(line []byte, scratch *[2][]byte) (url, input []byte, n int, end End, ok bool) {
	str := func(b []byte, prefix string, buf *[]byte) ([]byte, []byte, bool) {
		if !bytes.HasPrefix(b, []byte(prefix)) {
			return nil, nil, false
		}
		b = b[len(prefix):]
		end := bytes.IndexByte(b, '"')
		if end < 0 {
			return nil, nil, false
		}
		if bytes.IndexByte(b[:end], '\\') < 0 {
			return b[:end], b[end+1:], true
		}
		// Escapes: find the closing quote that is not escaped, unquote.
		end = -1
		for i := 0; i < len(b); i++ {
			if b[i] == '\\' {
				i++
			} else if b[i] == '"' {
				end = i
				break
			}
		}
		if end < 0 {
			return nil, nil, false
		}
		var ok bool
		if *buf, ok = unquoteJSON((*buf)[:0], b[:end]); !ok {
			return nil, nil, false
		}
		return *buf, b[end+1:], true
	}
	url, rest, ok := str(line, `{"url":"`, &scratch[0])
	if !ok || len(url) == 0 {
		return nil, nil, 0, EndFinal, false
	}
	if input, rest, ok = str(rest, `,"input":"`, &scratch[1]); !ok || len(input) == 0 {
		return nil, nil, 0, EndFinal, false
	}
	if !bytes.HasPrefix(rest, []byte(`,"line":`)) {
		return nil, nil, 0, EndFinal, false
	}
	rest = rest[len(`,"line":`):]
	i := 0
	for i < len(rest) && i < 10 && rest[i] >= '0' && rest[i] <= '9' {
		n = n*10 + int(rest[i]-'0')
		i++
	}
	if i == 0 || i == len(rest) || rest[i] != ',' || n < 1 {
		return nil, nil, 0, EndFinal, false
	}
	// Strings hold quotes only escaped, so `"error":` can only be the key.
	e := bytes.Index(rest, []byte(`"error":`))
	if e < 0 {
		return nil, nil, 0, EndFinal, false
	}
	rest = rest[e+len(`"error":`):]
	switch {
	case bytes.HasPrefix(rest, []byte("null")):
	case bytes.HasPrefix(rest, []byte(`{"phase":"`)):
		phase := rest[len(`{"phase":"`):]
		if q := bytes.IndexByte(phase, '"'); q >= 0 {
			phase = phase[:q]
		}
		k := bytes.Index(rest, []byte(`"kind":"`))
		if k < 0 {
			return nil, nil, 0, EndFinal, false
		}
		kind := rest[k+len(`"kind":"`):]
		q := bytes.IndexByte(kind, '"')
		if q < 0 {
			return nil, nil, 0, EndFinal, false
		}
		end = endOf(kind[:q], phase)
	default:
		return nil, nil, 0, EndFinal, false
	}
	return url, input, n, end, true
}

// unquoteJSON appends to dst the JSON string body s (without its quotes)
// with its escapes decoded, and reports whether s was well formed.
func unquoteJSON(dst, s []byte) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i++; i >= len(s) {
			return dst, false
		}
		switch s[i] {
		case '"', '\\', '/':
			dst = append(dst, s[i])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(s[i+1:])
			if !ok {
				return dst, false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s[min(i+3, len(s)):]); ok && i+2 < len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default:
			return dst, false
		}
	}
	return dst, true
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// DoneKey is the key of a line's final record in a DoneSet: the line
// number and the FNV-1a hash (32 bits) of its URL, given as a string or as
// bytes (a record read, not yet decoded), without allocating.
func DoneKey[URL string | []byte](line int, url URL) uint64 {
	h := uint32(2166136261)
	for i := 0; i < len(url); i++ {
		h ^= uint32(url[i])
		h *= 16777619
	}
	return uint64(line)<<32 | uint64(h)
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
	return d.hasKey(input, DoneKey(line, url))
}

// HasBytes is Has for a URL given as bytes: it does not allocate.
func (d *DoneSet) HasBytes(input string, line int, url []byte) bool {
	return d != nil && d.hasKey(input, DoneKey(line, url))
}

func (d *DoneSet) hasKey(input string, key uint64) bool {
	_, found := slices.BinarySearch(d.byInput[input], key)
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
