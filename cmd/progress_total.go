package cmd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unsafe"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/results"
)

// The progress bar's total is the number of lines the run takes. The
// engine decides which lines those are as it reads them (fetch/input.go:
// readInput), and fetch exports no reader of its own; so this file reads
// the inputs the same way, line for line: how a line is split, kept and
// told blank, which shard it hashes to (fetch.Shard.Of, on the same bytes)
// and, for --resume, the URL it is looked up by (fetch.DoneSet.Has, with
// the URL the line's record shows). TestProgressTotalMatchesRun holds the
// two to the same count on lines of every kind.

// inputBuffer is the size of the engine's reader of an input: a line
// longer than MaxLineBytes is kept as the engine keeps it only when it is
// read in the same pieces.
const inputBuffer = 16 << 10

// keptOfLong is how much of a long line the engine keeps for its record.
const keptOfLong = 256

var bom = []byte{0xEF, 0xBB, 0xBF}

// linesTaken returns how many lines of the named inputs a run takes (each
// gets a record): the lines that are neither blank nor comments, in shard
// (every line for the zero Shard), that done, the lines --resume found
// finished, does not hold (done may be nil). It returns -1 when an input
// is standard input or cannot be read, or when ctx is done first.
func linesTaken(ctx context.Context, names []string, shard fetch.Shard, done *results.DoneSet) int64 {
	var n int64
	for _, name := range names {
		if name == "-" {
			return -1
		}
		c, err := fileLinesTaken(ctx, name, shard, done)
		if err != nil {
			return -1
		}
		n += c
	}
	return n
}

func fileLinesTaken(ctx context.Context, name string, shard fetch.Shard, done *results.DoneSet) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return inputLinesTaken(ctx, name, f, shard, done)
}

// inputLinesTaken is linesTaken for one input, named name, read from r.
// Memory does not grow with the length of its lines.
func inputLinesTaken(ctx context.Context, name string, r io.Reader, shard fetch.Shard, done *results.DoneSet) (int64, error) {
	br := bufio.NewReaderSize(r, inputBuffer)
	var taken int64
	for n := 1; ; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		raw, long, first, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		// A byte order mark may start any line (cat a.txt b.txt).
		if bytes.HasPrefix(raw.kept, bom) {
			raw.kept = raw.kept[len(bom):]
			first = firstNonSpace(raw.kept)
		}
		if err != nil && len(raw.kept) == 0 && !long {
			return taken, nil
		}
		if first >= 0 && first != '#' &&
			(shard.N <= 1 || shard.Of(name, n, raw.kept) == shard.K) &&
			!lineDone(done, name, n, raw, long) {
			taken++
		}
		if err != nil {
			return taken, nil
		}
	}
}

// lineDone reports whether done holds line n of input name, looked up by
// the URL its record shows, as the engine looks it up.
func lineDone(done *results.DoneSet, name string, n int, raw rawLine, long bool) bool {
	if done.Len() == 0 {
		return false
	}
	t := bytes.TrimSpace(raw.kept)
	if !long && plainURL(t) {
		// Shown as written. No copy: Has keeps nothing of the URL, and a
		// string per line of millions is garbage while the done set is at
		// its largest.
		return done.Has(name, n, unsafe.String(unsafe.SliceData(t), len(t)))
	}
	return done.Has(name, n, shownURL(string(t), long, raw.atPastKept))
}

// rawLine is one physical line as read: the whole line, or for a line
// longer than MaxLineBytes only its start.
type rawLine struct {
	kept []byte
	// atPastKept: the part of a long line that was not kept holds an "@".
	atPastKept bool
}

// readLine reads one physical line without its line end, as the engine
// does, with long set for a line longer than MaxLineBytes, of which only
// the start is kept; first is its first byte that is not white space (-1
// for none). The line kept may be br's own buffer, valid until the next
// read.
func readLine(br *bufio.Reader) (line rawLine, long bool, first int, err error) {
	var buf []byte
	first = -1
	for {
		chunk, err := br.ReadSlice('\n')
		if first < 0 {
			first = firstNonSpace(chunk)
		}
		if buf == nil && !errors.Is(err, bufio.ErrBufferFull) && len(chunk) <= fetch.MaxLineBytes {
			line.kept = bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r"))
			return line, false, first, err
		}
		if len(buf)+len(chunk) <= fetch.MaxLineBytes+2 { // room for CRLF
			buf = append(buf, chunk...)
		} else {
			long = true
			if len(buf) < keptOfLong {
				k := min(len(chunk), keptOfLong-len(buf))
				buf = append(buf, chunk[:k]...)
				chunk = chunk[k:]
			}
			line.atPastKept = line.atPastKept || bytes.IndexByte(chunk, '@') >= 0
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > fetch.MaxLineBytes {
			long = true
			line.atPastKept = bytes.IndexByte(buf[keptOfLong:], '@') >= 0
			buf = buf[:keptOfLong]
		}
		line.kept = buf
		return line, long, first, err
	}
}

// firstNonSpace returns the first byte of b that is not white space (as
// strings.TrimSpace sees it), or -1.
func firstNonSpace(b []byte) int {
	if t := bytes.TrimLeftFunc(b, unicode.IsSpace); len(t) > 0 {
		return int(t[0])
	}
	return -1
}

// plainURL reports whether b is a URL that the engine shows as it is
// written: http or https in lower case, then only the bytes of urlChar,
// and no escape in the host.
func plainURL(b []byte) bool {
	rest, ok := bytes.CutPrefix(b, []byte("http://"))
	if !ok {
		if rest, ok = bytes.CutPrefix(b, []byte("https://")); !ok {
			return false
		}
	}
	host := true // in the authority, where an escape is shown decoded
	for _, c := range rest {
		if !urlChar[c] || host && c == '%' {
			return false
		}
		host = host && c != '/' && c != '?'
	}
	return true
}

// urlChar holds the bytes plainURL allows after the scheme.
var urlChar = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range []byte("-._~:/?&=%+,;!$'()*") {
		t[c] = true
	}
	return t
}()

// shownURL is the URL the record of the line s (trimmed) shows: the URL
// without its user information when the engine fetches it, else the line
// with anything that could be user information removed.
func shownURL(s string, long, atPastKept bool) string {
	if long {
		if !atPastKept {
			return redactLine(s) + "..."
		}
		if i := strings.Index(s, "://"); i >= 0 {
			return s[:i+3] + "..."
		}
		return "..."
	}
	u, ok := targetURL(s)
	if !ok {
		return redactLine(s)
	}
	shown := *u
	shown.User = nil
	return shown.String()
}

// targetURL parses s and reports whether the engine fetches it: an
// absolute http or https URL with a host, a port in 1-65535 if any, and a
// host that reads back; the scheme is put in lower case.
func targetURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, false
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" || u.Host == "" || u.Hostname() == "" || u.Opaque != "" {
		return nil, false
	}
	u.Scheme = scheme
	port := u.Port()
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, false
		}
	}
	key := u.Host
	if name := u.Hostname(); port == "" || name != strings.ToLower(name) || len(name)+1+len(port) != len(u.Host) {
		if port == "" {
			port = "80"
			if scheme == "https" {
				port = "443"
			}
		}
		key = net.JoinHostPort(strings.ToLower(name), port)
	}
	if _, _, err := net.SplitHostPort(key); err != nil {
		return nil, false
	}
	if strings.Contains(u.Host, "%") {
		if _, err := url.Parse(u.String()); err != nil {
			return nil, false
		}
	}
	return u, true
}

// redactLine is s, a line that is not fetched, with everything from the
// start of its authority to its last "@" removed.
func redactLine(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 && i < at && isScheme(s[:i]) {
		start = i + 3
	} else if strings.HasPrefix(s, "//") {
		start = 2
	}
	return s[:start] + s[at+1:]
}

// isScheme reports whether s has the syntax of a URL scheme (RFC 3986).
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}
