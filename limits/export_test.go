package limits

import (
	"time"

	"github.com/fetch-dev/fetch/internal/clock/clocktest"
)

// FakeClock is the fake clock of the scheduler's tests.
type FakeClock = clocktest.Clock

// NewFakeClock returns a fake clock that reads start.
func NewFakeClock(start time.Time) *FakeClock { return clocktest.New(start) }

// Waiting reports how many Acquire calls wait in s's list.
func Waiting(s *Local) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for w := s.waiters.head; w != nil; w = w.next {
		n++
	}
	return n
}
