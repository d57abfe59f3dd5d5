package connwatch

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// fakeWatcher watches when takes is set, and counts its calls.
type fakeWatcher struct {
	takes            bool
	watched, unwatch int
}

func (w *fakeWatcher) Watch(net.Conn) bool {
	w.watched++
	return w.takes
}

func (w *fakeWatcher) Unwatch(net.Conn) bool {
	w.unwatch++
	return true
}

// TestStart: a context's Watcher that takes the connection watches it,
// and is told to stop; without one, or when it declines, the end of the
// context cuts the connection's waits at once, and Unwatch says so.
func TestStart(t *testing.T) {
	t.Run("watcher", func(t *testing.T) {
		ours, theirs := net.Pipe()
		defer ours.Close()
		defer theirs.Close()
		w := &fakeWatcher{takes: true}
		u := Start(With(context.Background(), w), ours)
		if !u.Unwatch(ours) || w.watched != 1 || w.unwatch != 1 {
			t.Fatalf("watched %d, unwatched %d: want the watcher's, once each", w.watched, w.unwatch)
		}
	})
	for _, tc := range []struct {
		name string
		ctx  func(context.Context) context.Context
	}{
		{"no watcher", func(ctx context.Context) context.Context { return ctx }},
		{"watcher declines", func(ctx context.Context) context.Context { return With(ctx, &fakeWatcher{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, theirs := net.Pipe()
			defer ours.Close()
			defer theirs.Close()
			ctx, cancel := context.WithCancel(context.Background())
			u := Start(tc.ctx(ctx), ours)
			done := make(chan error, 1)
			go func() {
				_, err := ours.Read(make([]byte, 1))
				done <- err
			}()
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("read: %v, want the deadline's error", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the read was not cut within 5 s of the cancel")
			}
			if u.Unwatch(ours) {
				t.Error("Unwatch says the connection was left alone; it was cut")
			}
		})
	}
}
