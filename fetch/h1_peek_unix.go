//go:build unix

package fetch

import (
	"net"
	"syscall"
)

// errWouldBlock is peek's answer for a socket with nothing to read.
var errWouldBlock = syscall.EAGAIN

// peeker looks at what is waiting on a connection's socket without
// taking it and without waiting. It is set up once per connection, so
// that a look allocates nothing.
type peeker struct {
	raw  syscall.RawConn // nil: not a socket (a test's pipe): taken to be quiet
	look func(fd uintptr) bool
	buf  [16]byte
	n    int
	err  error
}

func (p *peeker) init(c net.Conn) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return
	}
	p.raw = raw
	p.look = func(fd uintptr) bool {
		// The socket is non-blocking, as Go makes every one: EAGAIN when
		// nothing has come.
		p.n, _, p.err = syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK)
		return true // never wait: the answer is now
	}
}

// peek returns the start of what is waiting: nothing and no error when the
// other side has closed the connection, errWouldBlock when nothing has
// come.
func (p *peeker) peek() ([]byte, error) {
	if p.raw == nil {
		return nil, errWouldBlock
	}
	if err := p.raw.Read(p.look); err != nil {
		return nil, err
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.buf[:p.n], nil
}
