//go:build linux

package h1

import (
	"syscall"
	"unsafe"
)

// sysRead, sysWrite and sysPeek are read(2), write(2) and recv(2) with
// MSG_PEEK on one of a Client's sockets, which are non-blocking (Go makes every
// one so): none of them waits. They are made as the runtime makes its own
// short calls, without telling the scheduler (syscall.RawSyscall).
//
// Why: a call through syscall.Syscall that finds the runtime's monitor
// thread (sysmon) asleep, as it is whenever every P is idle waiting for
// the network, wakes it (a futex call), and the monitor then wakes every
// 20 µs for a millisecond and more. A run waiting on a slow proxy goes
// idle and back many times a second: through tinyproxy, 1.3 of those
// wakes (a nanosleep each) and 0.4 futex calls a URL, each a thread
// switch on the cores the proxy needs.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}

func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	return int(n), e
}

func sysPeek(fd int, p []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(n), e
}
