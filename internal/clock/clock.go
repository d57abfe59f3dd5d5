// Package clock is the source of time that fetch's engine and scheduler
// take from their configuration instead of calling package time, so that
// tests can run waits and timeouts on a fake clock (package clocktest).
package clock

import "time"

// Clock tells the time and calls functions later. A nil Clock stands for
// Real in the configurations that take one.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a fake clock,
	// whenever the clock is moved past d) once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call from Clock.AfterFunc. Its methods mean what they
// mean on a *time.Timer made by time.AfterFunc.
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the Clock of package time.
type Real struct{}

// Now is time.Now.
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
