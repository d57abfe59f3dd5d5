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
// (see holdBack). It takes the candidates from the index best first and
// sets aside those that the request's own conditions rule out, so its cost
// is O(log P) times one more than the candidates set aside. Call with s.mu
// held.
func (s *Local) pick(req Request, now time.Time, ahead int) (int, time.Duration) {
	soonest := s.unpark(now)
	best, avoided := -1, -1
	for len(s.top) > 0 {
		i := int(s.rall[s.roff[s.top[0]]]) // the best proxy of the best budget
		if len(s.pairs) > 0 {
			if pr := s.pairs[pairKey{i, req.Host}]; pr != nil {
				if pr.inFlight >= pr.window {
					s.notePaced(i, req.Host)
					s.setAside(i) // a release of this pair will wake us
					continue
				}
				if pr.next.After(now) {
					s.notePaced(i, req.Host)
					if w := pr.next.Sub(now); soonest < 0 || w < soonest {
						soonest = w
					}
					s.setAside(i)
					continue
				}
			}
		}
		if s.draining && s.holdBack(i, ahead, now) {
			// A release of a faster proxy will wake us. The candidates
			// come fastest first now, so every later one would be held
			// back too.
			break
		}
		if len(req.Avoid) > 0 && slices.Contains(req.Avoid, i) {
			if avoided < 0 {
				avoided = i
			}
			s.setAside(i)
			continue
		}
		best = i
		break
	}
	s.putBack(now)
	if best < 0 {
		best = avoided
	}
	if best >= 0 {
		return best, 0
	}
	return -1, soonest
}

// setAside takes proxy i out of the index for the rest of the pick.
func (s *Local) setAside(i int) {
	b := int(s.proxies[i].budget)
	s.removeReady(int32(b), int32(i))
	s.aside = append(s.aside, int32(i))
	if s.rlen[b] == 0 {
		s.top.remove(int32(b), s.bpos, s.budgetLess)
	} else {
		s.bkey[b] = s.budgetKey(b) // its best proxy is another now
		s.top.fix(int(s.bpos[b]), s.bpos, s.budgetLess)
	}
}

// putBack returns the proxies set aside to the index.
func (s *Local) putBack(now time.Time) {
	for _, i := range s.aside {
		b := s.proxies[i].budget
		s.pushReady(b, i)
		s.refreshBudget(int(b), now)
	}
	s.aside = s.aside[:0]
}
