package h1

import (
	"bufio"
	"errors"
	"net"
	"time"
)

// conn is a connection of a Client, and its place among the idle ones.
type conn struct {
	key    string
	c      net.Conn
	remote string // c's remote address, formatted when first asked for (see RemoteHooks)
	br     *bufio.Reader
	bw     *bufio.Writer
	bufs   *connBufs // br and bw, given back when the connection is closed
	limit  int64     // bytes that may still be read: bounds the response headers
	rerr   error     // the last Read's error (nil when it had none)
	again  bool      // the next Read returns rerr, without reading (see replayError)
	hold   bool      // Write keeps what bw flushes in out, for the next Read to send (see exchange)
	out    []byte    // a request held by Write: bw's own buffer, untouched until out is sent
	werr   error     // the error of the write of out, from the Read that sent it
	get    bool      // the request is a GET: its answer is judged while it comes (see owedAnswer)
	// waiter is the request's, asked and told of a wait for the body in
	// the first read of its answer (nil: none, and a body is always
	// waited for); it is dropped once that read is over. ends is where the
	// answer ends in that read's buffer, once its head has come: 0 before,
	// -1 when the read does not wait for its body.
	waiter Hooks
	ends   int
	since  time.Time
	prev   *conn
	next   *conn
	sock
}

// Write writes for bw, or keeps p in out when hold is set.
func (pc *conn) Write(p []byte) (int, error) {
	if pc.hold {
		pc.out = p
		return len(p), nil
	}
	return pc.c.Write(p)
}

// Read reads from the connection for br, within limit.
func (pc *conn) Read(p []byte) (int, error) {
	if pc.again {
		pc.again = false
		return 0, pc.rerr
	}
	if pc.limit <= 0 {
		pc.rerr = errHeaderLimit
		return 0, errHeaderLimit
	}
	if int64(len(p)) > pc.limit {
		p = p[:pc.limit]
	}
	var n int
	var err error
	switch {
	case pc.out != nil:
		n, err = pc.send(p)
	case pc.canSend():
		// The read alone (see sock.read).
		n, err = pc.read(pc.c, p)
	default:
		n, err = pc.c.Read(p)
	}
	pc.limit -= int64(n)
	pc.rerr = err // nil after a read that went well: never an older read's error
	if n > 0 && err != nil {
		// An error after bytes (send reads on past the first): the next
		// Read's, as a socket tells it.
		pc.again = true
		return n, nil
	}
	return n, err
}

// send writes out and reads the start of its answer into p (see
// sock.sendThenRead). A write's error is kept in werr, for exchange to
// tell from a read's, and Read returns it too.
func (pc *conn) send(p []byte) (int, error) {
	out := pc.out
	pc.out = nil
	var more owing
	if pc.get {
		more = pc
	}
	n, rest, werr, err := pc.sendThenRead(pc.c, out, p, more)
	if werr == nil && err == nil && len(rest) > 0 {
		// The socket took only part: the rest as any write, the answer
		// as any read.
		if _, werr = pc.c.Write(rest); werr == nil {
			n, err = pc.c.Read(p)
		}
	}
	if werr != nil {
		pc.werr = werr
		return 0, werr
	}
	return n, err
}

// owing is what the first read of an answer asks whether the bytes read
// so far must be followed by more, before it returns them (see
// sock.sendThenRead): a *conn, for the answer to a GET on it.
type owing interface{ owedAnswer(buf []byte) bool }

// owedAnswer reports whether buf, the start of the answer to a GET on pc,
// must be followed by more bytes before the read returns them:
//   - a head not yet ended that readResponse waits on (every line so far
//     one it takes, see headSoFar), the headers phase's wait;
//   - past the head, the body, when the head came alone with a 2xx status
//     and a Content-Length whose body fits the read's room (buf's
//     capacity) and is wanted (pc.waiter); the read tells pc.waiter that
//     the wait is the body's from then.
//
// squid writes an answer's head and body apart; the read of the body after
// the head would try the socket before it waited (see sock.sendThenRead):
// one system call that finds nothing, an answer. A body that came with its
// head (as nginx and Go servers send small answers) has most often come
// whole: a look at the head would cost every such answer what it saves the
// few.
func (pc *conn) owedAnswer(buf []byte) bool {
	if pc.ends == 0 { // the head is read once
		end := headEnd(buf, 0)
		if end < 0 {
			return headSoFar(buf, 0) >= 0
		}
		pc.ends = -1
		if end+4 == len(buf) {
			code, length := plainLength(buf, end)
			if code/100 == 2 && length > 0 && length <= int64(cap(buf)-len(buf)) &&
				(pc.waiter == nil || pc.waiter.BodyWanted(code, length)) {
				pc.ends = len(buf) + int(length)
			}
		}
	}
	if pc.ends < 0 || len(buf) >= pc.ends {
		return false
	}
	if pc.waiter != nil {
		pc.waiter.BodyBytes()
	}
	return true
}

// replayError has the next Read return the last read's error again, once:
// readResponse took it while it waited for the rest of a head, and
// net/http, which reads the answer then, must meet it as it would have
// (a socket tells a reset once, and then an end of file).
func (pc *conn) replayError() { pc.again = pc.rerr != nil }

var errHeaderLimit = errors.New("h1: header limit")

const unlimited = 1<<63 - 1
