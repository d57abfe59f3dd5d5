package main

import (
	"syscall"
	"time"
)

// sleepStep sleeps d in the calling thread, without the runtime's timers:
// nanosleep wakes within tens of microseconds where a Go timer may be late
// by a millisecond.
func sleepStep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Nanosleep(&ts, nil) //nolint:errcheck // woken early: the caller looks at the clock again
}
