package fetchtest

import "sync"

// changes tells of each change of a server's counters to whoever asked
// for the next one, so that a test waits for a count to be reached
// rather than polling it. The zero value is ready; a change that nobody
// waits for costs a lock and nothing else.
type changes struct {
	mu   sync.Mutex
	next chan struct{} // closed at the next change; nil while nobody waits
}

// wait returns a channel that is closed at the next change.
func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next == nil {
		c.next = make(chan struct{})
	}
	return c.next
}

// tell closes the channel of those who wait for the next change.
func (c *changes) tell() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next != nil {
		close(c.next)
		c.next = nil
	}
}
