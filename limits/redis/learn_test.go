package redis

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestLearnsAsLocal: the scripts learn a proxy's health as limits.Local
// does. The same outcomes, on proxy 0 of two, give the same events from
// both: faults bench it, each bench after a failed probe twice as long,
// until limits' streak to forgive (10 successes in a row) starts the
// cooldowns over, and not one success before; bans by limits.BanHosts
// distinct hosts in a row bench it, and a success breaks the row, also
// when the proxy's health was all zero but its row.
func TestLearnsAsLocal(t *testing.T) {
	const cool = 40 * time.Millisecond
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	cfg.Health = limits.Health{MaxFailures: 2, Cooldown: cool, MaxCooldown: time.Second}
	// A step is an outcome of an attempt on proxy 0 at host h (ban:
	// Banned at a host of its own), or "wait": until a bench is over.
	const S, F = limits.Success, limits.ProxyFault
	type step struct {
		o    limits.Outcome
		ban  string
		wait time.Duration
	}
	succ := func(n int) []step { return slices.Repeat([]step{{o: S}}, n) }
	var steps []step
	steps = append(steps, step{o: F}, step{o: F})           // benched for cool
	steps = append(steps, step{wait: cool}, step{o: F})     // a failed probe: 2×cool
	steps = append(steps, step{wait: 2 * cool}, step{o: S}) // healthy, a streak of 1
	steps = append(steps, succ(8)...)                       // 9: not yet forgiven
	steps = append(steps, step{o: F}, step{o: F})           // 4×cool
	steps = append(steps, step{wait: 4 * cool}, step{o: S})
	steps = append(steps, succ(9)...)             // 10: forgiven
	steps = append(steps, step{o: F}, step{o: F}) // cool again
	steps = append(steps, step{wait: cool}, step{o: S})
	steps = append(steps, step{ban: "a"}, step{o: S}) // a row of one host, broken
	for i := range limits.BanHosts - 1 {
		steps = append(steps, step{ban: fmt.Sprint("b", i)}) // one short of a row
	}
	steps = append(steps, step{ban: "c"}) // a row: benched

	run := func(t *testing.T, s limits.Scheduler) []string {
		ctx := context.Background()
		var got []string
		for i, st := range steps {
			if st.wait > 0 {
				// Until the bench is over: the cooldown is time, on
				// limits.Local's clock and Redis's alike, and the test
				// checks the events, not when they come; a longer sleep
				// changes none of them.
				time.Sleep(st.wait + 20*time.Millisecond)
				continue
			}
			host, o := "h:1", st.o
			if st.ban != "" {
				host, o = st.ban+":1", limits.Banned
			}
			l, err := s.Acquire(ctx, limits.Request{Host: host, Avoid: []int{1}})
			if err != nil || l.Proxy != 0 {
				t.Fatalf("step %d: got %v, %v, want proxy 0", i, l, err)
			}
			l.Finish(o)
			for _, e := range s.Events(nil) {
				got = append(got, fmt.Sprintf("%d: %s %s", i, e.State, e.Cooldown))
			}
		}
		return got
	}
	local := limits.NewLocal(cfg)
	defer local.Close()
	want := run(t, local)
	srv := redistest.Start(t)
	rs := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	got := run(t, rs)
	if !slices.Equal(got, want) {
		t.Errorf("Redis events:\n%q\nlimits.Local's:\n%q", got, want)
	}
	if len(want) != 12 {
		t.Errorf("%d events, want 12 (5 benches, the last by bans; 4 probes; 3 healthy): %q", len(want), want)
	}
	checkIdle(t, srv, rs)
}
