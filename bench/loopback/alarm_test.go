package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestAlarmNeverEarly has many delays of different lengths pending at once,
// added in no order, and checks that none ends before it is due, each ends,
// and one whose context ends returns that context's error at once.
func TestAlarmNeverEarly(t *testing.T) {
	a := newAlarm()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { a.run(ctx); close(stopped) }()
	defer func() { cancel(); <-stopped }()

	for round := range 3 {
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Go(func() {
				d := time.Duration(5+(i*7)%20) * time.Millisecond
				start := time.Now()
				if err := a.sleep(context.Background(), start, d); err != nil {
					errs <- err
					return
				}
				if got := time.Since(start); got < d {
					errs <- fmt.Errorf("round %d: a delay of %v ended after %v", round, d, got)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer wcancel()
	start := time.Now()
	err := a.sleep(wctx, start, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sleep past its context's end: %v, want the context's error", err)
	}
	// tolerance: the context's 10 ms and 1 s for a loaded test machine
	if got := time.Since(start); got > time.Second {
		t.Errorf("sleep whose context ended after 10ms returned after %v", got)
	}
}
