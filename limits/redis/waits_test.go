package redis

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/limits"
)

// TestWaitErrNamesTheLastFailedCall: a wait whose last call for it failed
// (a grant that no replica acknowledged) ends with limits.ErrCoordinator
// and that failure, even when Redis is no longer marked down: the failed
// grant's give-back, sent after it, reached Redis and cleared the mark
// before the wait's context ended. That order made
// TestGrantsWaitForAReplica fail now and then (a bare context error). A
// wait whose calls were answered names its cause; answers such as a
// conflict are not taken for an unreachable Redis.
func TestWaitErrNamesTheLastFailedCall(t *testing.T) {
	s := &Scheduler{addr: "127.0.0.1:6379"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	failed := errors.New("limits/redis: 0 of 1 replicas acknowledged a grant within 500ms")
	err := s.waitErr(ctx, "h:1", "proxy-concurrency", failed)
	if !errors.Is(err, limits.ErrCoordinator) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Errorf("after a failed call: %v, want ErrCoordinator naming it", err)
	}
	var we *limits.WaitError
	if err := s.waitErr(ctx, "h:1", "proxy-concurrency", nil); !errors.As(err, &we) || errors.Is(err, limits.ErrCoordinator) {
		t.Errorf("after an answer: %v, want a WaitError", err)
	}
	for _, e := range []error{ErrConflict, limits.ErrNoUsableProxy, limits.ErrHostBanned, nil} {
		if unanswered(e) {
			t.Errorf("unanswered(%v) = true", e)
		}
	}
	if !unanswered(failed) || !unanswered(context.DeadlineExceeded) {
		t.Error("a call's failure is not unanswered")
	}
}
