// Package input reads the URL lines a run takes: lines split and kept as
// the run keeps them (a byte order mark on any line, long lines cut,
// blank and comment lines passed over), the shard a line belongs to, the
// lines --resume finds finished, and each line parsed into the URL to
// fetch and what its record shows, credentials removed. It is its own
// package so that the engine and the command's progress total read inputs
// with one implementation (Scanner, Count).
package input

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/fetch-dev/fetch/fetch/results"
)

// MaxLineBytes is the longest URL line fetched; a longer line is invalid.
const MaxLineBytes = 8 << 10

// Line is one URL line taken for work: where it is, the URL it holds, and
// what its record shows.
type Line struct {
	Input   string   // the name of its input
	Number  int      // its line number in the input, from 1
	URL     *url.URL // nil when invalid
	Shown   string   // the URL as written to the record: credentials removed
	Host    string   // target host:port
	Invalid string   // why the line is not fetched, or ""

	// Request is a JSON request line's method, header, body, id and meta;
	// nil for a plain URL line. An invalid JSON line may have one for its
	// id and meta.
	Request *Request
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// Source is one input of URL lines: a file as named on the command line,
// or "-" for standard input.
type Source struct {
	Name string
	R    io.Reader
}

// Scanner reads the URL lines of one input as a run takes them, one
// physical line after another: it passes over blank and comment lines
// (after a byte order mark, which may start any line: inputs may be files
// put end to end) and the lines of other shards, and tells which of the
// others done already finished (--resume). A line longer than MaxLineBytes
// is read to its end, but only its start is kept: memory does not grow
// with the length of the input or of its lines. The engine reads its
// inputs with one, and the command counts the lines a run takes with one
// (see Count), so that the two cannot disagree. A Scanner is not safe for
// concurrent use.
type Scanner struct {
	in    Source
	br    *bufio.Reader
	shard Shard
	done  *results.DoneSet
	ctx   context.Context // Count's: looked at every 4,096 lines; nil for none
	// maxBody is the largest body of a JSON request line, and what the
	// longest such line is read whole for (see maxJSONLine).
	maxBody int64
	big     []byte // the buffer of lines longer than br's, kept for the next

	n      int     // the current line's number
	raw    rawLine // the current line as read: valid until the next Scan
	long   bool
	first  int
	line   *Line // the current line parsed, once it is
	isDone bool
	end    bool // no line is left
	err    error
}

// NewScanner returns a Scanner of in's lines in shard (every line for the
// zero Shard), done telling those already finished (nil for none).
func NewScanner(in Source, shard Shard, done *results.DoneSet) *Scanner {
	return &Scanner{in: in, br: bufio.NewReaderSize(in.R, 16<<10), shard: shard, done: done, maxBody: DefaultMaxRequestBody}
}

// SetMaxRequestBody sets the largest body a JSON request line may carry
// (DefaultMaxRequestBody unless set; n < 1 leaves it). A JSON line may be
// up to twice that plus 64 KiB long: room for the body's base64 form or
// escapes, and for the rest of the line. Call it before the first Scan.
func (s *Scanner) SetMaxRequestBody(n int64) {
	if n > 0 {
		s.maxBody = n
	}
}

// Scan advances to the next line of the input that is neither blank nor a
// comment, in the shard; it returns false at the end of the input, or on
// a read error (see Err).
func (s *Scanner) Scan() bool {
	for !s.end {
		s.n++
		if s.ctx != nil && s.n%4096 == 0 && s.ctx.Err() != nil {
			s.err, s.end = s.ctx.Err(), true
			return false
		}
		raw, long, first, err := readLine(s.br, s.maxBody, &s.big)
		if err != nil && !errors.Is(err, io.EOF) {
			s.err, s.end = fmt.Errorf("fetch: reading %s line %d: %w", s.in.Name, s.n, err), true
			return false
		}
		// A byte order mark starts a file; it may start any line of an
		// input made of several files (cat a.txt b.txt).
		if bytes.HasPrefix(raw.kept, bom) {
			raw.kept = raw.kept[len(bom):]
			first = firstNonSpace(raw.kept)
		}
		if err != nil {
			s.end = true // the last line, if it holds anything
			if len(raw.kept) == 0 && !long {
				return false
			}
		}
		if first < 0 || first == '#' || !s.inShard(raw.kept, long, first) {
			continue
		}
		s.raw, s.long, s.first, s.line, s.isDone = raw, long, first, nil, false
		if s.done.Len() > 0 {
			if t := bytes.TrimSpace(raw.kept); !long && plainURL(t) {
				// The line is written as its record shows it, as most lists
				// are: looked up without parsing it. Parsing every line of
				// a resumed run of millions filled the heap with garbage
				// while the done set was at its largest (3,000,000 records:
				// a peak of 103 MiB RSS; now 58).
				s.isDone = s.done.HasBytes(s.in.Name, s.n, t)
			} else {
				// Looked up by the URL its record shows: a line whose text
				// is some record's URL but not its own shown URL (a line
				// corrected since the last run) is not taken for done.
				l := s.Line()
				s.isDone = s.done.Has(l.Input, l.Number, l.Shown)
			}
		}
		return true
	}
	return false
}

// Done reports whether the line Scan stopped at already has a final record
// in done: the run skips it.
func (s *Scanner) Done() bool { return s.isDone }

// Line returns the line Scan stopped at, parsed for work: its URL, or why
// it is invalid, and what its record shows. It is parsed once, when first
// asked for.
func (s *Scanner) Line() *Line {
	if s.line == nil {
		s.line = parseLine(s.in.Name, s.n, s.raw, s.long, s.first, s.maxBody)
	}
	return s.line
}

// Err returns the error that ended the scan, or nil at the end of the
// input.
func (s *Scanner) Err() error { return s.err }

// Count returns how many lines of in a run takes with shard and done
// (which may be nil): those a Scanner stops at that done does not hold,
// JSON request lines read with bodies of up to maxBody bytes (see
// Scanner.SetMaxRequestBody; below 1, the default). It stops early with
// ctx's error once ctx is done.
func Count(ctx context.Context, in Source, shard Shard, done *results.DoneSet, maxBody int64) (int64, error) {
	s := NewScanner(in, shard, done)
	s.SetMaxRequestBody(maxBody)
	s.ctx = ctx
	var n int64
	for s.Scan() {
		if !s.Done() {
			n++
		}
	}
	return n, s.Err()
}

// plainURL reports whether b is a URL that fetch shows as it is written, so
// that a record showing b is this line's: http or https in lower case,
// then only letters, digits and the characters that url.URL.String keeps
// as they are (no white space, no "@" of user information, no "#", whose
// empty fragment is dropped, none of the characters it escapes, no escape
// in the host, which it shows decoded). A line
// that is not is parsed before it is looked up: a line corrected since
// the last run, say from "HTTP://user@h/x" (recorded as "HTTP://h/x", as
// a line that does not parse) to "HTTP://h/x" (shown "http://h/x"), must
// not be taken for done. TestPlainURLShownAsWritten holds it to that.
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

// rawLine is one physical line as read: the whole line, or for a line
// longer than MaxLineBytes only its start.
type rawLine struct {
	kept []byte
	// atPastKept: the part of a long line that was not kept holds an "@",
	// so the kept start may hold user information cut short.
	atPastKept bool
}

// keptOfLong is how much of a long line is kept for its record.
const keptOfLong = 256

// readLine reads one physical line without its line end. The line kept
// may be br's own buffer or *big, valid until the next read. A line longer
// than MaxLineBytes (a JSON request line: maxJSONLine(maxBody)) is read to
// its end but only its start is kept, with long set; first is its first
// byte that is not white space (-1 for none; a byte order mark before it
// passed over), so that a long comment or blank line is still known as
// one.
func readLine(br *bufio.Reader, maxBody int64, big *[]byte) (line rawLine, long bool, first int, err error) {
	var buf []byte
	first = -1
	limit := MaxLineBytes
	for start := true; ; start = false {
		chunk, err := br.ReadSlice('\n')
		if first < 0 {
			look := chunk
			if start {
				look = bytes.TrimPrefix(chunk, bom)
			}
			first = firstNonSpace(look)
			if first == '{' {
				limit = maxJSONLine(maxBody)
			}
		}
		if buf == nil && !errors.Is(err, bufio.ErrBufferFull) && len(chunk) <= limit {
			// The whole line in one piece: no copy. It is valid until the
			// next read, and parseLine copies what it keeps.
			line.kept = bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r"))
			return line, false, first, err
		}
		if len(buf)+len(chunk) <= limit+2 { // room for CRLF
			if buf == nil && limit > MaxLineBytes {
				buf = (*big)[:0]
			}
			buf = append(buf, chunk...)
			if limit > MaxLineBytes {
				*big = buf // kept for the next JSON line: its growth is paid once
			}
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
		if len(buf) > limit {
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

// parseLine turns one line into a Line, or nil for a blank or comment line.
// first is the line's first byte that is not white space, -1 for none;
// maxBody is the largest body of a JSON request line.
func parseLine(input string, n int, raw rawLine, long bool, first int, maxBody int64) *Line {
	if first < 0 || first == '#' {
		return nil
	}
	j := &Line{Input: input, Number: n}
	if first == '{' {
		if long {
			// Its start may quote a header or the body: none of it is shown.
			j.Invalid = fmt.Sprintf("JSON request line longer than %d bytes", maxJSONLine(maxBody))
			return j
		}
		parseJSONLine(j, bytes.TrimSpace(raw.kept), maxBody)
		return j
	}
	s := strings.TrimSpace(string(raw.kept))
	if long {
		j.Shown = longShown(s, raw.atPastKept)
		j.Invalid = fmt.Sprintf("line longer than %d bytes", MaxLineBytes)
		return j
	}
	u, host, why := ParseTarget(s)
	if why != "" {
		j.Shown = redactLine(s)
		j.Invalid = why
		return j
	}
	j.URL, j.Host = u, host
	shown := *u
	shown.User = nil
	j.Shown = shown.String()
	return j
}

// longShown is what a record shows of the kept start of a long line: the
// start with anything that could be user information removed, or only its
// scheme when an "@" comes after the kept start (atPastKept), since user
// information cut short cannot be told from the rest.
func longShown(s string, atPastKept bool) string {
	if !atPastKept {
		return redactLine(s) + "..."
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return s[:i+3] + "..."
	}
	return "..."
}

// redactLine is s, a line that is not fetched, with anything that could be
// user information removed: everything from the start of its authority
// (after "://", a leading "//", or the start of the line) to the line's last
// "@". On a line that does not parse, the end of the authority cannot be
// trusted: a password may hold a raw "/", "?" or "#". So this is done on the
// text, before any parsing.
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

// isScheme reports whether s has the syntax of a URL scheme (RFC 3986:
// a letter, then letters, digits, "+", "-" or "."). Only then is the text
// before "://" a scheme; otherwise it may be a user name or password.
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

// quotedRE matches a Go-quoted string (%q) and the space before it: the
// parts of net/url's errors that quote the line.
var quotedRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\s*"(?:[^"\\]|\\.)*"`) })

// ParseTarget checks that s is an absolute http or https URL and returns
// it with its host:port key (the host in lower case, the scheme's port
// when it names none), or the reason it is not fetched.
func ParseTarget(s string) (u *url.URL, host, why string) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		// Its text quotes the line: keep only what it says is wrong.
		return nil, "", "unparsable URL: " + quotedRE().ReplaceAllString(err.Error(), "")
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme == "":
		return nil, "", "not an absolute URL (want http:// or https://)"
	case scheme != "http" && scheme != "https" && strings.Contains(s, "@"):
		// "user:pass@host" parses with the scheme "user": do not show it.
		return nil, "", "unsupported scheme (want http or https)"
	case scheme != "http" && scheme != "https":
		return nil, "", fmt.Sprintf("unsupported scheme %q (want http or https)", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, "", "URL has no host"
	case u.Opaque != "":
		return nil, "", "not an absolute URL (want http:// or https://)"
	}
	u.Scheme = scheme
	port := u.Port()
	if port != "" {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, "", "URL has a port outside 1-65535"
		}
	}
	// The key is u.Host itself (no copy) when it is already "host:port"
	// in lower case: a port is written, and Host is no longer than
	// Hostname, ":" and Port (no brackets).
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
		// net/url lets a stray bracket through ("http://]/"): no request
		// could be made to such a host.
		return nil, "", "URL has a bad host"
	}
	if strings.Contains(u.Host, "%") {
		// Nor does it always read back what it wrote for an IPv6 zone
		// (bytes that are not UTF-8), and the request is made from that
		// text. Only zones can do it, so only they pay for a second parse.
		if _, err := url.Parse(u.String()); err != nil {
			return nil, "", "URL has a bad host"
		}
	}
	return u, key, ""
}
