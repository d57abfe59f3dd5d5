package fetch

import (
	"context"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
)

// TestRetryPolicy: which attempts are tried again, and after how long,
// within what is left of the deadline.
func TestRetryPolicy(t *testing.T) {
	p := retryPolicy{retries: 2, base: 100 * time.Millisecond, status: map[int]bool{503: true}}
	failed := func(kind string) result { return result{proxy: 0, err: &results.Error{Kind: kind}} }
	after := func(d time.Duration) result {
		r := failed(results.KindStatus)
		r.retryAfter, r.hasRetryAf = d, true
		return r
	}
	final := failed(results.KindOther)
	final.final = true
	noLease := failed(results.KindCancelled)
	noLease.proxy = -1
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		n     int // attempts so far
		res   result
		left  time.Duration
		again bool
		late  bool          // a retry, but its wait does not fit in left
		wait  time.Duration // exact when res has Retry-After; else an upper bound
	}{
		{name: "a reset is retried", n: 1, res: failed(results.KindReset), left: time.Second, again: true, wait: 100 * time.Millisecond},
		{name: "the second back-off doubles", n: 2, res: failed(results.KindTimeout), left: time.Second, again: true, wait: 200 * time.Millisecond},
		{name: "not after the last of --retries", n: 3, res: failed(results.KindReset), left: time.Second},
		{name: "a success is not", n: 1, res: result{proxy: 0, ok: true}, left: time.Second},
		{name: "too_large is not", n: 1, res: failed(results.KindTooLarge), left: time.Second},
		{name: "redirect is not", n: 1, res: failed(results.KindRedirect), left: time.Second},
		{name: "deadline is not", n: 1, res: failed(results.KindDeadline), left: time.Second},
		{name: "a final failure is not", n: 1, res: final, left: time.Second},
		{name: "no lease: not", n: 0, res: noLease, left: time.Second},
		{name: "the URL's context done: not", ctx: done, n: 1, res: failed(results.KindReset), left: time.Second},
		{name: "Retry-After that fits", n: 1, res: after(500 * time.Millisecond), left: time.Second, again: true, wait: 500 * time.Millisecond},
		{name: "Retry-After that does not fit", n: 1, res: after(time.Second), left: time.Second, late: true, wait: time.Second},
		{name: "nothing left", n: 1, res: failed(results.KindReset), left: 0, late: true, wait: 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			wait, again, late := p.wait(ctx, tc.n, tc.res, tc.left)
			if again != tc.again || late != tc.late {
				t.Fatalf("again %v, late %v; want %v, %v", again, late, tc.again, tc.late)
			}
			switch {
			case !again && !late && wait != 0:
				t.Errorf("no retry, but a wait of %s", wait)
			case tc.res.hasRetryAf && wait != tc.wait:
				t.Errorf("wait %s, want Retry-After's %s", wait, tc.wait)
			case wait < 0 || wait > tc.wait:
				t.Errorf("wait %s outside [0, %s]", wait, tc.wait)
			}
		})
	}
	if !p.retryStatus(503) || p.retryStatus(500) {
		t.Error("retryStatus does not follow --retry-status")
	}
}

// TestRetryAfter parses both forms of Retry-After against a fixed now.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 2 * time.Minute, true},
		{" 3 ", 3 * time.Second, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"Fri, 02 Jan 2026 03:04:15 GMT", 10 * time.Second, true},
		{"Fri, 02 Jan 2026 03:04:00 GMT", 0, true}, // in the past: at once
		{"soon", 0, false},
		{"", 0, false},
	} {
		if got, ok := retryAfter(tc.in, now); got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q) = %s, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
