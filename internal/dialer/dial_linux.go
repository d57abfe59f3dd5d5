//go:build linux

package dialer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// dialSocket dials the TCP address ap (an IP and a port) with the socket's
// own system calls, made as the runtime makes its short ones
// (syscall.RawSyscall), and hands the socket to Go's poller as an os.File:
// socket, TCP_NODELAY, connect, and when the connect is still going on, a
// look at its peer (getpeername) and a wait for it (see awaitConnect). It
// returns ok false, and dials nothing, for an address it does not take
// (one with a zone, or of the other family than network names): the
// caller dials it with net.Dialer.
//
// Why: where a proxy closes every connection after its answer (tinyproxy
// does), or a crawl meets a new host at every URL, a dial is made for
// every request, and net's dial is the heaviest part of fetch's own work
// there: 38% of its CPU through tinyproxy. net's dial asks the socket for
// its two addresses (getsockname, getpeername) at every connect, sets TCP
// keep-alive (two more calls), and makes each call through
// syscall.Syscall, which tells the runtime's monitor thread (sysmon) of
// it: a connect that takes the kernel 14 µs is often seen in progress,
// and the monitor, which then hands the P to another thread and keeps
// waking every 20 µs, took 6% of fetch's CPU. Here the local address is
// looked up when an error message needs it, keep-alive is set when it can
// matter (see Dialer.KeepAlive), and only the poller's own calls and close
// remain known to the monitor.
//
// As net does, a connect is tried again, up to twice, when the kernel had
// no local port free for it (EADDRNOTAVAIL: a run that closes every
// connection leaves many in TIME_WAIT) or when the socket connected to
// itself (a destination port in the ephemeral range that nobody listens
// on, which the kernel may also pick as the local port: the only case in
// which the local address is looked up at the dial).
// TestDialSocketTriesAgain makes both cases on demand and counts the
// tries. Where net hands over a socket that met itself a third time,
// dialSocket reports the refusal such a port means (ECONNREFUSED): a
// request written to itself would come back as its own answer.
// TestDialSocketMeetsItselfThrice makes that case (the kernel picks the
// port again once it may reuse the TIME_WAIT the last try left, a second
// later).
//
// Errors are net's: a *net.OpError "dial" with the connect's errno as
// os.SyscallError, or ctx's error when ctx ends first (the wait is cut by
// connwatch, as an exchange's is).
func dialSocket(ctx context.Context, network string, ap netip.AddrPort) (c net.Conn, ok bool, err error) {
	return dialSocketTries(ctx, network, ap, nil)
}

// dialSocketTries is dialSocket calling tried, when not nil, before each
// connect: the tests count the tries with it.
func dialSocketTries(ctx context.Context, network string, ap netip.AddrPort, tried func()) (c net.Conn, ok bool, err error) {
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
		putPort(&sa4.Port, port)
	} else {
		if network == "tcp4" {
			return nil, false, nil
		}
		family, sa, salen = syscall.AF_INET6, unsafe.Pointer(&sa6), syscall.SizeofSockaddrInet6
		sa6.Family = syscall.AF_INET6
		sa6.Addr = addr.As16()
		putPort(&sa6.Port, port)
	}
	raddr := net.TCPAddrFromAddrPort(ap)
	fail := func(call string, e error) (net.Conn, bool, error) {
		if errno, isErrno := e.(syscall.Errno); isErrno {
			e = os.NewSyscallError(call, errno)
		}
		return nil, true, &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: e}
	}
	mayBeSelf := ephemeral(port)
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return fail("", err)
		}
		fd, _, e := syscall.RawSyscall(syscall.SYS_SOCKET, family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
		if e != 0 {
			return fail("socket", e)
		}
		if fd <= 2 {
			// Standard output or error was closed: an os.File on 1 or 2
			// raises SIGPIPE for a write that meets a closed connection.
			// net's connections do not; net dials this one.
			rawClose(fd)
			return nil, false, nil
		}
		// Requests are written whole, and a body after its head: without
		// Nagle's delay, as net and curl set every connection.
		if e := setsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); e != 0 {
			rawClose(fd)
			return fail("setsockopt", e)
		}
		if tried != nil {
			tried()
		}
		for {
			_, _, e = syscall.RawSyscall(syscall.SYS_CONNECT, fd, uintptr(sa), salen)
			if e != syscall.EINTR {
				break
			}
		}
		switch e {
		case 0, syscall.EISCONN, syscall.EINPROGRESS, syscall.EALREADY:
		case syscall.EADDRNOTAVAIL:
			rawClose(fd)
			if try < 2 {
				continue
			}
			return fail("connect", e)
		default:
			rawClose(fd)
			return fail("connect", e)
		}
		s, err := newTCPSock(os.NewFile(fd, "tcp"), raddr, network)
		if err != nil {
			return fail("connect", err)
		}
		if e != 0 && e != syscall.EISCONN {
			if err := s.awaitConnect(ctx); err != nil {
				s.f.Close()
				if errors.Is(err, syscall.EADDRNOTAVAIL) && try < 2 {
					continue
				}
				return fail("connect", err)
			}
		}
		if mayBeSelf && s.toItself() {
			s.f.Close()
			if try < 2 {
				continue
			}
			return fail("connect", syscall.ECONNREFUSED)
		}
		return s, true, nil
	}
}

// getPort reads a sockaddr's port field, in network byte order.
func getPort(field *uint16) int {
	b := (*[2]byte)(unsafe.Pointer(field))
	return int(b[0])<<8 | int(b[1])
}

// putPort writes port into a sockaddr's port field in network byte order,
// whatever the machine's.
func putPort(field *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(field))
	b[0], b[1] = byte(port>>8), byte(port)
}

// ephemeral reports whether port is in the range the kernel picks local
// ports from (ip_local_port_range), where a connect to a port nobody
// listens on can meet its own socket.
func ephemeral(port uint16) bool {
	lo, hi := localPortRange()
	return port >= lo && port <= hi
}

// localPortRange is the system's ip_local_port_range, read once; 1024 to
// 65535 when it cannot be read.
var localPortRange = sync.OnceValues(func() (uint16, uint16) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		var lo, hi uint16
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 0 && lo <= hi {
			return lo, hi
		}
	}
	return 1024, 65535
})

// toItself reports whether the socket's local address is its peer's: a
// connect that met its own socket.
func (s *tcpSock) toItself() bool {
	la, ok := s.LocalAddr().(*net.TCPAddr)
	return ok && la.Port == s.raddr.Port && la.IP.Equal(s.raddr.IP)
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
	rc := s.raw.rc // the poller's own errors: dialSocket words them
	var cerr error
	var err error
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
		w := watch(ctx, s)
		err = rc.Write(look)
		if !w.Unwatch(s) {
			// Cut by the end of ctx (or not told): its deadline may be
			// on the socket, which is closed, connected or not.
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return os.ErrDeadlineExceeded
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
	raw       sockRaw // f's RawConn, with net's errors
	raddr     *net.TCPAddr
	network   string
	keptAlive bool        // keepAliveSock has set TCP keep-alive
	closed    atomic.Bool // Close was called: errors say net.ErrClosed

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
	return n, s.wrap("write", err)
}

func (s *tcpSock) Close() error {
	s.closed.Store(true)
	return s.wrap("close", s.f.Close())
}

func (s *tcpSock) SetDeadline(t time.Time) error      { return s.wrap("set", s.f.SetDeadline(t)) }
func (s *tcpSock) SetReadDeadline(t time.Time) error  { return s.wrap("set", s.f.SetReadDeadline(t)) }
func (s *tcpSock) SetWriteDeadline(t time.Time) error { return s.wrap("set", s.f.SetWriteDeadline(t)) }

// wrap is err, unless nil, worded as net's (see opError).
func (s *tcpSock) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return s.opError(op, err)
}

// SyscallConn is the os.File's, its errors worded as net's RawConn words
// them: sock uses it as it uses net's.
func (s *tcpSock) SyscallConn() (syscall.RawConn, error) { return &s.raw, nil }

// sockRaw is a tcpSock's RawConn: the os.File's, whose errors are the
// poller's own ("i/o timeout", "use of closed file"), with net's words
// (*net.OpError "raw-read", "raw-write", "raw-control"; a closed
// connection as net.ErrClosed).
type sockRaw struct {
	s  *tcpSock
	rc syscall.RawConn // the os.File's
}

// newTCPSock returns f, a connected socket or one connecting, as a
// tcpSock; it closes f when it cannot.
func newTCPSock(f *os.File, raddr *net.TCPAddr, network string) (*tcpSock, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &tcpSock{f: f, raddr: raddr, network: network}
	s.raw = sockRaw{s: s, rc: rc}
	return s, nil
}

func (r *sockRaw) Control(f func(fd uintptr)) error   { return r.s.wrap("raw-control", r.rc.Control(f)) }
func (r *sockRaw) Read(f func(fd uintptr) bool) error { return r.s.wrap("raw-read", r.rc.Read(f)) }
func (r *sockRaw) Write(f func(fd uintptr) bool) error {
	return r.s.wrap("raw-write", r.rc.Write(f))
}

func (s *tcpSock) RemoteAddr() net.Addr { return s.raddr }

func (s *tcpSock) LocalAddr() net.Addr {
	s.laddrOnce.Do(func() {
		s.laddr = &net.TCPAddr{}
		s.raw.rc.Control(func(fd uintptr) {
			var rsa syscall.RawSockaddrAny
			n := uint32(syscall.SizeofSockaddrAny)
			_, _, e := syscall.RawSyscall(syscall.SYS_GETSOCKNAME, fd, uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)))
			if e != 0 {
				return
			}
			switch rsa.Addr.Family {
			case syscall.AF_INET:
				sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&rsa))
				s.laddr = &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: getPort(&sa.Port)}
			case syscall.AF_INET6:
				sa := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&rsa))
				s.laddr = &net.TCPAddr{IP: net.IP(sa.Addr[:]), Port: getPort(&sa.Port)}
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
	case errors.Is(err, os.ErrClosed), s.closed.Load() && !errors.Is(err, os.ErrDeadlineExceeded):
		// os.File's closed file, or the poller's "use of closed file"
		// for a Read or wait that Close ended.
		err = net.ErrClosed
	default:
		if errno, ok := err.(syscall.Errno); ok {
			err = os.NewSyscallError(op, errno)
		}
	}
	return &net.OpError{Op: op, Net: s.network, Source: s.LocalAddr(), Addr: s.raddr, Err: err}
}

// keepAliveSock sets TCP keep-alive on c, its first probe after ka.Idle,
// once, when c is one of dialSocket's (see Dialer.KeepAlive). net's
// connections have it from their dialer.
func keepAliveSock(c net.Conn, ka net.KeepAliveConfig) {
	s, ok := c.(*tcpSock)
	if !ok || s.keptAlive {
		return
	}
	s.keptAlive = true
	s.raw.rc.Control(func(fd uintptr) {
		if setsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1) == 0 {
			setsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, int32(ka.Idle/time.Second))
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
