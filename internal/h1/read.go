package h1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// readResponse reads the response to req from br as http.ReadResponse
// does: the same Response, the same bytes of its body and the same bytes
// left on br (closing a body not read to its end is body's: it closes
// the connection, where net/http's body would read what is left). The
// answers a Client reads most (HTTP/1.1, a final status with a body, one
// Content-Length, headers on one line each, a head that fits br's buffer)
// it reads itself: one string for the whole header block, from
// which every name and value is cut, where net/http makes a string of
// each, and a body with no reader under it: 1.13 µs and 6 allocations for
// nginx's answer with 1 KiB, against 1.50 µs and 15 (BenchmarkReadResponse).
// Anything else (a 1xx, 204 or 304, HEAD, chunked or unbounded bodies,
// Connection other than keep-alive, folded lines, a byte net/http
// refuses) is left to http.ReadResponse, untouched. A head that comes in
// pieces (tinyproxy writes each header line on its own) is waited for
// while every line of it so far is one readResponse takes, so that it too
// is read here.
//
// A read that fails while the head is waited for leaves the answer to
// http.ReadResponse, which must meet the same error, and then what the
// source says after it, as it would have: src, br's source, gives that
// error once more (conn does; a source whose reads repeat their error,
// as a strings.Reader's end, needs nothing and may be nil).
func readResponse(br *bufio.Reader, req *http.Request, src errorReplayer) (*http.Response, error) {
	seen := 0 // the head's lines already looked at while it came
	for {
		resp, more := readPlainResponse(br, req, seen)
		if resp != nil {
			return resp, nil
		}
		if more < 0 {
			break
		}
		seen = more
		if _, err := br.Peek(br.Buffered() + 1); err != nil {
			if src != nil {
				src.replayError()
			}
			break
		}
	}
	return http.ReadResponse(br, req)
}

// http11 starts every status line that readPlainResponse takes.
const http11 = "HTTP/1.1 "

// errorReplayer is a reader that can give its last error once more, on
// its next read.
type errorReplayer interface{ replayError() }

// readPlainResponse is readResponse's own reading; nil when it leaves the
// response to net/http, having read nothing. The first seen bytes of br's
// buffer are whole lines of a head that it has looked at before. When the
// head is not all in the buffer yet, there is room for it there and what
// has come of it is one readPlainResponse takes, so that net/http too
// would wait for the rest before it decides anything, more is how much of
// it has been looked at; else more is -1.
func readPlainResponse(br *bufio.Reader, req *http.Request, seen int) (resp *http.Response, more int) {
	if req != nil && req.Method != "" && req.Method != http.MethodGet {
		return nil, -1 // a nil request is a GET's, as for net/http
	}
	buf, _ := br.Peek(br.Buffered())
	end := headEnd(buf, seen)
	if end < 0 {
		if len(buf) == br.Size() {
			return nil, -1
		}
		return nil, headSoFar(buf, seen)
	}
	if !bytes.HasPrefix(buf, []byte(http11)) {
		return nil, -1
	}
	block := string(buf[:end+2]) // each line with its CRLF
	line, rest := cutLine(block)
	status, code, ok := statusLine(line)
	if !ok {
		return nil, -1
	}
	lines := strings.Count(rest, "\n")
	strs := make([]string, lines) // as net/http: one slice cut up for single values
	header := make(http.Header, lines)
	length := int64(-1)
	lines0 := rest
	for rest != "" {
		line, rest = cutLine(rest)
		key, value, ok := headerLine(line)
		if !ok {
			return nil, -1
		}
		key = canonicalName(key)
		switch key {
		case "Content-Length":
			if length >= 0 {
				return nil, -1 // net/http compares them and keeps one
			}
			if length = parseLength(value); length < 0 {
				return nil, -1
			}
		case "Connection":
			if !asciiEqualFold(value, "keep-alive") {
				return nil, -1 // close, or a list: net/http decides
			}
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, -1 // a framing, or a header net/http rewrites
		}
		// One hash a line: a name seen before does not grow the map, and
		// only then (rare) are its values gathered again.
		n := len(header)
		vv := strs[:1:1]
		vv[0] = value
		header[key] = vv
		if len(header) > n {
			strs = strs[1:]
		} else {
			header[key] = valuesOf(lines0[:len(lines0)-len(rest)], key)
		}
	}
	if length < 0 {
		return nil, -1
	}
	br.Discard(end + 4)
	resp = &http.Response{
		Status: status, StatusCode: code, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, ContentLength: length, Request: req, Body: http.NoBody,
	}
	if length > 0 {
		resp.Body = &fixedBody{r: br, n: length}
	}
	return resp, -1
}

// headEnd returns where the blank line that ends the head in buf starts,
// less the CRLF before it (bytes.Index(buf, "\r\n\r\n")), or -1. The first
// seen bytes of buf are whole lines, none of them blank: it looks at the
// lines from there, one IndexByte a line, where a search for the four bytes
// stopped at every CR.
func headEnd(buf []byte, seen int) int {
	for i := seen; i < len(buf); {
		n := bytes.IndexByte(buf[i:], '\n')
		if n < 0 {
			return -1
		}
		if n == 1 && buf[i] == '\r' && i >= 2 && buf[i-2] == '\r' && buf[i-1] == '\n' {
			return i - 2
		}
		i += n + 1
	}
	return -1
}

// valuesOf returns the values of the header lines in lines (each ended by
// CRLF, every one taken by headerLine) whose canonical name is key.
func valuesOf(lines, key string) []string {
	var vv []string
	for lines != "" {
		var line string
		line, lines = cutLine(lines)
		if k, v, _ := headerLine(line); canonicalName(k) == key {
			vv = append(vv, v)
		}
	}
	return vv
}

// plainLength returns the status code and the body's length of the head
// of an answer to a GET, buf[:end+4] (see headEnd), when that length is
// its one Content-Length: every byte of it is one the response's body
// reads, whoever parses the head. The length is -1 when the head does not
// give it so: a status without a body (1xx, 204, 304), a
// Transfer-Encoding, no Content-Length or more than one, a line that
// statusLine or headerLine does not take. Other lines readPlainResponse
// leaves to net/http (Connection: close, Trailer, Pragma) frame a body
// the same way, and are taken.
func plainLength(buf []byte, end int) (code int, length int64) {
	if !bytes.HasPrefix(buf, []byte(http11)) {
		return 0, -1
	}
	line, rest := cutLine(buf[:end+2])
	_, code, ok := statusLine(line)
	if !ok {
		return 0, -1
	}
	length = -1
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		key, value, ok := headerLine(line)
		switch {
		case !ok, asciiEqualFold(key, "Transfer-Encoding"):
			return code, -1
		case asciiEqualFold(key, "Content-Length"):
			if length >= 0 {
				return code, -1
			}
			if length = parseLength(value); length < 0 {
				return code, -1
			}
		}
	}
	return code, length
}

// headSoFar looks at buf, a head not yet all read whose first seen bytes
// are lines looked at before, and returns how much of it is whole lines
// that readPlainResponse takes: HTTP/1.1 (or the start of it), a status
// line, header lines, each ended by CRLF; -1 when a line is not one it
// takes. The line still coming is judged when it has ended, as net/http
// judges it.
func headSoFar(buf []byte, seen int) int {
	if len(buf) < len(http11) {
		if string(buf) != http11[:len(buf)] {
			return -1
		}
		return 0
	}
	if !bytes.HasPrefix(buf, []byte(http11)) {
		return -1
	}
	ended := bytes.LastIndexByte(buf, '\n') + 1
	if ended <= seen {
		return seen
	}
	lines := buf[seen:ended]
	if seen == 0 {
		line, rest := cutLine(lines)
		if _, _, ok := statusLine(line); !ok {
			return -1
		}
		lines = rest
	}
	for len(lines) > 0 {
		var line []byte
		line, lines = cutLine(lines)
		if _, _, ok := headerLine(line); !ok {
			return -1
		}
	}
	return ended
}

// statusLine returns the status and code of line, an HTTP/1.1 status line
// without its CRLF, when readPlainResponse takes it: a final status with a
// body, in plain text.
func statusLine[T text](line T) (status T, code int, ok bool) {
	status = line[len(http11):]
	if len(status) < 3 || len(status) > 3 && status[3] != ' ' || !isDigit(status[0]) || !isDigit(status[1]) || !isDigit(status[2]) {
		return status, 0, false
	}
	code = int(status[0]-'0')*100 + int(status[1]-'0')*10 + int(status[2]-'0')
	if code < 200 || code == 204 || code == 304 || !plainText(status) {
		return status, 0, false
	}
	return status, code, true
}

// headerLine returns the name and value of line, a header line without
// its CRLF, when readPlainResponse takes it (see indexColon and
// plainText); the name as written.
func headerLine[T text](line T) (key, value T, ok bool) {
	colon := indexColon(line)
	if colon <= 0 {
		return key, value, false
	}
	key, value = line[:colon], trimValue(line[colon+1:])
	return key, value, plainText(value)
}

// text is a header block's bytes: a string cut from the block read, or
// the bytes of a block still coming, looked at where they are.
type text interface{ string | []byte }

// cutLine returns the line at the start of s, without its CRLF, and what
// follows it. Every line of a block readPlainResponse takes ends in CRLF;
// a bare LF (which net/http takes as a line end too) leaves a CR-less
// line, which plainText refuses.
func cutLine[T text](s T) (line, rest T) {
	i := indexLF(s)
	if i < 0 {
		return s, s[len(s):]
	}
	if i == 0 || s[i-1] != '\r' {
		return s[:i+1], s[i+1:] // keeps the LF: refused
	}
	return s[:i-1], s[i+1:]
}

// indexLF returns the index of the first LF in s, or -1: strings' and
// bytes' IndexByte, which look at many bytes at once.
func indexLF[T text](s T) int {
	if b, ok := any(s).([]byte); ok {
		return bytes.IndexByte(b, '\n')
	}
	return strings.IndexByte(string(s), '\n')
}

// indexColon returns where the name of a header line ends, or -1 when the
// line is not one readPlainResponse takes: a name of letters, digits and
// '-' (no folded line, which starts with a space), then ':'.
func indexColon[T text](line T) int {
	for i := 0; i < len(line); i++ {
		if c := line[i]; headBytes[c]&inName == 0 {
			if c == ':' {
				return i
			}
			return -1
		}
	}
	return -1
}

// What a byte may be in a head readPlainResponse takes, as bits of
// headBytes: one table lookup a byte, where the tests by range took three
// or four comparisons.
const (
	inName  = 1 << iota // in a header name: a letter, a digit or '-'
	inValue             // in a value as net/http keeps it (see plainText)
)

var headBytes = func() (t [256]uint8) {
	for c := range 256 {
		if isAlnum(byte(c)) || c == '-' {
			t[c] |= inName
		}
		if c >= ' ' && c != 0x7f || c == '\t' {
			t[c] |= inValue
		}
	}
	return t
}()

// trimValue is a header value as net/http keeps it: without the spaces
// and tabs at its ends.
func trimValue[T text](v T) T {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// plainText reports whether s has only bytes net/http takes in a header
// value as they are: visible ASCII, space, tab, and bytes of 0x80 and up.
func plainText[T text](s T) bool {
	for i := 0; i < len(s); i++ {
		if headBytes[s[i]]&inValue == 0 {
			return false
		}
	}
	return true
}

// canonicalName is key in canonical form ("Content-Type"), as net/http
// keeps it: key itself, with no copy, when it is in that form already.
func canonicalName(key string) string {
	if canonicalKey(key) {
		return key
	}
	return textproto.CanonicalMIMEHeaderKey(key)
}

// canonicalKey reports whether key is in canonical form already
// ("Content-Type"), so that it can be used as it is.
func canonicalKey(key string) bool {
	upper := true
	for i := 0; i < len(key); i++ {
		c := key[i]
		if upper && 'a' <= c && c <= 'z' || !upper && 'A' <= c && c <= 'Z' {
			return false
		}
		upper = c == '-'
	}
	return true
}

// parseLength parses a Content-Length as net/http does, or returns -1
// where it would fail (or take it another way).
func parseLength[T text](v T) int64 {
	if len(v) == 0 || len(v) > 18 {
		return -1
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return -1
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func asciiEqualFold[T text](s T, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// fixedBody is a body of n bytes more on r. As net/http's, it returns
// io.EOF with its last bytes, and io.ErrUnexpectedEOF when r ends first;
// its Close does nothing (body closes the connection instead).
type fixedBody struct {
	r *bufio.Reader
	n int64
}

func (b *fixedBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	switch {
	case b.n == 0:
		return n, io.EOF
	case err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *fixedBody) Close() error { return nil }
