//go:build unix && !linux

package h1

import (
	"errors"
	"syscall"
)

// sysRead, sysWrite and sysPeek are read(2), write(2) and recv(2) with
// MSG_PEEK on one of a Client's sockets, through the syscall package (see the
// Linux version for why it makes them raw there).
func sysRead(fd int, p []byte) (int, syscall.Errno) { return errno(syscall.Read(fd, p)) }

func sysWrite(fd int, p []byte) (int, syscall.Errno) { return errno(syscall.Write(fd, p)) }

func sysPeek(fd int, p []byte) (int, syscall.Errno) {
	n, _, err := syscall.Recvfrom(fd, p, syscall.MSG_PEEK)
	return errno(n, err)
}

func errno(n int, err error) (int, syscall.Errno) {
	var e syscall.Errno
	if err != nil && !errors.As(err, &e) {
		e = syscall.EIO
	}
	return n, e
}
