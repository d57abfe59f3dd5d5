package fetch

import (
	"context"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
)

// TestJobQueueWakesReaderAtHalf: a reader that finds the queue full
// sleeps until the workers have taken it down to half, not until one place
// is free; drained waits for the last job to be taken.
func TestJobQueueWakesReaderAtHalf(t *testing.T) {
	ctx := context.Background()
	q := newJobQueue(4, maxQueuedBytes) // half: 2
	fill := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if err := q.put(ctx, &input.Line{Number: i}); err != nil {
				t.Fatal(err)
			}
		}
	}
	take := func(want int) {
		t.Helper()
		j, ok := q.take(ctx)
		if !ok || j.Number != want {
			t.Fatalf("took %+v, %v; want line %d", j, ok, want)
		}
	}
	// The wake-up, without a reader running: a token for the reader once
	// the queue is down to half, none before.
	fill(0, 4)
	take(0)
	if len(q.room) != 0 {
		t.Fatal("taking the queue down to 3 of 4 woke the reader")
	}
	take(1)
	if len(q.room) != 1 {
		t.Fatal("taking the queue down to 2 of 4 did not wake the reader")
	}
	// A reader that sleeps on a full queue goes on once woken.
	fill(4, 6) // full again: 2, 3, 4, 5
	<-q.room   // the token from before: the reader has looked since
	put := make(chan error, 1)
	go func() { put <- q.put(ctx, &input.Line{Number: 6}) }()
	stillWaiting(t, put, "put", "into a full queue")
	take(2)
	take(3)
	returns(t, put, "put", "with the queue at half")
	drained := make(chan error, 1)
	go func() { drained <- q.drained(ctx) }()
	take(4)
	take(5)
	stillWaiting(t, drained, "drained", "with a job queued")
	take(6)
	returns(t, drained, "drained", "with the queue empty")
}

// stillWaiting fails t if a call (named what) that must go on waiting
// returns on done. Tolerance: one that can return does within 100ms.
func stillWaiting(t *testing.T, done <-chan error, what, why string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) %s", what, err, why)
	case <-time.After(100 * time.Millisecond):
	}
}

// returns fails t unless a call (named what) returns nil on done within 5s.
func returns(t *testing.T, done <-chan error, what, why string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still waits %s", what, why)
	}
}

// TestJobQueueStops: once its context is done a full queue's put returns
// the context's error, drained too, and take takes no job left queued.
func TestJobQueueStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	q := newJobQueue(1, maxQueuedBytes)
	if err := q.put(ctx, &input.Line{}); err != nil {
		t.Fatal(err)
	}
	put := make(chan error, 1)
	go func() { put <- q.put(ctx, &input.Line{}) }()
	cancel()
	if err := <-put; err != context.Canceled {
		t.Errorf("put: %v, want context.Canceled", err)
	}
	if err := q.drained(ctx); err != context.Canceled {
		t.Errorf("drained: %v, want context.Canceled", err)
	}
	if j, ok := q.take(ctx); ok {
		t.Errorf("took %+v after the context ended", j)
	}
	q.close()
	if _, ok := q.take(context.Background()); !ok {
		t.Error("the job queued before the end was lost from a closed queue")
	}
	if j, ok := q.take(context.Background()); ok {
		t.Errorf("took %+v from a closed, empty queue", j)
	}
}
