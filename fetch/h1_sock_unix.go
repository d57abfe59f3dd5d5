//go:build unix

package fetch

import (
	"io"
	"net"
	"os"
	"syscall"
)

// errWouldBlock is peek's answer for a socket with nothing to read.
var errWouldBlock = syscall.EAGAIN

// sock does what h1 does with a connection's socket beyond net.Conn: a
// look at what waits on it (peek), and a request written with its answer
// awaited in one step (sendThenRead). It is set up once per connection, so
// that neither allocates.
type sock struct {
	raw  syscall.RawConn // nil: not a socket (a test's pipe): taken to be quiet, and written as any net.Conn
	look func(fd uintptr) bool
	buf  [16]byte
	n    int
	err  error

	xfer func(fd uintptr) bool
	out  []byte // what is still to be written
	in   []byte // where the answer goes
	werr error  // the write's error
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
	s.look = func(fd uintptr) bool {
		// The socket is non-blocking, as Go makes every one: EAGAIN when
		// nothing has come.
		s.n, _, s.err = syscall.Recvfrom(int(fd), s.buf[:], syscall.MSG_PEEK)
		return true // never wait: the answer is now
	}
	s.xfer = s.transfer
}

// peek returns the start of what is waiting: nothing and no error when the
// other side has closed the connection, errWouldBlock when nothing has
// come.
func (s *sock) peek() ([]byte, error) {
	if s.raw == nil {
		return nil, errWouldBlock
	}
	if err := s.raw.Read(s.look); err != nil {
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.buf[:s.n], nil
}

// canSend reports whether sendThenRead works on this connection.
func (s *sock) canSend() bool { return s.raw != nil }

// sendThenRead writes out and reads the first bytes of the answer into p.
//
// Why: net.Conn's Read tries the socket before it waits, and right after a
// request the answer is never there yet: one system call per request that
// finds nothing (EAGAIN). Here the write happens inside the read's own
// callback, after the poller has forgotten what it saw of the socket
// (RawConn.Read resets it before the first call), so that any byte of the
// answer arrives after that reset and wakes the wait: the first read
// happens once something has come.
//
// When the socket takes only part of out (its send buffer is full), the
// rest is left in out and sendThenRead returns with nothing read: the
// caller writes the rest and reads as usual. The write's error comes back
// as werr, as net.Conn's Write words it; a read's as net.Conn's Read words
// it.
func (s *sock) sendThenRead(c net.Conn, out, p []byte) (n int, rest []byte, werr, rerr error) {
	s.out, s.in, s.n, s.err, s.werr = out, p, 0, nil, nil
	err := s.raw.Read(s.xfer)
	n, rest, werr, rerr = s.n, s.out, s.werr, s.err
	s.out, s.in, s.err, s.werr = nil, nil, nil, nil
	switch {
	case werr != nil:
		return 0, rest, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("write", werr)}, nil
	case err != nil:
		// The poller's own: a deadline, a closed connection. RawConn names
		// its operation "raw-read"; net.Conn's Read would say "read".
		if oe, ok := err.(*net.OpError); ok {
			oe.Op = "read"
		}
		return 0, rest, nil, err
	case len(rest) > 0:
		return 0, rest, nil, nil
	case rerr != nil:
		return 0, nil, nil, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0 && len(p) > 0:
		return 0, nil, nil, io.EOF
	}
	return n, nil, nil, nil
}

// transfer is sendThenRead's callback: it returns false to wait until the
// socket is readable, true when done.
func (s *sock) transfer(fd uintptr) bool {
	if len(s.out) > 0 {
		for {
			n, err := syscall.Write(int(fd), s.out)
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.EAGAIN {
				return true // the socket's buffer is full: the caller writes the rest
			}
			if err != nil {
				s.werr = err
				return true
			}
			s.out = s.out[n:]
			if len(s.out) > 0 {
				return true
			}
			return false // sent: wait for the answer
		}
	}
	for {
		n, err := syscall.Read(int(fd), s.in)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN: // woken by what was there before: wait again
			return false
		case nil:
			s.n = n
		default:
			s.err = err
		}
		return true
	}
}
