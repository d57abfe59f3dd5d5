package fetch

import (
	"context"
	"time"
)

// Clock is where the engine takes its time from: the time of day for
// elapsed times and phases, and timers for the per-phase timeouts, the
// back-off sleeps and the grace period. The zero value is the real clock
// (time.Now and time.AfterFunc); either field left nil falls back to it.
// Tests set both to a fake clock to run timeouts without sleeping.
//
// The total deadline (-t) is a context deadline and network deadlines are
// set on connections: both always follow the real clock.
type Clock struct {
	Now       func() time.Time
	AfterFunc func(d time.Duration, f func()) Timer
}

// Timer is a timer made by Clock.AfterFunc; *time.Timer is one. Reset and
// Stop behave as time.Timer's.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

func (c Clock) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

func (c Clock) since(t time.Time) time.Duration { return c.now().Sub(t) }

// afterFunc calls f in its own goroutine once d has passed, unless the
// returned timer is stopped first.
func (c Clock) afterFunc(d time.Duration, f func()) Timer {
	if c.AfterFunc == nil {
		return time.AfterFunc(d, f)
	}
	return c.AfterFunc(d, f)
}

// after returns a channel closed once d has passed, and the timer behind
// it, to be stopped when the wait ends early.
func (c Clock) after(d time.Duration) (<-chan struct{}, Timer) {
	ch := make(chan struct{})
	return ch, c.afterFunc(d, func() { close(ch) })
}

// sleep waits d, and reports whether it did: false when ctx ended first.
func (c Clock) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	done, t := c.after(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
