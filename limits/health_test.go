package limits_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// TestBenchProbeRestore walks a proxy through benched, probing (one attempt
// at a time), benched again for twice as long, and healthy.
func TestBenchProbeRestore(t *testing.T) {
	const cool = 150 * time.Millisecond
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 2}, {Concurrency: 1}},
		BudgetOf: []int{0, 1},
		Health:   limits.Health{MaxFailures: 2, Cooldown: cool, MaxCooldown: time.Second},
	})
	r.play([]step{
		{ask: []string{"f0"}, avoid: []int{1}, grant: []string{"f0@0"}},                           // proxy 0 takes an attempt ...
		{finish: []string{"f0"}, outcome: limits.ProxyFault, events: []string{}},                  // ... and fails: one fault is not enough
		{ask: []string{"f1"}, avoid: []int{1}, grant: []string{"f1@0"}},                           // a second attempt on 0 ...
		{finish: []string{"f1"}, outcome: limits.ProxyFault, events: []string{"0 benched 150ms"}}, // ... fails too: benched for the cooldown
		{ask: []string{"b0"}, avoid: []int{1}, grant: []string{"b0@1"}},                           // while benched, even a request avoiding 1 goes to 1
		{finish: []string{"b0"}},                                              // (given back)
		{ask: []string{"hold"}, grant: []string{"hold@1"}},                    // proxy 1 full ...
		{ask: []string{"probe"}},                                              // ... so the next request waits for 0
		{at: cool - time.Nanosecond},                                          // still benched a nanosecond before the cooldown ends
		{at: cool, grant: []string{"probe@0"}, events: []string{"0 probing"}}, // at its end, the probe goes to 0
		{ask: []string{"more"}},                                               // one probe at a time: 0's budget has room, yet this waits
		{cancel: []string{"more"}},                                            // (withdrawn)
		{finish: []string{"probe"}, outcome: limits.ProxyFault, events: []string{"0 benched 300ms"}}, // the probe fails: benched for twice as long
		{ask: []string{"probe2"}},             // the next request waits for it
		{at: cool + 2*cool - time.Nanosecond}, // still benched just before
		{at: cool + 2*cool, grant: []string{"probe2@0"}, events: []string{"0 probing"}},      // probing again
		{finish: []string{"probe2"}, outcome: limits.Success, events: []string{"0 healthy"}}, // the probe succeeds: healthy
		{ask: []string{"a", "b"}, grant: []string{"a@0", "b@0"}},                             // a full budget of 2 on proxy 0 again
		{finish: []string{"a", "b", "hold"}, events: []string{}},                             // nothing more happens to its health
	})
}

// TestAllBenchedWait: when every proxy is benched, an attempt waits for the
// first to come back instead of failing.
func TestAllBenchedWait(t *testing.T) {
	const cool = 100 * time.Millisecond
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 1}},
		BudgetOf: []int{0},
		Health:   limits.Health{MaxFailures: 1, Cooldown: cool},
	})
	r.play([]step{
		{ask: []string{"a"}, grant: []string{"a"}},                                               // the only proxy takes it
		{finish: []string{"a"}, outcome: limits.ProxyFault, events: []string{"0 benched 100ms"}}, // one fault benches it
		{ask: []string{"b"}},         // the next attempt waits, it does not fail
		{at: cool - time.Nanosecond}, // inside the cooldown: still waiting
		{at: cool, grant: []string{"b"}, events: []string{"0 probing"}}, // granted when the proxy comes back
	})
}

// TestLeastUsedRestoredNotFlooded: a proxy back from the bench starts level
// with the least used of the others, so least-used does not pour every
// request into it to "catch up".
func TestLeastUsedRestoredNotFlooded(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{}, {}},
		BudgetOf: []int{0, 1},
		Policy:   limits.LeastUsed,
		Health:   limits.Health{MaxFailures: 1, Cooldown: 30 * time.Millisecond},
	})
	first := r.now("h:1")
	other := 1 - first.Proxy
	first.Finish(limits.ProxyFault) // benched
	for range 50 {
		l := r.now("h:1")
		if l.Proxy != other {
			t.Fatalf("benched proxy used")
		}
		l.Finish(limits.Success)
	}
	r.clock.Advance(40 * time.Millisecond) // the cooldown is over
	// The probe goes to the restored proxy (least used); it succeeds.
	var counts [2]int
	for range 20 {
		l := r.now("h:1")
		counts[l.Proxy]++
		l.Finish(limits.Success)
	}
	if counts[first.Proxy] > 12 {
		t.Errorf("restored proxy took %d of the next 20 attempts: flooded", counts[first.Proxy])
	}
}

// TestPushbackSlowsThePair walks a proxy-host pair down its window (half
// the proxy's load, then halving), into spacing, and back: other hosts are
// never held up.
func TestPushbackSlowsThePair(t *testing.T) {
	const delay, ms = 100 * time.Millisecond, time.Millisecond
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Pushback: limits.Pushback{Delay: delay, Max: time.Second},
	})
	// Each new round of attempts starts a millisecond after the pushback
	// before it: only attempts begun after the latest pushback count.
	r.play([]step{
		{ask: names("a", 8), host: "slow:1", grant: names("a", 8)},             // 8 in flight
		{finish: names("a", 1), outcome: limits.PushedBack},                    // one 503: the pair may have 4 in flight from now on
		{finish: names("a", 8)[1:], outcome: limits.Success},                   // begun before the pushback: no news
		{at: ms, ask: names("b", 4), host: "slow:1", grant: names("b", 4)},     // 4 start ...
		{ask: []string{"b5"}, host: "slow:1"},                                  // ... a 5th waits
		{ask: []string{"other"}, host: "other:1", grant: []string{"other"}},    // another host is not held up
		{cancel: []string{"b5"}, finish: []string{"other"}},                    // (withdrawn, given back)
		{finish: names("b", 1), outcome: limits.PushedBack},                    // window 2
		{finish: names("b", 4)[1:], outcome: limits.Success},                   // (old news)
		{at: 2 * ms, ask: names("c", 2), host: "slow:1", grant: names("c", 2)}, // 2 start ...
		{ask: []string{"c3"}, host: "slow:1"},                                  // ... a 3rd waits
		{cancel: []string{"c3"}},                                               // (withdrawn)
		{finish: names("c", 1), outcome: limits.PushedBack},                    // window 1
		{finish: []string{"c1"}},                                               // (given back)
		{at: 3 * ms, ask: []string{"d"}, host: "slow:1", grant: []string{"d"}}, // one at a time ...
		{finish: []string{"d"}, outcome: limits.PushedBack},                    // ... pushed back once more: starts spaced by the delay
		{ask: []string{"e"}, host: "slow:1"},                                   // the next start waits ...
		{at: 3*ms + delay - time.Nanosecond},                                   // ... the whole delay ...
		{at: 3*ms + delay, grant: []string{"e"}},                               // ... and no longer
		{finish: []string{"e"}, outcome: limits.PushedBack},                    // the spacing doubles
		{ask: []string{"f"}, host: "slow:1"},                                   // the next start waits ...
		{at: 3*ms + 3*delay - time.Nanosecond},                                 // ... twice the delay ...
		{at: 3*ms + 3*delay, grant: []string{"f"}},                             // ... and no longer
		{finish: []string{"f"}, outcome: limits.Success},                       // a success halves the spacing
	})
	// Successes undo it step by step: the spacing, then the window, until
	// the pair is forgotten and 8 run at once again.
	for range 20 {
		l, _ := r.soon("slow:1")
		l.Finish(limits.Success)
	}
	if _, pairs := r.s.Tracked(); pairs != 0 {
		t.Errorf("%d pairs still slowed after 21 successes", pairs)
	}
	r.play([]step{
		{ask: names("z", 8), host: "slow:1", grant: names("z", 8)}, // full speed again
	})
}

// TestStaleOutcomesAreOldNews: attempts in flight when a proxy is benched
// do not, finishing later, bench it again.
func TestStaleOutcomesAreOldNews(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Health:   limits.Health{MaxFailures: 1, Cooldown: time.Minute, MaxCooldown: time.Hour},
		Pushback: limits.Pushback{Delay: 200 * time.Millisecond, Max: time.Minute},
	})
	r.play([]step{
		{ask: names("a", 8), grant: names("a", 8)},                                              // 8 in flight together ...
		{finish: names("a", 8), outcome: limits.ProxyFault, events: []string{"0 benched 1m0s"}}, // ... all fail: one bench, of the first cooldown
	})
}

// TestStalePushbacksAreOldNews: attempts in flight when a pair is pushed
// back do not, finishing later, deepen the pushback or undo it.
func TestStalePushbacksAreOldNews(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{Concurrency: 8}},
		BudgetOf: []int{0},
		Pushback: limits.Pushback{Delay: 200 * time.Millisecond, Max: time.Minute},
	})
	r.play([]step{
		{ask: names("a", 6), grant: names("a", 6)},           // 6 in flight together
		{finish: names("a", 3), outcome: limits.PushedBack},  // three 503s from them: one pushback, a window of 3
		{finish: names("a", 6)[3:], outcome: limits.Success}, // successes of attempts begun before it: they do not undo it
		{ask: names("b", 3), grant: names("b", 3)},           // 3 start ...
		{ask: []string{"b3"}},                                // ... a 4th waits: the window is 3
		{cancel: []string{"b3"}, finish: names("b", 3)},      // (withdrawn, given back)
	})
}

// TestStateDoesNotGrowWithHosts: host and pair state for hosts seen once is
// forgotten once it says nothing any more.
func TestStateDoesNotGrowWithHosts(t *testing.T) {
	r := newRun(t, limits.Config{
		Budgets:  []limits.Spec{{}},
		BudgetOf: []int{0},
		Host:     limits.Spec{Rate: limits.Rate{N: 1000, Per: time.Second}, Burst: 1},
		Pushback: limits.Pushback{Delay: time.Millisecond, Max: 5 * time.Millisecond},
	})
	for i := range 10000 {
		l := r.now(fmt.Sprintf("h%d:80", i))
		if i%2 == 0 {
			l.Finish(limits.PushedBack)
		} else {
			l.Release()
		}
	}
	r.clock.Advance(20 * time.Millisecond) // buckets refill, pushbacks age
	for i := range 5000 {
		l, _ := r.soon(fmt.Sprintf("again%d:80", i%50))
		l.Release()
	}
	hosts, pairs := r.s.Tracked()
	if hosts > 100 || pairs > 100 {
		t.Errorf("after 10000 one-off hosts the scheduler keeps %d hosts and %d pairs", hosts, pairs)
	}
}
