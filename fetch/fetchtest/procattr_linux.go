package fetchtest

import "syscall"

// sysProcAttr kills microsocks when the process that started it dies, so a
// crashed test run leaves no proxy behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
