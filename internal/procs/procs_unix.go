//go:build unix

package procs

import (
	"syscall"
	"time"
)

// canReadCPU: the process's CPU time is read here.
const canReadCPU = true

// processCPU returns the CPU time of the process so far, user and system,
// all its threads; 0 when it cannot be read.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
