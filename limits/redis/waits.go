package redis

import (
	"context"
	"errors"
	"fmt"

	"github.com/fetch-dev/fetch/limits"
)

// waitErr is the error of an Acquire for host whose ctx ended while it
// waited, why being what Redis last told it it waits for and lastErr the
// error of the last call made for it (nil once one answered): while Redis
// is unreachable, or the last call for it failed, one wrapping
// limits.ErrCoordinator; else a *limits.WaitError that names the cause.
func (s *Scheduler) waitErr(ctx context.Context, host, why string, lastErr error) error {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down == nil {
		down = lastErr
	}
	if down == nil {
		if c := waitCause(why, host); c != "" {
			return &limits.WaitError{Err: ctx.Err(), Cause: c}
		}
		return ctx.Err()
	}
	return fmt.Errorf("%w: Redis at %s: %v: %w", limits.ErrCoordinator, s.addr, down, ctx.Err())
}

// noteCall records err, the failure of a call made for ws, on each of
// them, when Redis did not answer it (see unanswered).
func (s *Scheduler) noteCall(ws []*waiter, err error) {
	if !unanswered(err) {
		return
	}
	s.mu.Lock()
	for _, w := range ws {
		w.err = err
	}
	s.mu.Unlock()
}

// unanswered reports whether err is a call's failure to get Redis's
// answer (unreachable, a timeout, replicas that did not acknowledge), not
// an answer: a conflict, no usable proxy, a host banned by every proxy.
func unanswered(err error) bool {
	return err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, limits.ErrNoUsableProxy) &&
		!errors.Is(err, limits.ErrHostBanned)
}

// waitCause says in limits.WaitError's words what a request for host
// waits for, from acquire.lua's word for it; "" for none.
func waitCause(why, host string) string {
	switch why {
	case "grace":
		return "the coordinator's grace after Redis lost its data"
	case "retry-after":
		return "a Retry-After from " + host + " held every proxy"
	case "host-concurrency":
		return "the host's concurrency (" + host + ")"
	case "host-rate":
		return "the host's rate (" + host + ")"
	case "global-rate":
		return "the global rate"
	case "benched":
		return "a usable proxy (benched)"
	case "pushback":
		return "pushback or bans from " + host
	case "proxy-rate":
		return "a proxy's or pool's rate"
	case "proxy-concurrency":
		return "a proxy's or pool's concurrency"
	}
	return ""
}
