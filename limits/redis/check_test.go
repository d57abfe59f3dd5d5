package redis

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// checkIdle checks invariant 3 on an idle namespace "t": no leases, and
// no count left over or negative. It closes ss first, the schedulers the
// test is done with: Close waits for each one's background work (a
// dispatcher giving back a grant that raced with a cancellation, orphans
// on their way back) and gives back what it had yet to, so that the
// counts are final when they are read, once.
func checkIdle(t testing.TB, srv *redistest.Server, ss ...*Scheduler) {
	t.Helper()
	for _, s := range ss {
		s.Close()
	}
	for _, e := range counts(t, srv, "t", true) {
		t.Error(e)
	}
}

// counts checks that every proxy's, budget's and host's in-flight count
// equals its leases and is positive; idle also wants no lease that has
// not expired.
func counts(t testing.TB, srv *redistest.Server, ns string, idle bool) (errs []string) {
	t.Helper()
	k := func(name string) string { return "{" + ns + "}:" + name }
	c := srv.Client()
	defer c.Close()
	ctx := t.Context()
	// The state hash's fields, by prefix (see common.lua): l: the leases'
	// infos, i: the proxies' in-flight counts, j: the budgets', h:i| the hosts'.
	st, err := c.HGetAll(ctx, k("st")).Result()
	if err != nil {
		t.Fatal(err)
	}
	leases := map[string]string{}
	alone := map[string]bool{} // budgets of one member, whose proxy keeps no counts of its own
	counted := map[string]map[string]string{"pin": {}, "bin": {}, "hosts": {}}
	for f, v := range st {
		switch {
		case strings.HasPrefix(f, "l:"):
			leases[f[2:]] = v
		case strings.HasPrefix(f, "c:b|"):
			alone[f[4:]] = len(strings.Fields(v)) == 6
		case strings.HasPrefix(f, "i:"):
			counted["pin"][f[2:]] = v
		case strings.HasPrefix(f, "j:"):
			counted["bin"][f[2:]] = v
		case strings.HasPrefix(f, "h:i|"):
			counted["hosts"][f[2:]] = v
		}
	}
	n, _ := c.ZCard(ctx, k("leases")).Result()
	if int(n) != len(leases) {
		errs = append(errs, fmt.Sprintf("%d leases in the sorted set, %d with info", n, len(leases)))
	}
	if idle && n != 0 {
		// A lease past its expiry holds no permit: the next acquire
		// sweeps it, with its counts (a scheduler leaves it so once its
		// release has failed for two TTLs: with the 60ms of
		// TestRenewRacesRelease, a loaded machine's stall).
		tm, err := c.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if live, _ := c.ZCount(ctx, k("leases"), "("+strconv.FormatInt(tm.UnixMicro(), 10), "+inf").Result(); live > 0 {
			z, _ := c.ZRangeWithScores(ctx, k("leases"), 0, -1).Result()
			errs = append(errs, fmt.Sprintf("%d leases remain, %d not expired: %v %v now %d", n, live, leases, z, tm.UnixMicro()))
		}
	}
	want := map[string]map[string]int{"pin": {}, "bin": {}, "hosts": {}}
	for _, info := range leases {
		f := splitInfo(info)
		if !alone[f[1]] {
			want["pin"][f[0]]++
		}
		want["bin"][f[1]]++
		want["hosts"]["i|"+f[2]]++
	}
	for _, h := range []string{"pin", "bin", "hosts"} {
		got := counted[h]
		for f, v := range got {
			n, _ := strconv.Atoi(v)
			if n <= 0 {
				errs = append(errs, fmt.Sprintf("%s %s = %d", h, f, n))
			}
			if n != want[h][f] {
				errs = append(errs, fmt.Sprintf("%s %s = %d, leases %d", h, f, n, want[h][f]))
			}
		}
		for f, n := range want[h] {
			if _, ok := got[f]; !ok {
				errs = append(errs, fmt.Sprintf("%s %s missing, leases %d", h, f, n))
			}
		}
	}
	return errs
}

func splitInfo(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// renewals is a goredis.Hook that keeps when each renewal that Redis
// answered was sent, by the test's clock.
type renewals struct {
	*scriptHook
	mu   sync.Mutex
	sent map[goredis.Cmder]time.Time
	ok   []time.Time
}

func newRenewals() *renewals {
	r := &renewals{sent: map[goredis.Cmder]time.Time{}}
	r.scriptHook = &scriptHook{hash: newScripts().renew.Hash(),
		sent: func(cmd goredis.Cmder) { r.mu.Lock(); r.sent[cmd] = time.Now(); r.mu.Unlock() },
		done: func(cmd goredis.Cmder, err error) {
			r.mu.Lock()
			if err == nil {
				r.ok = append(r.ok, r.sent[cmd])
			}
			delete(r.sent, cmd)
			r.mu.Unlock()
		}}
	return r
}

// excuseLoss is for a lease of s, taken at since, that was lost: s loses
// a lease, by its rule, once the last renewal of it that Redis answered
// was sent 3/4 of a TTL before, so with renewals every TTL/3 only one
// that comes late, a loaded machine's, loses it. It fails the test if
// the renewals came less than half that margin apart (taken wrongly, the
// clocks lose it with every renewal on time), and says why otherwise.
func excuseLoss(t *testing.T, what string, s *Scheduler, r *renewals, since time.Time) {
	t.Helper()
	r.mu.Lock()
	ts := append([]time.Time{since}, r.ok...)
	r.mu.Unlock()
	slices.SortFunc(ts, time.Time.Compare)
	var gap time.Duration
	for i := 1; i < len(ts); i++ {
		gap = max(gap, ts[i].Sub(ts[i-1]))
	}
	if margin := s.lostAfter(); gap < margin/2 {
		t.Errorf("%s was lost, with renewals at most %v apart (lost at %v)", what, gap, margin)
		return
	}
	t.Logf("%s was lost after renewals %v apart, a loaded machine's", what, gap)
}
