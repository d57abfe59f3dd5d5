//go:build linux

package fetch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// dialSocket dials the TCP address ap (an IP and a port) with the socket's
// own system calls, made as the runtime makes its short ones
// (syscall.RawSyscall), and hands the socket to Go's poller as an os.File:
// socket, TCP_NODELAY, connect, and when the connect is still going on, a
// wait for it and a look at how it ended (SO_ERROR, then getpeername, as
// net does: the poller may wake a wait early). It returns ok false, and
// dials nothing, for an address it does not take (one with a zone): the
// caller dials it with net.Dialer.
//
// Why: where a proxy closes every connection after its answer (tinyproxy
// does), or a crawl meets a new host at every URL, a dial is made for
// every request, and net's dial is the heaviest part of fetch's own work
// there: 38% of its CPU through tinyproxy. net's dial asks the socket for
// its two addresses (getsockname, getpeername) at every connect, sets TCP
// keep-alive (two more calls), and makes each call through
// syscall.Syscall, which tells the runtime's monitor thread (sysmon) of
// it: a connect that takes the kernel 15 µs is often seen in progress,
// and the monitor, which then hands the P to another thread and keeps
// waking every 20 µs, took 6% of fetch's CPU. Here the addresses are
// looked up when an error message needs them, keep-alive is set when the
// connection is first kept for another request (see keepAliveSock), and
// only the poller's own calls and close remain known to the monitor.
//
// Errors are net's: a *net.OpError "dial" with the connect's errno as
// os.SyscallError, or ctx's error when ctx ends first (the wait is cut as
// an exchange's is, see watchConn).
func dialSocket(ctx context.Context, network string, ap netip.AddrPort) (c net.Conn, ok bool, err error) {
	addr := ap.Addr()
	if addr.Zone() != "" || (network != "tcp" && network != "tcp4" && network != "tcp6") {
		return nil, false, nil
	}
	var (
		sa4    syscall.RawSockaddrInet4
		sa6    syscall.RawSockaddrInet6
		family uintptr
		sa     unsafe.Pointer
		salen  uintptr
	)
	port := ap.Port()
	if addr.Is4() || addr.Is4In6() {
		if network == "tcp6" {
			return nil, false, nil
		}
		family, sa, salen = syscall.AF_INET, unsafe.Pointer(&sa4), syscall.SizeofSockaddrInet4
		sa4.Family = syscall.AF_INET
		sa4.Addr = addr.Unmap().As4()
		sa4.Port = port>>8 | port<<8 // network byte order
	} else {
		if network == "tcp4" {
			return nil, false, nil
		}
		family, sa, salen = syscall.AF_INET6, unsafe.Pointer(&sa6), syscall.SizeofSockaddrInet6
		sa6.Family = syscall.AF_INET6
		sa6.Addr = addr.As16()
		sa6.Port = port>>8 | port<<8
	}
	raddr := net.TCPAddrFromAddrPort(ap)
	fail := func(call string, e error) (net.Conn, bool, error) {
		if errno, isErrno := e.(syscall.Errno); isErrno {
			e = os.NewSyscallError(call, errno)
		}
		return nil, true, &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: e}
	}
	if err := ctx.Err(); err != nil {
		return fail("", err)
	}
	fd, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if e != 0 {
		return fail("socket", e)
	}
	if fd <= 2 {
		// Standard output or error was closed: an os.File on 1 or 2 raises
		// SIGPIPE for a write that meets a closed connection. net's
		// connections do not; net dials this one.
		rawClose(fd)
		return nil, false, nil
	}
	// Requests are written whole, and a body after its head: without
	// Nagle's delay, as net and curl set every connection.
	if e := setsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); e != 0 {
		rawClose(fd)
		return fail("setsockopt", e)
	}
	for {
		_, _, e = syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), salen)
		if e != syscall.EINTR {
			break
		}
	}
	switch e {
	case 0, syscall.EISCONN, syscall.EINPROGRESS, syscall.EALREADY:
	default:
		rawClose(fd)
		return fail("connect", e)
	}
	s := &tcpSock{f: os.NewFile(fd, "tcp"), raddr: raddr, network: network}
	if e != 0 && e != syscall.EISCONN {
		if err := s.awaitConnect(ctx); err != nil {
			s.f.Close()
			return fail("connect", err)
		}
	}
	return s, true, nil
}

// awaitConnect waits until the socket's connect has ended and returns how
// it ended: nil, the connect's errno, or ctx's error. Each look asks first
// whether the socket has a peer (getpeername): on loopback the handshake
// is most often over by the time connect returns, and one call says so.
// Otherwise the connect's outcome (SO_ERROR) says whether it failed or
// goes on, and a connect that goes on is waited for (the socket becomes
// writable). Both are asked at every look, the first too: RawConn.Write
// forgets what the poller saw before it (a refusal that came at once)
// and then looks before it waits.
func (s *tcpSock) awaitConnect(ctx context.Context) error {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	look := func(fd uintptr) bool {
		if connected(fd) {
			return true
		}
		v, e := getsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
		switch {
		case e != 0:
			cerr = e
			return true
		case v == 0: // not connected, and no error: going on
			return false
		}
		switch errno := syscall.Errno(v); errno {
		case syscall.EINPROGRESS, syscall.EALREADY, syscall.EINTR:
			return false
		case syscall.EISCONN:
			return true
		default:
			cerr = errno
			return true
		}
	}
	if ctx.Done() == nil {
		err = rc.Write(look)
	} else {
		w := watchConn(ctx, s)
		err = rc.Write(look)
		if !w.unwatch(s) && ctx.Err() != nil {
			// Cut by the end of ctx: its deadline is on the socket,
			// which is closed.
			return ctx.Err()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return cerr
}

// connected reports whether the socket fd has a peer (getpeername).
func connected(fd uintptr) bool {
	var rsa syscall.RawSockaddrAny
	n := uint32(syscall.SizeofSockaddrAny)
	_, _, e := syscall.RawSyscall(syscall.SYS_GETPEERNAME, fd, uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
	return e == 0
}

// tcpSock is a TCP connection dialled by dialSocket: an os.File, which
// waits on Go's poller as net's connections do, with net.Conn's methods
// and net's errors, so that what a record says of a failure does not
// depend on which dialer made the connection.
type tcpSock struct {
	f         *os.File
	raddr     *net.TCPAddr
	network   string
	keptAlive bool // keepAliveSock has set TCP keep-alive

	laddrOnce sync.Once
	laddr     net.Addr // looked up when first asked for: an error's message
}

func (s *tcpSock) Read(p []byte) (int, error) {
	n, err := s.f.Read(p)
	if err != nil && err != io.EOF {
		err = s.opError("read", err)
	}
	return n, err
}

func (s *tcpSock) Write(p []byte) (int, error) {
	n, err := s.f.Write(p)
	if err != nil {
		err = s.opError("write", err)
	}
	return n, err
}

func (s *tcpSock) Close() error {
	if err := s.f.Close(); err != nil {
		return s.opError("close", err)
	}
	return nil
}

func (s *tcpSock) SetDeadline(t time.Time) error { return s.deadline("set", s.f.SetDeadline(t)) }
func (s *tcpSock) SetReadDeadline(t time.Time) error {
	return s.deadline("set", s.f.SetReadDeadline(t))
}
func (s *tcpSock) SetWriteDeadline(t time.Time) error {
	return s.deadline("set", s.f.SetWriteDeadline(t))
}

func (s *tcpSock) deadline(op string, err error) error {
	if err != nil {
		return s.opError(op, err)
	}
	return nil
}

// SyscallConn is the os.File's: sock uses it as it uses net's.
func (s *tcpSock) SyscallConn() (syscall.RawConn, error) { return s.f.SyscallConn() }

func (s *tcpSock) RemoteAddr() net.Addr { return s.raddr }

func (s *tcpSock) LocalAddr() net.Addr {
	s.laddrOnce.Do(func() {
		s.laddr = &net.TCPAddr{}
		rc, err := s.f.SyscallConn()
		if err != nil {
			return
		}
		rc.Control(func(fd uintptr) {
			if sa, err := syscall.Getsockname(int(fd)); err == nil {
				switch sa := sa.(type) {
				case *syscall.SockaddrInet4:
					s.laddr = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
				case *syscall.SockaddrInet6:
					s.laddr = &net.TCPAddr{IP: sa.Addr[:], Port: sa.Port}
				}
			}
		})
	})
	return s.laddr
}

// opError words err, an os.File's, as net's connections word theirs:
// "read tcp 127.0.0.1:40000->127.0.0.1:8080: read: connection reset by
// peer", a deadline as os.ErrDeadlineExceeded, a closed connection as
// net.ErrClosed.
func (s *tcpSock) opError(op string, err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	switch {
	case errors.Is(err, os.ErrClosed):
		err = net.ErrClosed
	default:
		if errno, ok := err.(syscall.Errno); ok {
			err = os.NewSyscallError(op, errno)
		}
	}
	return &net.OpError{Op: op, Net: s.network, Source: s.LocalAddr(), Addr: s.raddr, Err: err}
}

// keepAliveSock sets TCP keep-alive (see keepAlive) on c, once, when c is
// one of dialSocket's: it is set when a connection is first kept for
// another request, not at its dial, so that a connection used once (a
// proxy that closes each after its answer) costs two system calls less.
// net's connections have it from their dialer.
func keepAliveSock(c net.Conn) {
	s, ok := c.(*tcpSock)
	if !ok || s.keptAlive {
		return
	}
	s.keptAlive = true
	rc, err := s.f.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if setsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1) == 0 {
			setsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int32(keepAlive.Idle/time.Second))
		}
	})
}

func setsockoptInt(fd, level, opt uintptr, v int32) syscall.Errno {
	_, _, e := syscall.RawSyscall6(syscall.SYS_SETSOCKOPT, fd, level, opt, uintptr(unsafe.Pointer(&v)), 4, 0)
	return e
}

func getsockoptInt(fd, level, opt uintptr) (int32, syscall.Errno) {
	var v int32
	n := uint32(4)
	_, _, e := syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, fd, level, opt, uintptr(unsafe.Pointer(&v)), uintptr(unsafe.Pointer(&n)), 0)
	return v, e
}

// rawClose closes a socket that never reached the poller.
func rawClose(fd uintptr) { syscall.RawSyscall(syscall.SYS_CLOSE, fd, 0, 0) }
