package fetch

import (
	"context"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
)

// engineClock is Config.Clock, which may be nil, standing for the real
// one (time.Now and time.AfterFunc). The engine and its scheduler take
// their time from it: the time of day for elapsed times and phases, and
// timers for the per-phase timeouts, the back-off sleeps, the grace period
// and the scheduler's wake-ups. Tests set a fake clock (clocktest) to run
// timeouts without sleeping.
//
// The total deadline (-t) is a context deadline and network deadlines are
// set on connections: both always follow the real clock.
type engineClock struct{ c clock.Clock }

func (c engineClock) now() time.Time {
	if c.c == nil {
		return time.Now()
	}
	return c.c.Now()
}

// since is the time passed since t. On the real clock it reads only the
// monotonic clock (time.Since), which costs half of time.Now.
func (c engineClock) since(t time.Time) time.Duration {
	if c.c == nil {
		return time.Since(t)
	}
	return c.c.Now().Sub(t)
}

// afterFunc calls f in its own goroutine once d has passed, unless the
// returned timer is stopped first.
func (c engineClock) afterFunc(d time.Duration, f func()) clock.Timer {
	if c.c == nil {
		return time.AfterFunc(d, f)
	}
	return c.c.AfterFunc(d, f)
}

// after returns a channel closed once d has passed, and the timer behind
// it, to be stopped when the wait ends early.
func (c engineClock) after(d time.Duration) (<-chan struct{}, clock.Timer) {
	ch := make(chan struct{})
	return ch, c.afterFunc(d, func() { close(ch) })
}

// sleep waits d, and reports whether it did: false when ctx ended or stop
// was closed first.
func (c engineClock) sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	default:
	}
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
	case <-stop:
		return false
	}
}
