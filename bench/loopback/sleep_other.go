//go:build !linux

package main

import "time"

// sleepStep sleeps d; where there is no nanosleep in package syscall, with
// the runtime's timers, which may wake later.
func sleepStep(d time.Duration) { time.Sleep(d) }
