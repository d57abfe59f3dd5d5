package limits

import "github.com/fetch-dev/fetch/internal/clock"

// Clock is the scheduler's source of time: the current time, and functions
// run later (to wake waiting attempts when a rate token, a cooldown or a
// pushback's spacing comes due). Config.Clock nil means the real clock;
// tests pass a fake one that they move by hand, so that they never sleep.
type Clock = clock.Clock

// Timer is a pending call from Clock.AfterFunc.
type Timer = clock.Timer

// realClock is the Clock of package time.
type realClock = clock.Real
