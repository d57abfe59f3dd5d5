package redis

import "sync"

// groupCommit sends a process's items of one kind (releases, or acquires
// that find none of the process waiting) to Redis by group commit: a call
// carries every item that came while the call before it was on its way,
// up to max. Each item's send returns once its own call has returned, and
// one alone is sent at once; but under load a call carries several, and
// Redis runs a script's preamble (the header, the epoch, the state read
// and written back), its command and its network round once for them,
// which were about half of what an attempt cost it.
type groupCommit[T any] struct {
	max   int
	mu    sync.Mutex
	busy  bool              // a call is on its way
	queue []*commitBatch[T] // the calls that wait for it, in order
}

// commitBatch is the items of one call.
type commitBatch[T any] struct {
	items []T
	done  chan struct{} // closed once the call has returned, or was skipped
	turn  chan struct{} // closed when the call before has returned: the batch's first item sends it
	// skipped (set before done and turn are closed): the call before
	// failed, so this one was not made.
	skipped bool
}

// send adds it to the next call and returns once that call has returned.
// call makes one call for a batch's items and returns its error. When a
// call fails, Redis is failing: the batches waiting behind it are not
// sent one after another, each waiting out its own timeout, but handed to
// skip with that error at once.
func (g *groupCommit[T]) send(it T, call func([]T) error, skip func([]T, error)) {
	g.mu.Lock()
	if n := len(g.queue); n > 0 && len(g.queue[n-1].items) < g.max {
		b := g.queue[n-1] // not yet sent: ride along
		b.items = append(b.items, it)
		g.mu.Unlock()
		<-b.done
		return
	}
	b := &commitBatch[T]{items: []T{it}, done: make(chan struct{})}
	if g.busy {
		b.turn = make(chan struct{})
		g.queue = append(g.queue, b)
		g.mu.Unlock()
		<-b.turn // taken off the queue: nothing rides along any more
		if b.skipped {
			return
		}
	} else {
		g.busy = true
		g.mu.Unlock()
	}
	err := call(b.items)
	close(b.done)
	g.mu.Lock()
	if err != nil {
		failed := g.queue
		g.queue, g.busy = nil, false
		g.mu.Unlock()
		for _, q := range failed {
			skip(q.items, err)
			q.skipped = true
			close(q.done)
			close(q.turn)
		}
		return
	}
	if len(g.queue) == 0 {
		g.busy = false
		g.mu.Unlock()
		return
	}
	next := g.queue[0]
	g.queue = append(g.queue[:0], g.queue[1:]...)
	g.mu.Unlock()
	close(next.turn)
}
