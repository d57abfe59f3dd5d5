package fetch

import (
	"context"
	"sync/atomic"

	"github.com/fetch-dev/fetch/fetch/input"
)

// jobQueue carries jobs from the reader to the workers. It holds a few
// jobs read ahead, so that a worker that comes free finds one waiting, and
// it wakes the reader once for every half of its capacity taken, not once
// for every job: a reader that finds the queue full sleeps until the
// workers have brought it down to half. (A channel alone wakes a blocked
// sender on every receive, which costs a goroutine switch per URL.)
//
// The queue is bounded in bytes too: the requests of JSON lines (their
// bodies, up to --max-request-body each) queued hold at most maxBytes, but
// for one job alone, whatever its size, so that a list of 1 MiB bodies
// holds a few read ahead, not 64 MiB.
//
// A job is taken when a worker receives it. Jobs still queued when
// admitting stops are not taken: they get no record, and a resumed run
// takes their lines again.
type jobQueue struct {
	jobs     chan *input.Line
	low      int           // the reader is woken when at most this many are queued
	room     chan struct{} // a token: the queue fell to low (or below), or held to half of maxBytes, since the reader last looked
	held     atomic.Int64  // bytes of the requests queued
	maxBytes int64
}

// maxQueuedBytes bounds the bytes of the requests queued (see jobQueue).
const maxQueuedBytes = 8 << 20

// newJobQueue returns a queue that holds up to n jobs (at least 1), and
// jobs of at most maxBytes (see jobQueue).
func newJobQueue(n int, maxBytes int64) *jobQueue {
	n = max(n, 1)
	return &jobQueue{jobs: make(chan *input.Line, n), low: n / 2, room: make(chan struct{}, 1), maxBytes: maxBytes}
}

// put queues j, waiting while the queue is full. It returns ctx.Err()
// once ctx is done, without queueing j.
func (q *jobQueue) put(ctx context.Context, j *input.Line) error {
	size := int64(j.Request.Size()) // 0 for a plain line
	for {
		if err := ctx.Err(); err != nil {
			return err // select below would pick at random when there is room
		}
		if q.fits(size) {
			select {
			case q.jobs <- j:
				return nil
			default:
				q.held.Add(-size)
			}
		}
		select { // full: sleep until the workers have taken half
		case <-q.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fits counts size bytes queued, and reports whether they fit: a job that
// would take the queue over its bytes waits, unless the queue holds none.
// When they do not fit they are not counted.
func (q *jobQueue) fits(size int64) bool {
	if size == 0 {
		return true
	}
	if held := q.held.Add(size); held != size && held > q.maxBytes {
		q.held.Add(-size)
		return false
	}
	return true
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
		if !ok {
			return nil, false
		}
		freed := false // a request was taken, and the bytes queued are down to half
		if size := int64(j.Request.Size()); size > 0 {
			freed = q.held.Add(-size) <= q.maxBytes/2
		}
		if len(q.jobs) <= q.low || freed {
			select {
			case q.room <- struct{}{}:
			default: // a token is already there
			}
		}
		return j, true
	case <-admit.Done():
		return nil, false
	}
}
