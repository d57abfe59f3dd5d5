package limits

import (
	"slices"
	"time"
)

// Health configures the benching of failing proxies. After MaxFailures
// consecutive ProxyFault outcomes a proxy is benched for Cooldown; then it is
// given one attempt at a time (probing) until one succeeds, when it takes a
// full load again. A probe that fails benches it again for twice as long as
// the last time, up to MaxCooldown. The doubling starts over once the proxy
// has carried 10 attempts in a row without a fault.
type Health struct {
	MaxFailures int // 0: never bench
	Cooldown    time.Duration
	MaxCooldown time.Duration
}

// HealthEvent is a proxy's change of state.
type HealthEvent struct {
	Proxy    int
	At       time.Time
	State    string        // "benched", "probing" or "healthy"
	Cooldown time.Duration // for "benched": how long
}

const streakToForgive = 10

// learnHealth updates proxy p's health from the outcome of an attempt; probe
// says whether it was the one attempt a probing proxy was allowed. The
// outcomes of attempts that began before a bench are old news: otherwise the
// attempts in flight when a proxy is benched would each count as a failed
// probe. Call with s.mu held.
func (s *Local) learnHealth(p int, o Outcome, now time.Time, probe bool) {
	ps := &s.proxies[p]
	switch {
	case ps.probing && !probe:
		// Started before the bench: no verdict on the proxy now.
	case o == Success || o == PushedBack:
		ps.fails = 0
		if ps.streak++; ps.streak >= streakToForgive {
			ps.level = 0
		}
		if ps.probing {
			ps.probing, ps.probeOut = false, false
			// Back to a full load, but not a flood: under least-used its
			// count starts level with the least used of the others.
			if lo, ok := s.leastUsed(p); ok && lo > ps.used {
				ps.used = lo
			}
			s.event(p, now, "healthy", 0)
		}
	case o == ProxyFault:
		ps.streak = 0
		ps.fails++
		if s.health.MaxFailures > 0 && (ps.probing || ps.fails >= s.health.MaxFailures) {
			d := s.health.Cooldown << min(ps.level, 30)
			if s.health.MaxCooldown > 0 && (d > s.health.MaxCooldown || d <= 0) {
				d = s.health.MaxCooldown
			}
			ps.level++
			ps.fails = 0
			ps.probing, ps.probeOut = true, false
			ps.benchedUntil = now.Add(d)
			s.event(p, now, "benched", d)
		}
	default: // a probe with no verdict: another may go
		ps.probeOut = false
	}
}

// leastUsed returns the fewest attempts of any proxy but p that is not
// benched.
func (s *Local) leastUsed(p int) (int64, bool) {
	var lo int64
	found := false
	for i := range s.proxies {
		q := &s.proxies[i]
		if i == p || q.probing {
			continue
		}
		if !found || q.used < lo {
			lo, found = q.used, true
		}
	}
	return lo, found
}

// maxEvents bounds the events kept for Events: a caller that never takes
// them loses the oldest, not memory.
const maxEvents = 1 << 16

// event queues a proxy's change of state for Events. Call with s.mu held.
func (s *Local) event(p int, at time.Time, state string, d time.Duration) {
	if len(s.events) >= maxEvents {
		s.events = slices.Delete(s.events, 0, len(s.events)/2)
	}
	s.events = append(s.events, HealthEvent{Proxy: p, At: at, State: state, Cooldown: d})
	s.pending.Store(int32(len(s.events)))
}

// Events implements Scheduler.
func (s *Local) Events(dst []HealthEvent) []HealthEvent {
	if s.pending.Load() == 0 {
		return dst
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	dst = append(dst, s.events...)
	s.events = s.events[:0]
	s.pending.Store(0)
	return dst
}
