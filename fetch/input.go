package fetch

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
	"sync/atomic"
	"unicode"

	"github.com/fetch-dev/fetch/fetch/results"
)

// MaxLineBytes is the longest URL line fetched; a longer line is invalid.
const MaxLineBytes = 8 << 10

// job is one URL line taken for work.
type job struct {
	input   string
	line    int
	url     *url.URL // nil when invalid
	shown   string   // the URL as written to the record: credentials removed
	host    string   // target host:port
	invalid string   // why the line is not fetched, or ""
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// readInputs streams the URL lines of every input, in order, to jobs. It
// skips blank and comment lines and stops early, returning ctx.Err(), when
// ctx is done. Memory does not grow with the length of the inputs.
// Lines of other shards than shard are passed over; lines that done lists
// are counted in skipped.
func readInputs(ctx context.Context, inputs []Input, shard Shard, done *results.DoneSet, skipped *atomic.Int64, jobs *jobQueue) error {
	for _, in := range inputs {
		if err := readInput(ctx, in, shard, done, skipped, jobs); err != nil {
			return err
		}
	}
	return nil
}

func readInput(ctx context.Context, in Input, shard Shard, done *results.DoneSet, skipped *atomic.Int64, jobs *jobQueue) error {
	br := bufio.NewReaderSize(in.R, 16<<10)
	for n := 1; ; n++ {
		raw, long, first, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("fetch: reading %s line %d: %w", in.Name, n, err)
		}
		// A byte order mark starts a file; it may start any line of an
		// input made of several files (cat a.txt b.txt).
		if bytes.HasPrefix(raw.kept, bom) {
			raw.kept = raw.kept[len(bom):]
			first = firstNonSpace(raw.kept)
		}
		if err != nil && len(raw.kept) == 0 && !long {
			return nil // end of input
		}
		var j *job
		switch {
		case first < 0 || first == '#' || !shard.takes(in.Name, n, raw.kept):
		case done.Len() > 0 && !long && doneAsWritten(done, in.Name, n, bytes.TrimSpace(raw.kept)):
			// The line is written as its record shows it, as most lists
			// are: skipped without parsing it. Parsing every line of a
			// resumed run of millions filled the heap with garbage while
			// the done set was at its largest (3,000,000 records: a peak
			// of 103 MiB RSS; now 58).
			skipped.Add(1)
		default:
			j = parseLine(in.Name, n, raw, long, first)
			if done.Has(j.input, j.line, j.shown) {
				skipped.Add(1)
				j = nil
			}
		}
		if j != nil {
			if err := jobs.put(ctx, j); err != nil {
				return err
			}
		}
		if err != nil {
			return nil
		}
	}
}

// doneAsWritten reports whether done has line n of input, looked up by
// its text as written, without parsing it or allocating: for a line fetch
// shows as written (plainURL), whose record shows exactly that text. Any
// other line is not looked up here (false): the caller parses it and asks
// Has, so that a line whose text is some record's URL but not its own
// shown URL (a line corrected since the last run) is not taken for done.
func doneAsWritten(done *results.DoneSet, input string, n int, text []byte) bool {
	return plainURL(text) && done.HasBytes(input, n, text)
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
// may be br's own buffer, valid until the next read. A line longer
// than MaxLineBytes is read to its end but only its start is kept, with long
// set; first is its first byte that is not white space (-1 for none), so
// that a long comment or blank line is still known as one.
func readLine(br *bufio.Reader) (line rawLine, long bool, first int, err error) {
	var buf []byte
	first = -1
	for {
		chunk, err := br.ReadSlice('\n')
		if first < 0 {
			first = firstNonSpace(chunk)
		}
		if buf == nil && !errors.Is(err, bufio.ErrBufferFull) && len(chunk) <= MaxLineBytes {
			// The whole line in one piece: no copy. It is valid until the
			// next read, and parseLine copies what it keeps.
			line.kept = bytes.TrimSuffix(bytes.TrimSuffix(chunk, []byte("\n")), []byte("\r"))
			return line, false, first, err
		}
		if len(buf)+len(chunk) <= MaxLineBytes+2 { // room for CRLF
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
		if len(buf) > MaxLineBytes {
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

// parseLine turns one line into a job, or nil for a blank or comment line.
// first is the line's first byte that is not white space, -1 for none.
func parseLine(input string, n int, raw rawLine, long bool, first int) *job {
	if first < 0 || first == '#' {
		return nil
	}
	s := strings.TrimSpace(string(raw.kept))
	j := &job{input: input, line: n}
	if long {
		j.shown = longShown(s, raw.atPastKept)
		j.invalid = fmt.Sprintf("line longer than %d bytes", MaxLineBytes)
		return j
	}
	u, host, why := parseTarget(s)
	if why != "" {
		j.shown = redactLine(s)
		j.invalid = why
		return j
	}
	j.url, j.host = u, host
	shown := *u
	shown.User = nil
	j.shown = shown.String()
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

// parseTarget checks that s is an absolute http or https URL and returns it
// with its host:port key, or the reason it is not fetched.
func parseTarget(s string) (*url.URL, string, string) {
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
