package fetch

import (
	"context"
	"testing"

	"github.com/fetch-dev/fetch/fetch/input"
)

// TestJobQueueBytes: the requests queued hold at most the queue's bytes,
// whatever room it has for lines: with 1 MiB bodies and 4 MiB, four are
// read ahead of 64 places, and a fifth waits for a worker to take one; a
// job larger than all of them is queued alone. Plain lines count nothing.
func TestJobQueueBytes(t *testing.T) {
	ctx := context.Background()
	q := newJobQueue(64, 4*mib)
	for i := range 4 {
		if err := q.put(ctx, bodyJob(i, mib)); err != nil {
			t.Fatal(err)
		}
	}
	if q.held.Load() != 4*mib || q.fits(1) {
		t.Fatalf("%d bytes held, and one more byte fits", q.held.Load())
	}
	if err := q.put(ctx, &input.Line{Number: 100}); err != nil { // a plain line
		t.Fatal(err)
	}
	put := make(chan error, 1)
	go func() { put <- q.put(ctx, bodyJob(4, mib)) }()
	select {
	case err := <-put:
		t.Fatalf("a fifth MiB was queued beside four (%v)", err)
	default:
	}
	takeJob(t, q, 0)
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	if got := q.held.Load(); got != 4*mib {
		t.Fatalf("%d bytes held, want 4 MiB", got)
	}
	for _, n := range []int{1, 2, 3, 100, 4} {
		takeJob(t, q, n)
	}
	if q.held.Load() != 0 {
		t.Fatalf("%d bytes held by an empty queue", q.held.Load())
	}
	// Larger than the queue's bytes: alone, it goes in; nothing after it.
	if err := q.put(ctx, bodyJob(5, 5*mib)); err != nil {
		t.Fatal(err)
	}
	if q.fits(1) {
		t.Fatal("a byte fits beside a job over the queue's bytes")
	}
	takeJob(t, q, 5)
}

// TestJobQueueWakesReaderAtHalfBytes: a reader that waits for bytes is
// woken once the requests queued are down to half the queue's bytes, even
// while more lines than half its places are queued.
func TestJobQueueWakesReaderAtHalfBytes(t *testing.T) {
	ctx := context.Background()
	q := newJobQueue(8, 4*mib) // half: 4 lines, 2 MiB
	for i, size := range []int{2 * mib, mib, mib, 0, 0, 0, 0} {
		if err := q.put(ctx, bodyJob(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	takeJob(t, q, 0) // 2 MiB left, 6 lines
	if len(q.room) != 1 {
		t.Fatal("taking the bytes down to half did not wake the reader")
	}
}

const mib = 1 << 20

// bodyJob is line n with a body of size bytes (none for 0).
func bodyJob(n, size int) *input.Line {
	if size == 0 {
		return &input.Line{Number: n}
	}
	return &input.Line{Number: n, Request: &input.Request{Body: make([]byte, size)}}
}

func takeJob(t *testing.T, q *jobQueue, want int) {
	t.Helper()
	j, ok := q.take(context.Background())
	if !ok || j.Number != want {
		t.Fatalf("took %+v, %v; want line %d", j, ok, want)
	}
}
