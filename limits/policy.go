package limits

import (
	"fmt"
	"slices"
	"time"
)

// Policy breaks ties between proxies that can all start an attempt now.
// The zero Policy is LeastInFlight. *Policy is a pflag.Value (Set, String,
// Type), so a flag reads it by name and checks it once.
type Policy int

// Policies. LeastInFlight prefers the proxy whose budget is least full
// (in flight / concurrency, so a proxy of capacity 8 with 2 in flight is
// preferred to one of capacity 2 with 1); LeastUsed prefers the proxy with the
// fewest attempts so far; RoundRobin takes proxies in turn; Random picks one
// uniformly.
const (
	LeastInFlight Policy = iota
	LeastUsed
	RoundRobin
	Random
)

// policyNames are the policies' names as the --policy flag spells them.
var policyNames = [...]string{
	LeastInFlight: "least-inflight",
	LeastUsed:     "least-used",
	RoundRobin:    "round-robin",
	Random:        "random",
}

// ParsePolicy reads a policy by its name, as String writes it.
func ParsePolicy(s string) (Policy, error) {
	for p, name := range policyNames {
		if s == name {
			return Policy(p), nil
		}
	}
	return 0, fmt.Errorf("limits: unknown policy %q (want least-inflight, least-used, round-robin or random)", s)
}

// String returns the policy's name.
func (p Policy) String() string {
	if p < 0 || int(p) >= len(policyNames) {
		return fmt.Sprintf("Policy(%d)", int(p))
	}
	return policyNames[p]
}

// Set sets *p to the policy named s; it is ParsePolicy for a flag.
func (p *Policy) Set(s string) error {
	q, err := ParsePolicy(s)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// Type names the flag's value in help text.
func (*Policy) Type() string { return "POLICY" }

// pick chooses the proxy for req among those that can start now, or returns
// -1 and how long until one could (-1: only after a release). Proxies in
// req.Avoid are chosen only when no other can start now. While draining, a
// proxy is passed over when faster ones would finish this request sooner
// (see holdBack).
func (s *Local) pick(req Request, now time.Time, ahead int) (int, time.Duration) {
	best, bestAvoided, ties := -1, false, 0
	soonest := time.Duration(-1)
	n := len(s.proxies)
	for k := 0; k < n; k++ {
		i := k
		if s.policy == RoundRobin {
			i = (s.rr + k) % n
		}
		ps := &s.proxies[i]
		b := &s.budgets[ps.budget]
		if b.capacity > 0 && b.inFlight >= b.capacity {
			continue
		}
		if ps.rejected || ps.probing && ps.probeOut {
			continue // one probe at a time; its release wakes us
		}
		w := tokenWait(b.limiter, now)
		if ps.benchedUntil.After(now) {
			w = max(w, ps.benchedUntil.Sub(now))
		}
		if len(s.pairs) > 0 {
			if pr := s.pairs[pairKey{i, req.Host}]; pr != nil {
				if pr.inFlight >= pr.window {
					continue // a release of this pair will wake us
				}
				if pr.next.After(now) {
					w = max(w, pr.next.Sub(now))
				}
			}
		}
		if w > 0 {
			if soonest < 0 || w < soonest {
				soonest = w
			}
			continue
		}
		if s.draining && s.holdBack(i, ahead, now) {
			continue // a release of a faster proxy will wake us
		}
		avoided := len(req.Avoid) > 0 && slices.Contains(req.Avoid, i)
		switch {
		case best < 0 || (bestAvoided && !avoided):
			best, bestAvoided, ties = i, avoided, 1
		case avoided && !bestAvoided:
		case s.policy == Random:
			ties++ // reservoir sampling: each candidate wins with chance 1/ties
			if s.rng.IntN(ties) == 0 {
				best = i
			}
		case s.better(i, best):
			best = i
		}
	}
	if best >= 0 {
		return best, 0
	}
	return -1, soonest
}

// better reports whether proxy i beats proxy j under the policy.
func (s *Local) better(i, j int) bool {
	pi, pj := &s.proxies[i], &s.proxies[j]
	switch s.policy {
	case LeastUsed:
		return pi.used < pj.used
	case RoundRobin:
		return false // the first in turn wins
	}
	li, lj := s.load(i), s.load(j)
	if li != lj {
		return li < lj
	}
	return pi.used < pj.used
}

// load is how full proxy i's budget is, from 0, against its nominal
// capacity.
func (s *Local) load(i int) float64 {
	b := &s.budgets[s.proxies[i].budget]
	return float64(b.inFlight) / float64(b.nominal())
}
