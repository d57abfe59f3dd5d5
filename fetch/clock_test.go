package fetch

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when advance is called. Its timers
// fire synchronously, in the order they are due, inside advance.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// clock returns the Clock to put in a Config.
func (c *fakeClock) clock() Clock { return c }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, f: f, when: c.now.Add(d), active: true}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the clock d forward, firing every timer that falls due on
// the way at the time it is due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		var next *fakeTimer
		for _, t := range c.timers {
			if t.active && !t.when.After(end) && (next == nil || t.when.Before(next.when)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.now, next.active = next.when, false
		c.mu.Unlock()
		next.f()
		c.mu.Lock()
	}
}

type fakeTimer struct {
	c      *fakeClock
	f      func()
	when   time.Time
	active bool
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.when, t.active = t.c.now.Add(d), true
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	return was
}
