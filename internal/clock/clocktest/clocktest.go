// Package clocktest is a fake clock.Clock for tests, after x/time/rate's
// testTime.
package clocktest

import (
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
)

// Clock is a Clock for tests, after x/time/rate's testTime: its time
// moves only when the test moves it, and moving it runs the functions that
// have come due, in the order of their times, in the test's goroutine. So a
// test of waits takes no time and its steps happen in a fixed order.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// New returns a fake clock that reads start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now implements clock.Clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements clock.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{c: c, f: f}
	t.Reset(d)
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

// Advance moves the clock d forward, running each function that comes due
// on the way at its own time.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for c.fireNext(end) {
	}
	c.mu.Lock()
	c.now = end
	c.mu.Unlock()
}

// AdvanceToTimer moves the clock to the earliest pending function and runs
// it. It reports false, and leaves the clock alone, when none is pending.
func (c *Clock) AdvanceToTimer() bool {
	c.mu.Lock()
	next := c.next()
	c.mu.Unlock()
	return next != nil && c.fireNext(next.at)
}

// Next returns the time of the earliest pending function, if there is one.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.next(); t != nil {
		return t.at, true
	}
	return time.Time{}, false
}

// next is the earliest active timer, or nil. Call with c.mu held.
func (c *Clock) next() *fakeTimer {
	var first *fakeTimer
	for _, t := range c.timers {
		if t.active && (first == nil || t.at.Before(first.at)) {
			first = t
		}
	}
	return first
}

// fireNext runs the earliest function due by end, moving the clock to its
// time, and reports whether there was one.
func (c *Clock) fireNext(end time.Time) bool {
	c.mu.Lock()
	t := c.next()
	if t == nil || t.at.After(end) {
		c.mu.Unlock()
		return false
	}
	if t.at.After(c.now) {
		c.now = t.at
	}
	t.active = false
	f := t.f
	c.mu.Unlock()
	f()
	return true
}

type fakeTimer struct {
	c      *Clock
	f      func()
	at     time.Time
	active bool
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.at, t.active = t.c.now.Add(d), true
	return was
}
