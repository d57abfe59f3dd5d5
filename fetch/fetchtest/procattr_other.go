//go:build !linux

package fetchtest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
