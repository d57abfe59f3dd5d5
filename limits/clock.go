package limits

import "time"

// Clock is the scheduler's source of time: the current time, and functions
// run later (to wake waiting attempts when a rate token, a cooldown or a
// pushback's spacing comes due). Config.Clock nil means the real clock;
// tests pass a fake one that they move by hand, so that they never sleep.
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

// realClock is the Clock of package time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
