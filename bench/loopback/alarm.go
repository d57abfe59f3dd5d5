package main

import (
	"container/heap"
	"context"
	"runtime"
	"sync"
	"time"
)

// alarm ends the target's delays on time. A Go timer wakes its goroutine 0.3
// to 0.4 ms late on the small VMs the suite runs on (a bare time.Sleep(50ms)
// takes 50.33 ms on average), so a target that slept with time.After answered
// a 50 ms URL in 50.8 ms, and every client's makespan in the latency-bound
// case carried 1.6% that was the target's. One goroutine keeps every pending
// delay in a heap by its due time, waits on a timer until the earliest is
// near, sleeps most of the rest with nanosleep in short steps and yields for
// the last 0.15 ms. A delay never ends before it is due; it ends about 0.01 ms
// after it when the machine has a core free, for a few system calls and at
// most 0.15 ms of a core per due time (one for a batch due together).
type alarm struct {
	mu    sync.Mutex
	waits waitHeap
	kick  chan struct{} // a new earliest due time; buffered 1
}

type wait struct {
	due  time.Time
	done chan struct{}
}

type waitHeap []wait

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h waitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)        { *h = append(*h, x.(wait)) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

func newAlarm() *alarm {
	return &alarm{kick: make(chan struct{}, 1)}
}

// sleep returns when d has passed since start, or with ctx's error when ctx
// ends first.
func (a *alarm) sleep(ctx context.Context, start time.Time, d time.Duration) error {
	w := wait{due: start.Add(d), done: make(chan struct{})}
	a.mu.Lock()
	heap.Push(&a.waits, w)
	first := a.waits[0].done == w.done
	a.mu.Unlock()
	if first {
		select {
		case a.kick <- struct{}{}:
		default:
		}
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err() // its entry is closed when due, with no one waiting
	}
}

// fine is how far ahead of a due time run leaves the runtime's timers. They
// wait in the network poller, whose waits are whole milliseconds rounded up,
// so a timer wakes up to 1.4 ms late on these machines; a nanosleep of its
// own, 0.1 to 0.2 ms. The last stretch to a due time is slept in steps, and
// its last spin yielding.
const (
	fine = 2 * time.Millisecond
	step = 250 * time.Microsecond
	spin = 150 * time.Microsecond
)

// run ends due delays until ctx ends.
func (a *alarm) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		a.mu.Lock()
		now := time.Now()
		for len(a.waits) > 0 && !a.waits[0].due.After(now) {
			close(heap.Pop(&a.waits).(wait).done)
		}
		var next time.Time
		if len(a.waits) > 0 {
			next = a.waits[0].due
		}
		a.mu.Unlock()
		if next.IsZero() {
			select {
			case <-a.kick:
			case <-ctx.Done():
			}
			continue
		}
		left := next.Sub(now)
		if left <= spin {
			runtime.Gosched()
			continue
		}
		if left <= fine {
			// Within reach: a step at a time, so a new earlier due time
			// waits at most a step.
			sleepStep(min(left-spin, step))
			continue
		}
		timer.Reset(left - fine)
		select {
		case <-timer.C:
		case <-a.kick:
		case <-ctx.Done():
		}
	}
}
