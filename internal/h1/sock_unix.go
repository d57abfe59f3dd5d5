//go:build unix

package h1

import (
	"io"
	"net"
	"os"
	"syscall"
)

// errWouldBlock is peek's answer for a socket with nothing to read.
var errWouldBlock = syscall.EAGAIN

// sock does what a Client does with a connection's socket beyond net.Conn: a
// look at what waits on it (peek), and a request written with its answer
// awaited in one step (sendThenRead). It is set up once per connection,
// one function value for both, so that neither allocates.
//
// Its fields are named apart from conn's, which embeds it: conn's out
// and werr are the held request and the write's error as exchange reports
// it; sock's pending and writeErr are what its callback has still to write
// and the errno it met.
type sock struct {
	raw     syscall.RawConn // nil: not a socket (a test's pipe): taken to be quiet, and written as any net.Conn
	onFd    func(fd uintptr) bool
	peeked  bool // onFd peeks, else it transfers
	peekBuf [16]byte
	n       int   // bytes the callback peeked, or read into in
	err     error // the callback's peek or read errno

	pending  []byte // what is still to be written
	in       []byte // where the answer goes; n bytes of it read
	owed     owing  // whether the answer read so far must go on
	writeErr error  // the write's errno
}

func (s *sock) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	s.raw = raw
	s.onFd = s.call
}

// call is RawConn's callback for peek and for sendThenRead.
func (s *sock) call(fd uintptr) bool {
	if !s.peeked {
		return s.transfer(fd)
	}
	// The socket is non-blocking, as Go makes every one: EAGAIN when
	// nothing has come.
	var e syscall.Errno
	if s.n, e = sysPeek(int(fd), s.peekBuf[:]); e != 0 {
		s.n, s.err = 0, e
	}
	return true // never wait: the answer is now
}

// peek returns the start of what is waiting: nothing and no error when the
// other side has closed the connection, errWouldBlock when nothing has
// come.
func (s *sock) peek() ([]byte, error) {
	if s.raw == nil {
		return nil, errWouldBlock
	}
	s.peeked = true
	err := s.raw.Read(s.onFd)
	s.peeked = false
	if err != nil {
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.peekBuf[:s.n], nil
}

// canSend reports whether sendThenRead works on this connection.
func (s *sock) canSend() bool { return s.raw != nil }

// sendThenRead writes out and reads the start of its answer into p,
// reading on while owed, when not nil, says that the bytes read so far of
// the answer must be followed by more (a head not ended, or the body of a
// head that came alone: see conn.owedAnswer). owed is given them with
// the room of p as their capacity.
//
// Why: net.Conn's Read tries the socket before it waits, and right after a
// request the answer is never there yet: one system call per request that
// finds nothing (EAGAIN). And so again for each piece of a head that comes
// in pieces (tinyproxy writes each header line). Here the write happens
// inside the read's own callback, after the poller has forgotten what it
// saw of the socket (RawConn.Read resets it before the first call), so
// that any byte of the answer arrives after that reset and wakes the wait:
// the first read happens once something has come. A read that does not
// fill p is followed by one more while more is owed (it may find the
// peer's close, which came with the bytes: see transfer); one that finds
// nothing has emptied the socket, so that what comes after it wakes the
// next wait, in the same call.
//
// When the socket takes only part of out (its send buffer is full), the
// rest is left in rest and nothing is read: the caller writes the rest and
// reads as usual. The write's error comes back as werr, as net.Conn's
// Write words it; a read's as net.Conn's Read words it, after the n bytes
// read before it.
func (s *sock) sendThenRead(c net.Conn, out, p []byte, owed owing) (n int, rest []byte, werr, err error) {
	s.pending, s.in, s.owed, s.n, s.err, s.writeErr = out, p, owed, 0, nil, nil
	perr := s.raw.Read(s.onFd)
	n, rest, werr, rerr := s.n, s.pending, s.writeErr, s.err
	s.pending, s.in, s.owed, s.err, s.writeErr = nil, nil, nil, nil, nil
	switch {
	case werr != nil:
		return 0, rest, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", werr)}, nil
	case perr != nil:
		// The poller's own: a deadline, a closed connection. RawConn names
		// its operation "raw-read"; net.Conn's Read would say "read".
		if oe, ok := perr.(*net.OpError); ok {
			oe.Op = "read"
		}
		return n, rest, nil, perr
	case len(rest) > 0:
		return 0, rest, nil, nil
	case rerr != nil:
		return n, nil, nil, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0 && len(p) > 0: // nothing read and no error: the other side closed it
		return 0, nil, nil, io.EOF
	}
	return n, nil, nil, nil
}

// read reads into p as net.Conn's Read does, with the same wait on the
// poller, deadlines and errors, but with the read(2) of sysRead.
//
// Why: net.Conn's Read makes its read(2) through syscall.Syscall, which
// tells the runtime's monitor thread (sysmon) of it, and a monitor that
// keeps finding threads in system calls keeps waking every 20 µs: through
// squid, where a body's bytes come in a read of their own, the monitor's
// wakes were 10% of fetch's CPU.
func (s *sock) read(c net.Conn, p []byte) (int, error) {
	n, _, _, err := s.sendThenRead(c, nil, p, nil)
	return n, err
}

// transfer is sendThenRead's callback: it returns false to wait until the
// socket is readable, true when done.
func (s *sock) transfer(fd uintptr) bool {
	if len(s.pending) > 0 {
		for {
			n, e := sysWrite(int(fd), s.pending)
			if e == syscall.EINTR {
				continue
			}
			if e == syscall.EAGAIN {
				return true // the socket's buffer is full: the caller writes the rest
			}
			if e != 0 {
				s.writeErr = e
				return true
			}
			s.pending = s.pending[n:]
			if len(s.pending) > 0 {
				return true
			}
			return false // sent: wait for the answer
		}
	}
	for {
		n, e := sysRead(int(fd), s.in[s.n:])
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN: // woken by bytes already read: wait again
			return false
		case e != 0:
			s.err = e
			return true
		case n == 0: // the other side closed it
			return true
		}
		s.n += n
		if s.n == len(s.in) || s.owed == nil || !s.owed.owedAnswer(s.in[:s.n:len(s.in)]) {
			return true
		}
		// More is owed: read again before waiting. The poller's event that
		// woke this read may have carried the peer's close with the bytes
		// (EPOLLIN and EPOLLRDHUP in one edge): no event would come for it
		// again, and a wait would last until a timeout. The read finds the
		// close (0), more bytes, or EAGAIN: then nothing is left unseen
		// and the wait is woken by what comes next.
	}
}
