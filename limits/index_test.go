package limits

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// refPick is the scheduler's choice of proxy as it was made before the
// index: a scan of every proxy under the policy's order (least-inflight or
// least-used), ties to the lowest index, avoided proxies only when no other
// can start. Call with s.mu held.
func (s *Local) refPick(req Request, now time.Time) int {
	best, bestAvoided := -1, false
	for i := range s.proxies {
		ps := &s.proxies[i]
		b := &s.budgets[ps.budget]
		if b.capacity > 0 && b.inFlight >= b.capacity || ps.rejected || ps.probing && ps.probeOut {
			continue
		}
		if b.limiter.WaitAt(now) > 0 || ps.benched && s.benchedUntil[int32(i)].After(now) {
			continue
		}
		if pr := s.pairs[pairKey{i, req.Host}]; pr != nil && (pr.inFlight >= pr.window || pr.next.After(now)) {
			continue
		}
		avoided := slices.Contains(req.Avoid, i)
		switch {
		case best < 0 || bestAvoided && !avoided:
			best, bestAvoided = i, avoided
		case avoided && !bestAvoided:
		case s.refBetter(i, best):
			best = i
		}
	}
	return best
}

// loadCmp compares how full budgets a and b are, in flight over nominal
// capacity, exactly: -1, 0 or 1.
func (s *Local) loadCmp(a, b int) int {
	ba, bb := &s.budgets[a], &s.budgets[b]
	x, y := int64(ba.inFlight)*int64(bb.nominal()), int64(bb.inFlight)*int64(ba.nominal())
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func (s *Local) refBetter(i, j int) bool {
	pi, pj := &s.proxies[i], &s.proxies[j]
	if s.policy == LeastInFlight {
		if c := s.loadCmp(int(pi.budget), int(pj.budget)); c != 0 {
			return c < 0
		}
	}
	return pi.used < pj.used
}

// TestIndexMatchesScan drives schedulers through random grants, releases
// with every outcome (benching, probing, pushback, rejection) and clock
// moves, over pools and proxies of their own with and without rate limits,
// and checks that every grant goes to the proxy the scan of every proxy
// would have chosen.
func TestIndexMatchesScan(t *testing.T) {
	for _, pol := range []Policy{LeastInFlight, LeastUsed} {
		for seed := range uint64(20) {
			rng := rand.New(rand.NewPCG(seed, uint64(pol)))
			clock := NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := Config{
				Policy:   pol,
				Clock:    clock,
				Health:   Health{MaxFailures: 2, Cooldown: 30 * time.Millisecond, MaxCooldown: time.Second},
				Pushback: Pushback{Delay: 5 * time.Millisecond, Max: 50 * time.Millisecond},
			}
			nb := 1 + rng.IntN(12)
			for range nb {
				sp := Spec{Concurrency: rng.IntN(4)} // 0: unlimited
				if rng.IntN(3) == 0 {
					sp.Rate, sp.Burst = Rate{N: float64(1 + rng.IntN(200)), Per: time.Second}, 1+rng.IntN(3)
				}
				cfg.Budgets = append(cfg.Budgets, sp)
			}
			for range 1 + rng.IntN(40) {
				cfg.BudgetOf = append(cfg.BudgetOf, rng.IntN(nb))
			}
			s := NewLocal(cfg)
			checkIndex(t, s, true)
			var held []*Lease
			hosts := []string{"a:1", "b:1", "c:1"}
			for step := range 3000 {
				if step%100 == 0 {
					checkIndex(t, s, false)
				}
				switch op := rng.IntN(10); {
				case op < 5:
					req := Request{Host: hosts[rng.IntN(len(hosts))]}
					if rng.IntN(3) == 0 {
						req.Avoid = []int{rng.IntN(len(cfg.BudgetOf))}
					}
					now := clock.Now()
					s.mu.Lock()
					want := s.refPick(req, now)
					if s.roomy == 0 {
						want = -1
					}
					l, _ := s.tryGrant(req, now, s.logical(now), 0)
					s.mu.Unlock()
					got := -1
					if l != nil {
						got = l.Proxy
						held = append(held, l)
					}
					if got != want {
						t.Fatalf("%s seed %d step %d: granted proxy %d, the scan chooses %d", pol, seed, step, got, want)
					}
				case op < 9 && len(held) > 0:
					k := rng.IntN(len(held))
					o := []Outcome{Success, Success, Success, ProxyFault, PushedBack, Neutral, Rejected}[rng.IntN(7)]
					if o == Rejected && rng.IntN(10) > 0 {
						o = Success
					}
					held[k].Finish(o)
					held = slices.Delete(held, k, k+1)
				default:
					clock.Advance(time.Duration(rng.IntN(20)) * time.Millisecond)
				}
			}
			s.Close()
		}
	}
}

// checkIndex checks the index of s: every ready heap and top are heaps
// whose positions are where they are; and when fresh (a scheduler that
// granted nothing yet), every proxy is in its budget's heap and every
// budget with proxies in top.
func checkIndex(t *testing.T, s *Local, fresh bool) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	check := func(what string, h heap32, pos []int32, less func(a, b int32) bool) {
		t.Helper()
		for i, id := range h {
			if pos[id] != int32(i) {
				t.Fatalf("%s: %d at %d, its position says %d", what, id, i, pos[id])
			}
			if i > 0 && less(id, h[(i-1)/2]) {
				t.Fatalf("%s: %d at %d is before its parent", what, id, i)
			}
		}
	}
	for b := range s.budgets {
		check("budget "+strconv.Itoa(b), s.ready(int32(b)), s.mpos, s.proxyLess)
		if fresh && (s.rlen[b] != int32(s.members(int32(b))) || s.rlen[b] > 0 && s.bpos[b] < 0) {
			t.Fatalf("budget %d: %d of %d proxies ready, in top at %d", b, s.rlen[b], s.members(int32(b)), s.bpos[b])
		}
	}
	for p := range s.proxies {
		if fresh && s.mpos[p] < 0 {
			t.Fatalf("proxy %d is not in its budget's heap", p)
		}
	}
	check("top", s.top, s.bpos, s.budgetLess)
}

// TestNewLocalIndex: a new scheduler's index, which NewLocal builds whole,
// is as its refreshes keep it, under every policy, for pools of many
// proxies and proxies of their own.
func TestNewLocalIndex(t *testing.T) {
	for _, pol := range []Policy{LeastInFlight, LeastUsed, RoundRobin, Random} {
		for seed := range uint64(10) {
			rng := rand.New(rand.NewPCG(seed, 7))
			cfg := Config{Policy: pol}
			nb := 1 + rng.IntN(20)
			for range nb {
				cfg.Budgets = append(cfg.Budgets, Spec{Concurrency: 1 + rng.IntN(4)})
			}
			for range 1 + rng.IntN(200) {
				cfg.BudgetOf = append(cfg.BudgetOf, rng.IntN(nb))
			}
			s, r := NewLocal(cfg), NewLocal(cfg)
			checkIndex(t, s, true)
			// The same, each built again with the same random numbers: s
			// whole, r by a refresh of each proxy.
			for _, x := range []*Local{s, r} {
				x.top = x.top[:0]
				for b := range x.bpos {
					x.bpos[b], x.rlen[b] = -1, 0
				}
				for p := range x.mpos {
					x.mpos[p] = -1
				}
				x.rng = rand.New(rand.NewPCG(seed, 1))
			}
			s.build()
			now := r.clock.Now()
			for p := range r.proxies {
				r.refreshProxy(p, now)
			}
			checkIndex(t, s, true)
			checkIndex(t, r, true)
			// Both grant in the same order.
			grant := func(x *Local) int {
				x.mu.Lock()
				defer x.mu.Unlock()
				now := x.clock.Now()
				l, _ := x.tryGrant(Request{Host: "a:1"}, now, x.logical(now), 0)
				if l == nil {
					return -1
				}
				return l.Proxy
			}
			for i := range len(cfg.BudgetOf) {
				if gs, gr := grant(s), grant(r); gs != gr {
					t.Fatalf("%s seed %d grant %d: proxy %d built whole, %d refreshed", pol, seed, i, gs, gr)
				}
			}
			s.Close()
			r.Close()
		}
	}
}

// TestRandomIsUniform: the random policy picks each of the proxies that
// can start about equally often, and not the last one chosen more than
// chance.
func TestRandomIsUniform(t *testing.T) {
	const n, grants = 8, 80000
	cfg := Config{Policy: Random}
	for i := range n {
		cfg.Budgets = append(cfg.Budgets, Spec{Concurrency: 2})
		cfg.BudgetOf = append(cfg.BudgetOf, i)
	}
	s := NewLocal(cfg)
	defer s.Close()
	var count [n]int
	again, last := 0, -1
	hold := []*Lease{}
	for range grants {
		s.mu.Lock()
		now := s.clock.Now()
		l, _ := s.tryGrant(Request{Host: "h:1"}, now, now, 0)
		s.mu.Unlock()
		count[l.Proxy]++
		if l.Proxy == last {
			again++
		}
		last = l.Proxy
		hold = append(hold, l)
		if len(hold) > 3 { // some proxies busy, most free
			hold[0].Release()
			hold = hold[1:]
		}
	}
	for i, c := range count {
		if exp := grants / n; c < exp*9/10 || c > exp*11/10 {
			t.Errorf("proxy %d chosen %d times of %d, want about %d", i, c, grants, exp)
		}
	}
	// With up to 4 of 8 in flight and capacity 2, the same proxy twice in
	// a row is as likely as any other free one: about 1/8 to 1/6.
	if f := float64(again) / grants; f > 0.25 {
		t.Errorf("the same proxy twice in a row %.2f of the time", f)
	}
}

// TestRoundRobinTakesTurns: round-robin gives each proxy one attempt
// before any gets a second, also when some are busy in between.
func TestRoundRobinTakesTurns(t *testing.T) {
	const n = 5
	cfg := Config{Policy: RoundRobin}
	for i := range n {
		cfg.Budgets = append(cfg.Budgets, Spec{Concurrency: 1})
		cfg.BudgetOf = append(cfg.BudgetOf, i)
	}
	s := NewLocal(cfg)
	defer s.Close()
	var count [n]int
	var busy *Lease
	for k := range 50 {
		s.mu.Lock()
		now := s.clock.Now()
		l, _ := s.tryGrant(Request{Host: "h:1"}, now, now, 0)
		s.mu.Unlock()
		count[l.Proxy]++
		if k%3 == 0 { // keep this one busy for a while
			if busy != nil {
				busy.Release()
			}
			busy = l
		} else {
			l.Release()
		}
		lo, hi := slices.Min(count[:]), slices.Max(count[:])
		if hi-lo > 2 {
			t.Fatalf("after %d grants the counts are %v: not in turn", k+1, count)
		}
	}
	busy.Release()
}

// TestProxyStateSmall: what the scheduler keeps for each proxy is 80 bytes
// and holds no pointer (see proxyState), so that a pool of 100,000 costs 8
// MB the garbage collector does not mark.
func TestProxyStateSmall(t *testing.T) {
	if n := unsafe.Sizeof(proxyState{}); n > 80 {
		t.Errorf("proxyState is %d bytes, want at most 80", n)
	}
	var pointers func(reflect.Type) bool
	pointers = func(t reflect.Type) bool {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
			return true
		case reflect.Struct:
			for i := range t.NumField() {
				if pointers(t.Field(i).Type) {
					return true
				}
			}
		case reflect.Array:
			return pointers(t.Elem())
		}
		return false
	}
	if pointers(reflect.TypeFor[proxyState]()) {
		t.Error("proxyState holds a pointer")
	}
}
