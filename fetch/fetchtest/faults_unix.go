//go:build unix

package fetchtest

import (
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
)

// setBacklog listens again on ln's socket with backlog n: Linux and the
// BSDs take a second listen as a change of backlog.
func setBacklog(ln *net.TCPListener, n int) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) { lerr = syscall.Listen(int(fd), n) }); err != nil {
		return err
	}
	return lerr
}

// reservePort binds a TCP socket to 127.0.0.1 and a free port without
// listening on it: connects there are refused, and the port stays taken
// until the returned Closer is closed.
func reservePort() (string, io.Closer, error) {
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return "", nil, err
	}
	f := os.NewFile(uintptr(fd), "reserved-port")
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		f.Close()
		return "", nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		f.Close()
		return "", nil, err
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), f, nil
}
