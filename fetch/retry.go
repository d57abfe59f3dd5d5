package fetch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
)

// retryPolicy is a run's retry policy, in the manner of go-retryablehttp's
// CheckRetry and Backoff: checkRetry says whether a failed attempt is tried
// again, backoff how long to wait first, and wait puts the two together
// within what is left of the URL's deadline. The zero value never retries.
type retryPolicy struct {
	retries int           // extra attempts after the first (--retries)
	base    time.Duration // the first back-off, doubling with full jitter (--retry-backoff)
	status  map[int]bool  // statuses retried, and failed when final (--retry-status)
}

// retryPolicy returns the engine's policy.
func (e *Engine) retryPolicy() retryPolicy {
	return retryPolicy{retries: e.cfg.Retries, base: e.cfg.RetryBackoff, status: e.retry}
}

// retryStatus reports whether a response with status code is retried (and
// fails the URL when it is the last answer).
func (p retryPolicy) retryStatus(code int) bool { return p.status[code] }

// checkRetry reports whether the URL gets another attempt after its n-th
// ended with res: not when ctx (the URL's) is done, nor after a success, a
// failure another attempt would not mend, an attempt that never had a
// lease, or the last of --retries.
func (p retryPolicy) checkRetry(ctx context.Context, n int, res result) bool {
	if ctx.Err() != nil {
		return false
	}
	return !res.ok && res.err != nil && !res.final && res.proxy >= 0 && n <= p.retries && retryable(res.err.Kind)
}

// backoff is the wait after the n-th attempt: what its Retry-After asked
// for, else full jitter.
func (p retryPolicy) backoff(n int, res result) time.Duration {
	if res.hasRetryAf {
		return res.retryAfter
	}
	return fullJitter(p.base, n)
}

// wait decides whether the URL gets another attempt after res, its n-th,
// and how long to wait first. left is what is left of the URL's deadline: a
// wait that does not fit in it means no retry, and the URL fails now with
// this attempt's error; late says so, and wait is then the wait that did
// not fit.
func (p retryPolicy) wait(ctx context.Context, n int, res result, left time.Duration) (wait time.Duration, again, late bool) {
	if !p.checkRetry(ctx, n, res) {
		return 0, false, false
	}
	wait = p.backoff(n, res)
	if left <= wait {
		return wait, false, true
	}
	return wait, true, false
}

// notRetried is what a failure's message gets when the wait before its
// retry did not fit in what was left of the deadline: curl and httpx users
// ask why a URL was not tried again.
func notRetried(res result, wait, left time.Duration) string {
	what := "a back-off"
	if res.hasRetryAf {
		what = "its Retry-After"
	}
	return fmt.Sprintf("; not retried: %s of %s does not fit in the %s left of the total deadline (-t)",
		what, wait.Round(time.Millisecond), max(left, 0).Round(time.Millisecond))
}

// retryable reports whether an attempt that failed with kind may be tried
// again (on another proxy when there is one).
func retryable(kind string) bool {
	switch kind {
	case results.KindTooLarge, results.KindRedirect, results.KindDeadline, results.KindCancelled, results.KindInvalid, results.KindCoordinator, results.KindSkipped:
		return false
	}
	return true
}

// fullJitter is the n-th back-off (n from 1): a random duration up to
// base·2^(n-1).
func fullJitter(base time.Duration, n int) time.Duration {
	if base <= 0 {
		return 0
	}
	ceil := base << min(n-1, 20)
	if ceil <= 0 {
		ceil = base
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// retryAfter parses a Retry-After value: seconds or an HTTP date, which is
// taken relative to now.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var secs int64
	if _, err := fmt.Sscanf(v, "%d", &secs); err == nil && fmt.Sprint(secs) == v {
		if secs < 0 {
			return 0, false
		}
		return time.Duration(min(secs, 1<<31)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
