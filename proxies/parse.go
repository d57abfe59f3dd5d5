package proxies

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"github.com/fetch-dev/fetch/internal/arena"
	"github.com/fetch-dev/fetch/limits"
)

// ErrEmpty is wrapped by the error Load returns for a proxy list with no
// proxy in it: a list that was meant to be used must never silently turn
// into direct connections.
var ErrEmpty = errors.New("proxies: no proxy in list")

// maxLineLen is the longest line, in bytes without its line end, that Parse
// accepts.
const maxLineLen = 8 << 10

const (
	maxCount   = 1_000_000 // largest concurrency= or burst=
	maxPoolLen = 128       // longest pool name, in bytes
	maxQuote   = 64        // longest line text quoted in a LineError
)

// LineError is a malformed line in a proxy list, or a malformed --proxy URL
// (File "--proxy", Line 0).
//
// Reason never holds a user name or a password, even when the URL is
// malformed: Parse quotes no part of a URL, and quotes other text of the
// line only when it holds no part of any credentials on that line.
type LineError struct {
	File   string // the list's name as given, or "--proxy"
	Line   int    // 1-based physical line number; 0 for a --proxy URL
	Reason string // what is wrong, safe to print
	Err    error  // the underlying error, such as ErrBadURL or limits.ErrBadRate; may be nil
}

func (e *LineError) Error() string {
	if e.Line <= 0 {
		return "proxies: " + e.File + ": " + e.Reason
	}
	return "proxies: " + e.File + ":" + strconv.Itoa(e.Line) + ": " + e.Reason
}

func (e *LineError) Unwrap() error { return e.Err }

// fileError is an error about a whole file: "proxies: FILE: what".
type fileError struct {
	file string
	err  error
}

func (e *fileError) Error() string {
	return "proxies: " + e.file + ": " + strings.TrimPrefix(e.err.Error(), "proxies: ")
}

func (e *fileError) Unwrap() error { return e.err }

// Parse reads one proxy list; name is the list's file name as given, kept
// in Proxy.From and used in errors.
//
// A line is "URL [key=value ...]", fields separated by white space. Blank
// lines and lines starting with "#" are skipped, and a field starting with
// "#" starts a comment that runs to the end of the line. Surrounding white
// space, CRLF line ends and a UTF-8 byte order mark at the start are
// accepted. The URL is as for ParseURL. The keys, each at most once, are
//
//	concurrency=N  attempts in flight at once through this proxy (or pool), N >= 1
//	rate=R         attempts started, as for limits.ParseRate; 0 or unlimited: no limit
//	burst=N        token-bucket burst for rate, N >= 1
//	pool=NAME      share one budget with the other lines of pool NAME
//	               (printable, no white space, at most 128 bytes)
//	sessions=N     the line stands for N proxies (1 to 1,000,000): each
//	               {session} in its user name or password is replaced by
//	               1..N; each is its own proxy, with its own identity,
//	               health, limits and connections (pool= shares one budget)
//	session-prefix=S  written before each session number (printable, no
//	               white space, at most 128 bytes); needs sessions=
//	rotate=M       never (keep connections alive) or request (a new
//	               connection to the proxy for every attempt)
//
// {session} without sessions=, sessions= without {session} in the user
// information, or lists that would hold more than 1,000,000 proxies in
// all are errors. The proxies of a line have its Source and, in order,
// Session 1..N.
//
// The first malformed line (bad URL, unknown, repeated or malformed key,
// bad value, a line over 8 KiB, invalid UTF-8 or a NUL byte)
// stops Parse with a *LineError. A list with no proxy is not an error here
// (Load reports it); duplicates are kept (Load drops them).
func Parse(name string, r io.Reader) ([]Proxy, error) {
	return parse(name, r, maxProxies, 0)
}

// parse is Parse with room for at most room proxies, of a list of size
// bytes (0: not known).
func parse(name string, r io.Reader, room int, size int64) ([]Proxy, error) {
	br := bufio.NewReaderSize(r, maxLineLen+2) // room for the line and "\r\n"
	var ps []Proxy
	var read int64 // bytes of the list read so far
	var bl blocks
	bl.urls.keep = &bl.strs
	for n := 1; ; n++ {
		raw, err := br.ReadSlice('\n')
		read += int64(len(raw))
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, &LineError{File: name, Line: n, Reason: fmt.Sprintf("line longer than %d bytes", maxLineLen)}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, &fileError{file: name, err: err}
		}
		if len(raw) == 0 && err != nil {
			return fit(ps), nil
		}
		if n > math.MaxInt32 { // a proxy keeps its line's number in an int32
			return nil, &LineError{File: name, Line: n, Reason: fmt.Sprintf("more than %d lines", math.MaxInt32)}
		}
		p, t, ok, lerr := parseLine(&bl, name, n, raw)
		if lerr != nil {
			return nil, lerr
		}
		switch {
		case !ok:
		case t != nil:
			if t.n > room-len(ps) {
				return nil, &LineError{File: name, Line: n, Reason: fmt.Sprintf("sessions=%d: the proxy lists would hold more than %d proxies", t.n, maxProxies)}
			}
			ps = t.expand(ps, p, &bl)
		case len(ps) >= room:
			return nil, &LineError{File: name, Line: n, Reason: fmt.Sprintf("the proxy lists hold more than %d proxies", maxProxies)}
		default:
			if len(ps) == sizeSample && size > read {
				ps = slices.Grow(ps, min(room, estimate(len(ps), read, size))-len(ps))
			}
			ps = append(ps, p)
		}
		if err != nil {
			return fit(ps), nil
		}
	}
}

// blocks are what parse keeps a list's proxies in, shared by them (see
// arena): their lines, identities and URLs; and the fields of the line
// being parsed, made once for all the lines. What a run keeps of a proxy
// once the list is dropped (its identity, and its credentials, copied out
// of the line when parseSimple takes it) is in blocks of its own (strs),
// apart from what only the list holds (the lines it copied): a
// list of 100,000 identities then leaves 8 MB of lines to be collected
// instead of keeping them all run long.
type blocks struct {
	strs   arena.Strings // identities and credentials: kept by the run
	lines  arena.Strings // lines: the list's alone
	urls   urlAlloc
	fields []string
	canon  canonical
}

// canonical is the last scheme and host an identity was made for, and
// the start of that identity ("scheme://host:port"): the lines of a large
// list nearly all name one gateway, whose host need not be parsed again
// for each.
type canonical struct {
	scheme, host string
	b            []byte
}

// identity appends Identity(u) to b, as appendIdentity does.
func (bl *blocks) identity(b []byte, u *url.URL) []byte {
	c := &bl.canon
	if c.b == nil || u.Scheme != c.scheme || u.Host != c.host {
		c.b, _ = appendCanonical(c.b[:0], u)
		c.scheme, c.host = u.Scheme, u.Host
	}
	b = append(b, c.b...)
	if u.User != nil {
		b = appendFingerprint(b, u)
	}
	return b
}

// printableASCII reports whether b is not empty and every byte of it is
// printable ASCII other than a space: one field, valid UTF-8, no NUL.
func printableASCII(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return len(b) > 0
}

// fit returns ps, or a copy of it made to size when the estimate from the
// first lines left more than a quarter of it unused (lines that start
// short): the list is kept all run long.
func fit(ps []Proxy) []Proxy {
	if cap(ps)-len(ps) > len(ps)/4 && cap(ps) > sizeSample {
		return slices.Clone(ps)
	}
	return ps
}

// sizeSample is how many proxies parse reads before it sizes the list from
// the file's size, in one pass over the file: grown by append, the list of
// 100,000 proxies was allocated five times over.
const sizeSample = 256

// estimate is how many proxies a list of size bytes holds when the first
// read bytes held n, with a tenth more for lines longer than those.
func estimate(n int, read, size int64) int {
	return int(float64(n)*float64(size)/float64(read)*1.1) + 1
}

// skipped reports whether line b is blank or a comment, as strings.Fields
// splits it: such a line is passed over before anything of it is kept.
func skipped(b []byte) bool {
	b = bytes.TrimLeftFunc(b, unicode.IsSpace)
	return len(b) == 0 || b[0] == '#'
}

// parseLine parses physical line n (with its line end). ok is false for a
// blank or comment line; t is the template of a line with sessions=N, whose
// proxy p is then what its sessions have in common.
func parseLine(bl *blocks, name string, n int, raw []byte) (p Proxy, t *sessionTemplate, ok bool, err error) {
	fail := func(reason string, err error) (Proxy, *sessionTemplate, bool, error) {
		return Proxy{}, nil, false, &LineError{File: name, Line: n, Reason: reason, Err: err}
	}
	b := raw
	if len(b) > 0 && b[len(b)-1] == '\n' {
		b = b[:len(b)-1]
		if len(b) > 0 && b[len(b)-1] == '\r' {
			b = b[:len(b)-1]
		}
	}
	if len(b) > maxLineLen {
		return fail(fmt.Sprintf("line longer than %d bytes", maxLineLen), nil)
	}
	if n == 1 {
		b = trimBOM(b)
	}
	// A line of one field of printable ASCII (nearly every line of a large
	// list) is checked in one pass; others as the rules say, one by one.
	oneField := printableASCII(b) && b[0] != '#'
	if !oneField {
		if !utf8.Valid(b) {
			return fail("binary data (invalid UTF-8)", nil)
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return fail("binary data (NUL byte)", nil)
		}
		if skipped(b) {
			return Proxy{}, nil, false, nil
		}
	}
	if oneField && bl.urls.keep != nil {
		// A line of one URL that parseSimple takes, as nearly every line of
		// a large list is, is parsed where it was read: parseSimple copies
		// what the proxy keeps of it (its credentials and host, see
		// urlAlloc.keep), and the line itself is not copied (4.4 MB for
		// 100,000 identities).
		if u, ok := parseSimple(unsafe.String(unsafe.SliceData(b), len(b)), &bl.urls); ok {
			var buf [256]byte
			id := bl.identity(buf[:0], u)
			return Proxy{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: bl.strs.Bytes(id), From: name, Line: int32(n)}, nil, true, nil
		}
	}
	// The line is kept (the URL's parts are pieces of it), in blocks shared
	// with the other lines' (see arena).
	line := bl.lines.Bytes(b)
	if oneField {
		bl.fields = append(bl.fields[:0], line)
	} else {
		bl.fields = appendFields(bl.fields[:0], line)
	}
	fields := bl.fields
	for i, f := range fields {
		if strings.HasPrefix(f, "#") {
			fields = fields[:i]
			break
		}
	}
	if len(fields) == 0 {
		return Proxy{}, nil, false, nil
	}
	// {session} is not valid in a URL: the line is checked with session 1.
	raw0 := fields[0]
	hasMark := strings.Contains(raw0, sessionMark)
	if hasMark {
		raw0 = strings.ReplaceAll(raw0, sessionMark, "1")
	}
	u, err := parseURL(raw0, &bl.urls)
	if err != nil {
		var ue *urlError
		if errors.As(err, &ue) {
			return fail("bad proxy URL: "+ue.reason, err)
		}
		return fail("bad proxy URL", err)
	}
	var buf [256]byte
	id := bl.identity(buf[:0], u)
	p = Proxy{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: bl.strs.Bytes(id), From: name, Line: int32(n)}
	q := quoter{line: line, u: u, fields: fields[1:]}
	var (
		sessions int
		prefix   string
	)
	for i, f := range fields[1:] {
		key, val, found := strings.Cut(f, "=")
		if !found || key == "" {
			return fail("want key=value after the URL"+q.quote(": got ", f), nil)
		}
		if repeated(fields[1:1+i], key) {
			return fail("repeated key"+q.quote(" ", key), nil)
		}
		switch key {
		case "concurrency", "burst":
			v, err := strconv.Atoi(val)
			if err != nil || v < 1 || v > maxCount {
				return fail(fmt.Sprintf("bad %s%s: want an integer from 1 to %d", key, q.quote(" ", val), maxCount), nil)
			}
			if key == "concurrency" {
				p.Concurrency = v
			} else {
				p.Burst = v
			}
		case "rate": // rate=0 or rate=unlimited: no limit, as --proxy-rate 0
			if val == "" {
				return fail("bad rate: empty (write rate=0 for no limit)", limits.ErrBadRate)
			}
			r, err := limits.ParseRate(val)
			if err != nil {
				// Keep only the reason: ParseRate's message quotes the value.
				reason := "want N/s, N/m, N/h or N/DURATION"
				var re *limits.RateError
				if errors.As(err, &re) {
					reason = re.Reason
				}
				return fail("bad rate"+q.quote(" ", val)+": "+reason, limits.ErrBadRate)
			}
			p.Rate, p.RateSet = r, true
		case "pool":
			if !validPool(val) {
				return fail(fmt.Sprintf("bad pool name: want 1 to %d printable characters without white space", maxPoolLen), nil)
			}
			p.Pool = val
		case "sessions":
			v, err := strconv.Atoi(val)
			if err != nil || v < 1 || v > maxSessions {
				return fail(fmt.Sprintf("bad sessions%s: want an integer from 1 to %d", q.quote(" ", val), maxSessions), nil)
			}
			sessions = v
		case "session-prefix":
			if !validPool(val) { // the same shape as a pool name
				return fail(fmt.Sprintf("bad session-prefix: want 1 to %d printable characters without white space", maxPoolLen), nil)
			}
			prefix = val
		case "rotate":
			r, err := ParseRotation(val)
			if err != nil {
				return fail("bad rotate"+q.quote(" ", val)+": "+err.Error(), nil)
			}
			p.Rotate = r
		default:
			return fail("unknown key"+q.quote(" ", key)+" (want concurrency, rate, burst, pool, sessions, session-prefix or rotate)", nil)
		}
	}
	switch {
	case hasMark && sessions == 0:
		return fail("{session} in the URL needs sessions=N", nil)
	case !hasMark && sessions > 0:
		return fail("sessions= needs {session} in the user name or password", nil)
	case prefix != "" && sessions == 0:
		return fail("session-prefix= needs sessions=N and {session}", nil)
	case hasMark:
		t, ok := newSessionTemplate(fields[0], u, prefix, sessions)
		if !ok {
			return fail("{session} may appear only in the user name or password", nil)
		}
		return p, t, true, nil
	}
	return p, nil, true, nil
}

// repeated reports whether key is the key of one of fields, each
// "key=value": a line has a few.
func repeated(fields []string, key string) bool {
	for _, f := range fields {
		if k, _, _ := strings.Cut(f, "="); k == key {
			return true
		}
	}
	return false
}

// appendFields appends the fields of line, as strings.Fields splits it, to
// dst: without an allocation for a line of ASCII when dst has room.
func appendFields(dst []string, line string) []string {
	for i := 0; i < len(line); i++ {
		if line[i] >= utf8.RuneSelf {
			return append(dst, strings.Fields(line)...)
		}
	}
	for {
		i := 0
		for i < len(line) && asciiSpace(line[i]) {
			i++
		}
		if line = line[i:]; line == "" {
			return dst
		}
		j := 0
		for j < len(line) && !asciiSpace(line[j]) {
			j++
		}
		dst, line = append(dst, line[:j]), line[j:]
	}
}

// asciiSpace reports whether c is white space as strings.Fields has it.
func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func trimBOM(b []byte) []byte {
	const bom = "\ufeff"
	if len(b) >= len(bom) && string(b[:len(bom)]) == bom {
		return b[len(bom):]
	}
	return b
}

func validPool(s string) bool {
	if s == "" || len(s) > maxPoolLen {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return false
		}
	}
	return true
}
