package limits

import (
	"sync"
	"sync/atomic"
)

// Events holds the changes of proxy state a scheduler has to report until
// its caller takes them (see Scheduler.Events). The zero value is empty and
// ready; it is safe for concurrent use, and Take is cheap while it is
// empty. It keeps at most maxEvents: a caller that never takes them loses
// the oldest, not memory.
type Events struct {
	mu      sync.Mutex
	events  []HealthEvent
	pending atomic.Int32 // len(events), read without the lock
}

// maxEvents bounds the events an Events keeps.
const maxEvents = 1 << 16

// Add queues ev.
func (q *Events) Add(ev HealthEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.events) >= maxEvents {
		q.events = append(q.events[:0], q.events[len(q.events)/2:]...)
	}
	q.events = append(q.events, ev)
	q.pending.Store(int32(len(q.events)))
}

// Take appends the queued events to dst, oldest first, and empties the
// queue.
func (q *Events) Take(dst []HealthEvent) []HealthEvent {
	if q.pending.Load() == 0 {
		return dst
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	dst = append(dst, q.events...)
	q.events = q.events[:0]
	q.pending.Store(0)
	return dst
}
