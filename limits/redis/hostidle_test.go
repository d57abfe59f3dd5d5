package redis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestIdleHostState: a host that goes idle with nothing to forget (no
// host rate, pushback or Retry-After: most hosts of a crawl) leaves no
// trace in the namespace and costs no sweep: 100 such hosts leave hexp
// empty (before, it held all 100, each a ZADD at its release and a sweep
// later). A host that goes idle with pushback state is scheduled, and its
// state is swept once it has been idle longer than the pushback could
// matter.
func TestIdleHostState(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 10})
	cfg.Pushback = limits.Pushback{Delay: 10 * time.Millisecond, Max: 20 * time.Millisecond}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	attempt := func(host string, o limits.Outcome) {
		t.Helper()
		l, err := s.Acquire(ctx, limits.Request{Host: host})
		if err != nil {
			t.Fatal(err)
		}
		l.Finish(o)
	}
	for i := range 100 {
		attempt(fmt.Sprintf("h%d:1", i), limits.Success)
	}
	c := srv.Client()
	defer c.Close()
	if n := c.ZCard(ctx, "{t}:hexp").Val(); n != 0 {
		t.Errorf("%d hosts scheduled for a sweep, want none: they had nothing to forget", n)
	}
	hostFields := func() []string {
		var out []string
		for _, f := range c.HKeys(ctx, "{t}:st").Val() {
			if strings.HasPrefix(f, "h:") {
				out = append(out, f)
			}
		}
		return out
	}
	if fs := hostFields(); len(fs) > 0 {
		t.Errorf("host fields left after every host went idle: %q", fs)
	}

	attempt("pb:1", limits.PushedBack)
	if err := c.ZScore(ctx, "{t}:hexp", "pb:1").Err(); err != nil {
		t.Fatalf("a host idle with pushback state is not scheduled for its sweep: %v", err)
	}
	if fs := hostFields(); len(fs) == 0 {
		t.Fatal("no pushback state kept for pb:1")
	}
	// Forgotten 2×20ms+1s after it went idle, at a sweep (every 125ms
	// here), which an acquire runs: asked for again until then, within a
	// bound.
	deadline := time.Now().Add(10 * time.Second)
	for len(hostFields()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pb:1's state still there 10s after it went idle: %q", hostFields())
		}
		attempt("other:1", limits.Success)
		time.Sleep(50 * time.Millisecond) // Redis's clock decides; polled, bounded above
	}
}
