package fetch

import (
	"context"

	"github.com/fetch-dev/fetch/fetch/input"
)

// jobQueue carries jobs from the reader to the workers. It holds a few
// jobs read ahead, so that a worker that comes free finds one waiting, and
// it wakes the reader once for every half of its capacity taken, not once
// for every job: a reader that finds the queue full sleeps until the
// workers have brought it down to half. (A channel alone wakes a blocked
// sender on every receive, which costs a goroutine switch per URL.)
//
// A job is taken when a worker receives it. Jobs still queued when
// admitting stops are not taken: they get no record, and a resumed run
// takes their lines again.
type jobQueue struct {
	jobs chan *input.Line
	low  int           // the reader is woken when at most this many are queued
	room chan struct{} // a token: the queue fell to low (or below) since the reader last looked
}

// newJobQueue returns a queue that holds up to n jobs (at least 1).
func newJobQueue(n int) *jobQueue {
	n = max(n, 1)
	return &jobQueue{jobs: make(chan *input.Line, n), low: n / 2, room: make(chan struct{}, 1)}
}

// put queues j, waiting while the queue is full. It returns ctx.Err()
// once ctx is done, without queueing j.
func (q *jobQueue) put(ctx context.Context, j *input.Line) error {
	for {
		if err := ctx.Err(); err != nil {
			return err // select below would pick at random when there is room
		}
		select {
		case q.jobs <- j:
			return nil
		default:
		}
		select { // full: sleep until the workers have taken half
		case <-q.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drained waits until every job queued has been taken, or ctx is done.
func (q *jobQueue) drained(ctx context.Context) error {
	for len(q.jobs) > 0 {
		select {
		case <-q.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// close tells the workers that no job will come; call it once, from the
// reader, when it is done putting.
func (q *jobQueue) close() { close(q.jobs) }

// take returns the next job, or false once admit has ended or the queue is
// closed and empty.
func (q *jobQueue) take(admit context.Context) (*input.Line, bool) {
	if admit.Err() != nil {
		return nil, false // select below would pick at random when a job is also ready
	}
	select {
	case j, ok := <-q.jobs:
		if ok && len(q.jobs) <= q.low {
			select {
			case q.room <- struct{}{}:
			default: // a token is already there
			}
		}
		return j, ok
	case <-admit.Done():
		return nil, false
	}
}
