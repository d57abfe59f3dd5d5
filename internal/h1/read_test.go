package h1

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

// How an answer arrives: whole, or its head whole and then a byte at a
// time, or every line of it on its own (as tinyproxy writes its heads)
// and then a byte at a time.
const (
	whole = iota
	bodyInPieces
	linesInPieces
	linesThenReset // a line at a time, then a reset, told once, then the end of file
)

// netHTTPRead is http.ReadResponse as readAs calls a reader.
func netHTTPRead(br *bufio.Reader, req *http.Request, _ errorReplayer) (*http.Response, error) {
	return http.ReadResponse(br, req)
}

var errTestReset = errors.New("test: connection reset")

// readAs is what a read of raw as the response to a request of method
// gives: the response's fields, its body and the body's last error, and
// what is left unread after it, with read (readResponse or
// http.ReadResponse), raw arriving as split says (a socket may give it so).
func readAs(read func(*bufio.Reader, *http.Request, errorReplayer) (*http.Response, error), raw, method string, split int) string {
	var src io.Reader = strings.NewReader(raw)
	var replayer errorReplayer
	switch split {
	case bodyInPieces:
		head := len(raw)
		if i := strings.Index(raw, "\r\n\r\n"); i >= 0 {
			head = min(i+5, len(raw))
		}
		src = io.MultiReader(strings.NewReader(raw[:head]), iotest.OneByteReader(strings.NewReader(raw[head:])))
	case linesInPieces:
		src = &lineReader{rest: raw}
	case linesThenReset:
		lr := &lineReader{rest: raw, fail: errTestReset}
		src, replayer = lr, lr
	}
	br := bufio.NewReaderSize(src, 4096)
	if split != linesThenReset {
		br.Peek(1) // as h1 waits for the first byte; after a 1xx, it does not
	}
	req := &http.Request{Method: method}
	resp, err := read(br, req, replayer)
	// How much was read before the answer was taken or refused: a read
	// that waits for more of a head than net/http does would wait for a
	// server that sends no more.
	decided := ""
	if lr, ok := src.(*lineReader); ok && split == linesInPieces {
		decided = fmt.Sprintf("decided after %d bytes: ", lr.read)
	}
	if err != nil {
		return decided + "error: " + err.Error()
	}
	body, berr := io.ReadAll(resp.Body)
	resp.Body.Close()
	rest, _ := io.ReadAll(br)
	return decided + fmt.Sprintf("%q %d %q %d.%d header %v length %d te %v close %v trailer %v uncompressed %v request %v body %q (%v) rest %q",
		resp.Status, resp.StatusCode, resp.Proto, resp.ProtoMajor, resp.ProtoMinor, sortedHeader(resp.Header),
		resp.ContentLength, resp.TransferEncoding, resp.Close, resp.Trailer, resp.Uncompressed, resp.Request == req, body, berr, rest)
}

// lineReader gives rest a line (to its LF) at a time while it has lines,
// then a byte at a time (or, with wholeTail, all the rest at once), and
// counts what it gave. At the end it fails once with fail, when set, and
// then gives io.EOF, as a socket tells a reset; replayError gives its last
// error once more, as conn does.
type lineReader struct {
	rest      string
	read      int
	wholeTail bool
	fail      error
	last      error
	again     bool
}

func (r *lineReader) replayError() { r.again = r.last != nil }

func (r *lineReader) Read(p []byte) (int, error) {
	if r.again {
		r.again = false
		return 0, r.last
	}
	if r.rest == "" {
		r.last, r.fail = cmp.Or(r.fail, io.EOF), nil
		return 0, r.last
	}
	n := 1
	if i := strings.IndexByte(r.rest, '\n'); i >= 0 {
		n = i + 1
	} else if r.wholeTail {
		n = len(r.rest)
	}
	n = copy(p, r.rest[:n])
	r.rest = r.rest[n:]
	r.read += n
	return n, nil
}

func sortedHeader(h http.Header) string {
	var b strings.Builder
	h.Write(&b) // sorted by name
	return fmt.Sprintf("%q", b.String())
}

// TestReadResponseAsNetHTTP: readResponse reads what http.ReadResponse
// reads, for answers it reads itself and for those it leaves to net/http.
func TestReadResponseAsNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, raw, method string
		plain             bool // read by readResponse itself
	}{
		{name: "nginx", plain: true, raw: "HTTP/1.1 200 OK\r\nServer: nginx\r\nDate: Tue, 01 Dec 2026 21:47:07 GMT\r\nContent-Type: application/octet-stream\r\nContent-Length: 5\r\nLast-Modified: x\r\nConnection: keep-alive\r\nETag: \"a\"\r\nAccept-Ranges: bytes\r\n\r\nhelloNEXT"},
		{name: "squid", plain: true, raw: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\nX-Cache: MISS from vm\r\nConnection: Keep-Alive\r\n\r\nabc"},
		{name: "no reason, empty body", plain: true, raw: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n"},
		{name: "lower-case names, spaces, repeats", plain: true, raw: "HTTP/1.1 503 Service Unavailable \r\ncontent-length:  2 \r\nx-a: 1\r\nX-A:\t2\t\r\nx-b:\r\n\r\nokmore"},
		{name: "a name three times, others between", plain: true, raw: "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nContent-Length: 2\r\nset-cookie: b=2\r\nX-A: 1\r\nSet-Cookie: c=3\r\n\r\nok"},
		{name: "obs-text", plain: true, raw: "HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\nContent-Length: 1\r\n\r\nx"},
		{name: "body cut short", plain: true, raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"},
		{name: "HEAD", method: "HEAD", raw: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"},
		{name: "chunked", raw: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{name: "no length", raw: "HTTP/1.1 200 OK\r\nX: y\r\n\r\nto the end"},
		{name: "two lengths", raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab"},
		{name: "close", raw: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nab"},
		{name: "HTTP/1.0", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab"},
		{name: "100 Continue", raw: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"},
		{name: "204", raw: "HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n"},
		{name: "304", raw: "HTTP/1.1 304 Not Modified\r\n\r\n"},
		{name: "Pragma", raw: "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n"},
		{name: "folded", raw: "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 0\r\n\r\n"},
		{name: "bare LF", raw: "HTTP/1.1 200 OK\nContent-Length: 2\n\nab"},
		{name: "CR in a value", raw: "HTTP/1.1 200 OK\r\nX-A: 1\r2\r\nContent-Length: 0\r\n\r\n"},
		{name: "space before the colon", raw: "HTTP/1.1 200 OK\r\nX-A : 1\r\nContent-Length: 0\r\n\r\n"},
		{name: "bad length", raw: "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\nab"},
		{name: "bad status", raw: "HTTP/1.1 20x OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "two spaces", raw: "HTTP/1.1  200 OK\r\nContent-Length: 0\r\n\r\n"},
		{name: "not all read", raw: "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"},
		{name: "tinyproxy", plain: true, raw: "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Wed, 02 Dec 2026 01:05:38 GMT\r\nContent-Type: text/plain\r\nContent-Length: 4\r\nETag: \"6b0f6e6c-400\"\r\n\r\nbody"},
		{name: "bad status, then more", raw: "HTTP/1.1 2x0 OK\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n"},
		{name: "bad header line, then more", raw: "HTTP/1.1 200 OK\r\nX-A 1\r\nX-B: 2\r\nContent-Length: 0\r\n\r\n"},
		{name: "bare LF, then more", raw: "HTTP/1.1 200 OK\r\nX-A: 1\nX-B: 2\r\nContent-Length: 0\r\n\r\n"},
		{name: "empty line of LF", raw: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nab"},
		{name: "1xx, then in pieces", raw: "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nab"},
		{name: "HTTP/1.0 in pieces", raw: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab"},
		{name: "HTTP/1.1 cut", raw: "HTTP/1."},
		{name: "nothing", raw: ""},
	} {
		if resp, _ := readPlainResponse(bufioOf(tc.raw), &http.Request{Method: tc.method}, 0); (resp != nil) != tc.plain {
			t.Errorf("%s: read by readResponse itself: %v, want %v", tc.name, resp != nil, tc.plain)
		}
		if tc.plain { // and so when its head comes a line at a time
			br := bufio.NewReaderSize(&lineReader{rest: tc.raw}, 4096)
			br.Peek(1)
			resp, err := readResponse(br, &http.Request{Method: tc.method}, nil)
			if err != nil {
				t.Errorf("%s, a line at a time: %v", tc.name, err)
			} else if _, fixed := resp.Body.(*fixedBody); !fixed && resp.Body != http.NoBody {
				t.Errorf("%s, a line at a time: not read by readResponse itself (body %T)", tc.name, resp.Body)
			}
		}
		for _, split := range []int{whole, bodyInPieces, linesInPieces, linesThenReset} {
			ours, theirs := readAs(readResponse, tc.raw, tc.method, split), readAs(netHTTPRead, tc.raw, tc.method, split)
			if ours != theirs {
				t.Errorf("%s (split %d): readResponse read\n%s\nnet/http\n%s", tc.name, split, ours, theirs)
			}
		}
	}
}

func bufioOf(raw string) *bufio.Reader {
	br := bufio.NewReaderSize(strings.NewReader(raw), 4096)
	br.Peek(1)
	return br
}

// FuzzReadResponse: for any bytes a server sends, readResponse reads what
// http.ReadResponse reads.
func FuzzReadResponse(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nabcdef", "GET", false)
	f.Add("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nConnection: keep-alive\r\nX-A: 1\r\nx-a: 2\r\n\r\n", "", true)
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", "HEAD", false)
	f.Fuzz(func(t *testing.T, raw, method string, pieces bool) {
		for _, split := range splits(pieces) {
			if ours, theirs := readAs(readResponse, raw, method, split), readAs(netHTTPRead, raw, method, split); ours != theirs {
				t.Errorf("split %d: readResponse read\n%s\nnet/http\n%s", split, ours, theirs)
			}
		}
	})
}

// FuzzReadResponseParts: FuzzReadResponse for answers made of a status
// line, two headers and a Content-Length, so that most inputs are ones
// readResponse reads itself.
func FuzzReadResponseParts(f *testing.F) {
	f.Add(200, "OK", "Content-Type", "text/plain", "x-a", " 1 ", "3", "abcdef", false)
	f.Add(503, "", "Connection", "keep-alive", "X-A", "caf\xc3\xa9", "0", "", true)
	f.Fuzz(func(t *testing.T, code int, reason, k1, v1, k2, v2, length, body string, pieces bool) {
		raw := fmt.Sprintf("HTTP/1.1 %03d %s\r\n%s: %s\r\n%s: %s\r\nContent-Length: %s\r\n\r\n%s", code, reason, k1, v1, k2, v2, length, body)
		for _, split := range splits(pieces) {
			if ours, theirs := readAs(readResponse, raw, "GET", split), readAs(netHTTPRead, raw, "GET", split); ours != theirs {
				t.Errorf("split %d: readResponse read\n%s\nnet/http\n%s", split, ours, theirs)
			}
		}
	})
}

// splits are the ways a fuzzed answer arrives: whole, or in pieces both
// ways.
func splits(pieces bool) []int {
	if pieces {
		return []int{bodyInPieces, linesInPieces, linesThenReset}
	}
	return []int{whole}
}

// TestReadResponseNilRequest: with no request, an answer is read as a
// GET's, as http.ReadResponse reads it.
func TestReadResponseNilRequest(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	resp, err := readResponse(bufioOf(raw), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "ok" || resp.Request != nil {
		t.Errorf("body %q, request %v", b, resp.Request)
	}
}

// BenchmarkReadResponse: nginx's answer to a GET, read with its 1 KiB
// body by readResponse and by http.ReadResponse, whole and with its head
// coming a line at a time; and the same answer as squid passes it on, with
// two headers more (and one name not in canonical form).
func BenchmarkReadResponse(b *testing.B) {
	nginx := "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Tue, 01 Dec 2026 21:47:07 GMT\r\nContent-Type: application/octet-stream\r\n" +
		"Content-Length: 1024\r\nLast-Modified: Tue, 01 Dec 2026 21:00:00 GMT\r\nConnection: keep-alive\r\nETag: \"6929f0a0-400\"\r\nAccept-Ranges: bytes\r\n\r\n" +
		strings.Repeat("x", 1024)
	squid := "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Tue, 01 Dec 2026 21:47:07 GMT\r\nContent-Type: application/octet-stream\r\n" +
		"Content-Length: 1024\r\nLast-Modified: Tue, 01 Dec 2026 21:00:00 GMT\r\nETag: \"6929f0a0-400\"\r\nAccept-Ranges: bytes\r\n" +
		"X-Cache: MISS from vm\r\nX-Cache-Lookup: MISS from vm:3128\r\nConnection: keep-alive\r\n\r\n" +
		strings.Repeat("x", 1024)
	req := &http.Request{Method: "GET"}
	for _, bc := range []struct {
		name  string
		read  func(*bufio.Reader, *http.Request, errorReplayer) (*http.Response, error)
		raw   string
		lines bool // the head comes a line at a time, as tinyproxy sends it
	}{
		{"fetch", readResponse, nginx, false},
		{"net-http", netHTTPRead, nginx, false},
		{"fetch-lines", readResponse, nginx, true},
		{"net-http-lines", netHTTPRead, nginx, true},
		{"fetch-squid", readResponse, squid, false},
		{"net-http-squid", netHTTPRead, squid, false},
	} {
		raw := bc.raw
		b.Run(bc.name, func(b *testing.B) {
			src := strings.NewReader(raw)
			lines := &lineReader{}
			br := bufio.NewReaderSize(src, 4096)
			body := make([]byte, 2048)
			b.ReportAllocs()
			for b.Loop() {
				if bc.lines {
					*lines = lineReader{rest: raw, wholeTail: true}
					br.Reset(lines)
				} else {
					src.Reset(raw)
					br.Reset(src)
				}
				br.Peek(1)
				resp, err := bc.read(br, req, nil)
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := io.ReadFull(resp.Body, body[:1024]); n != 1024 {
					b.Fatalf("%d body bytes", n)
				}
			}
		})
	}
}

// TestHeadBytes: plainText and indexColon, which look at a byte through
// the headBytes table, agree with the rule for every byte at every place
// of a value: a value is plain when none of
// its bytes is below a space but a tab, or DEL; a name is letters, digits
// and '-'.
func TestHeadBytes(t *testing.T) {
	plainByte := func(c byte) bool { return c >= ' ' && c != 0x7f || c == '\t' }
	nameByte := func(c byte) bool { return isAlnum(c) || c == '-' }
	for c := range 256 {
		for at := range 19 {
			v := []byte(strings.Repeat("a\x80 ~", 5)[:19]) // plain bytes, some high
			v[at] = byte(c)
			if got, want := plainText(string(v)), plainByte(byte(c)); got != want {
				t.Errorf("plainText(%q) = %v, want %v", v, got, want)
			}
			if got, want := plainText(v), plainByte(byte(c)); got != want {
				t.Errorf("plainText([]byte %q) = %v, want %v", v, got, want)
			}
			name := []byte("X-Abc-Def-Ghi-Jkl-M:v")
			name[at] = byte(c)
			want := 19 // the colon
			if c == ':' {
				want = at
			} else if !nameByte(byte(c)) {
				want = -1
			}
			if got := indexColon(string(name)); got != want {
				t.Errorf("indexColon(%q) = %d, want %d", name, got, want)
			}
		}
	}
}

// TestOwed: the start of an answer to a GET is owed more (owedAnswer)
// while its head is not ended and readResponse waits on it, never for an
// answer h1 does not read itself, and past the head exactly while the body
// its one Content-Length gives is not all in; only that wait is told to
// the waiter, once a read: the wait is the body phase's from then. Only a head that came alone, with a 2xx
// status, is looked at for its length, and only a body that fits the
// read's room (4 KiB here) and that the waiter wants is waited for.
func TestOwed(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nServer: squid\r\nContent-Length: 4\r\n\r\n"
	for _, tc := range []struct {
		name, buf string
		cut, owed bool // the head is not whole; owedAnswer
	}{
		{"status line cut", "HTTP/1.1 20", true, true},
		{"head cut after a line (tinyproxy)", "HTTP/1.1 200 OK\r\nServer: tiny\r\n", true, true},
		{"head cut in a line", "HTTP/1.1 200 OK\r\nServ", true, true},
		{"head without its body (squid)", head, false, true},
		{"body cut", head + "ab", false, false}, // came with its head: not looked at
		{"whole", head + "abcd", false, false},
		{"more than the body", head + "abcdHTTP", false, false},
		{"empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, false},
		{"no length", "HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", false, false},
		{"chunked after the length", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\ntransfer-encoding: chunked\r\n\r\n", false, false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\ncontent-length: 4\r\n\r\n", false, false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: 4x\r\n\r\n", false, false},
		{"length too long", "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n", false, false},
		{"lower-case length", "HTTP/1.1 200 OK\r\ncontent-LENGTH: 4\r\n\r\n", false, true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 4\r\n\r\n", false, true},
		{"404 with a body", "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n", false, false},
		{"206", "HTTP/1.1 206 Partial Content\r\nContent-Length: 9\r\n\r\n", false, true},
		{"body over the room", "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n", false, false},
		{"204", "HTTP/1.1 204 No Content\r\nContent-Length: 4\r\n\r\n", false, false},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 4\r\n\r\n", false, false},
		{"100 continue", "HTTP/1.1 100 Continue\r\n", false, false},
		{"100 continue ended", "HTTP/1.1 100 Continue\r\nContent-Length: 4\r\n\r\n", false, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 4\r\n\r\n", false, false},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n", false, false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 4\n", false, false},
		{"bare LF ended", "HTTP/1.1 200 OK\nContent-Length: 4\n\n", false, false},
		{"folded line", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n", false, false},
		{"folded line ended", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX: a\r\n b\r\n\r\n", false, false},
	} {
		var w countWaiter
		pc := &conn{waiter: &w}
		got := pc.owedAnswer(roomy(tc.buf))
		if got != tc.owed {
			t.Errorf("%s: owedAnswer(%q) = %v, want %v", tc.name, tc.buf, got, tc.owed)
		}
		// The waiter hears of a wait for the body, and of nothing else.
		if wantWaits := got && !tc.cut; w.told != b2i(wantWaits) {
			t.Errorf("%s: the waiter was told %d times, want %d", tc.name, w.told, b2i(wantWaits))
		}
	}
	// A body the waiter does not want (the head decides) is not waited for.
	w := countWaiter{refuse: true}
	pc := &conn{waiter: &w}
	if pc.owedAnswer(roomy(head)) || w.told != 0 {
		t.Errorf("a body the waiter does not want is waited for (told %d times)", w.told)
	}
}

// TestOwedAnswerAsItComes: one answer as one read takes it in, piece by
// piece: its head is read once (owedAnswer keeps where the answer ends),
// and it is owed more until its body is all in.
func TestOwedAnswerAsItComes(t *testing.T) {
	const answer = "HTTP/1.1 200 OK\r\nServer: squid\r\nContent-Length: 4\r\n\r\nabcd"
	var w countWaiter
	pc := &conn{waiter: &w}
	for _, step := range []struct {
		n     int // bytes in so far
		owed  bool
		waits int
	}{
		{10, true, 0},               // status line cut
		{len(answer) - 4, true, 1},  // the head
		{len(answer) - 2, true, 2},  // part of the body
		{len(answer), false, 2},     // all of it
		{len(answer) + 3, false, 2}, // and more (not this answer's)
	} {
		if got := pc.owedAnswer(roomy(answer + "HTT")[:step.n]); got != step.owed || w.told != step.waits {
			t.Errorf("%d bytes in: owed %v, waiter told %d times; want %v, %d", step.n, got, w.told, step.owed, step.waits)
		}
	}
}

// roomy returns s as the start of a read's buffer of 4 KiB more (see
// owedAnswer: the room is its capacity).
func roomy(s string) []byte {
	return append(make([]byte, 0, len(s)+4096), s...)
}

// countWaiter wants every body, unless told to refuse, and counts what it
// is told.
type countWaiter struct {
	refuse bool
	told   int
}

func (w *countWaiter) BodyWanted(int, int64) bool { return !w.refuse }

func (w *countWaiter) BodyBytes() { w.told++ }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// moreReader stands for a server that has sent nothing more yet: a read
// of it panics with errMore, as a read that would wait.
type moreReader struct{}

func (moreReader) Read([]byte) (int, error) { panic(errMore) }

// errMore is the read past what a server has sent so far.
var errMore = errors.New("more asked for")

// asksMore reports whether net/http, reading start as a GET's answer (head
// and body to its end), reads past it.
func asksMore(start string) (asked bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			if r != errMore {
				panic(r)
			}
			asked = true
		}
	}()
	src := io.MultiReader(strings.NewReader(start), moreReader{})
	resp, err := http.ReadResponse(bufio.NewReader(src), &http.Request{Method: "GET"})
	if err == nil {
		_, err = io.ReadAll(resp.Body)
	}
	return false, err
}

// FuzzOwed: whenever owedAnswer says the start of an answer must go on, net/http, reading that start of a GET's answer (head and body to
// its end), would wait for more: so that h1 waiting for more, where it
// would have returned the bytes to the reader, waits no longer than
// net/http would. (A reader that decides on the head alone, not reading
// the body, says so to owedAnswer through its waiter: see Hooks.BodyWanted.)
func FuzzOwed(f *testing.F) {
	f.Add("HTTP/1.1 200 OK\r\nServer: squid\r\nContent-Length: 4\r\n\r\nabcd")
	f.Add("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n")
	f.Add("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nConnection: keep-alive\r\n\r\n")
	f.Add("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na")
	f.Fuzz(func(t *testing.T, raw string) {
		for k := 1; k <= len(raw); k++ {
			start := raw[:k]
			pc := &conn{}
			if !pc.owedAnswer(roomy(start)) {
				continue
			}
			if asked, err := asksMore(start); !asked {
				t.Fatalf("owedAnswer(%q), but net/http read it without more: %v", start, err)
			}
		}
	})
}
