package limits

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Health configures the benching of failing proxies. After MaxFailures
// consecutive ProxyFault outcomes, or Banned outcomes from BanHosts
// distinct hosts in a row (see BanHosts), a proxy is benched for Cooldown; then it is
// given one attempt at a time (probing) until one succeeds, when it takes a
// full load again. A probe that fails benches it again for twice as long as
// the last time, up to MaxCooldown. The doubling starts over once the proxy
// has carried 10 attempts in a row without a fault.
//
// The pool cannot serve when every proxy is rejected, or when none has been
// healthy (every one benched, probing or rejected) for PoolWait: from then
// on Acquire fails at once with a *PoolError.
type Health struct {
	MaxFailures int // 0: never bench
	Cooldown    time.Duration
	MaxCooldown time.Duration
	PoolWait    time.Duration // 0: wait within each request's own deadline
}

// ErrNoUsableProxy is wrapped by the error of Acquire once the pool cannot
// serve (see Health).
var ErrNoUsableProxy = errors.New("no usable proxy")

// PoolError says why the pool cannot serve: how many of its proxies are
// benched (or probing) and rejected, and for how long none has been healthy.
type PoolError struct {
	Benched, Rejected, Total int
	For                      time.Duration // 0 when every proxy is rejected
}

func (e *PoolError) Error() string { return "no usable proxy: " + e.state() }

// state is "3 of 3 benched for 2m0s", "2 of 3 rejected, 1 benched for
// 2m0s" or "3 of 3 rejected".
func (e *PoolError) state() string {
	var parts []string
	if e.Rejected > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d rejected", e.Rejected, e.Total))
	}
	if e.Benched > 0 {
		b := fmt.Sprintf("%d of %d benched", e.Benched, e.Total)
		if e.Rejected > 0 {
			b = fmt.Sprintf("%d benched", e.Benched)
		}
		if e.For > 0 {
			b += " for " + e.For.String()
		}
		parts = append(parts, b)
	}
	return strings.Join(parts, ", ")
}

func (e *PoolError) Unwrap() error { return ErrNoUsableProxy }

// WaitError is what Acquire returns when its context ends while it waits:
// the context's error, what it waited for (Cause) and, when no proxy is
// healthy, the state of the pool, so that a request that waited out its
// deadline can say what it waited for.
type WaitError struct {
	Err   error // ctx.Err()
	Pool  PoolError
	Cause string // what it waited for, in Waiting's words; "" when not known
}

func (e *WaitError) Error() string { return e.Err.Error() + " (waiting for " + e.Waiting() + ")" }
func (e *WaitError) Unwrap() error { return e.Err }

// Waiting says what a request waited for: a Retry-After from its host
// ("a Retry-After from a.example:443 held every proxy (1m0s more)"), the
// host's concurrency or rate, the global rate, a usable proxy ("a usable
// proxy: 3 of 3 benched"), a proxy's or pool's concurrency or rate, bans or
// pushback from the host ("bans by a.example:443 (2 of 3 proxies banned it
// and are slowed)"), or its turn behind other requests.
func (e *WaitError) Waiting() string {
	if e.Cause != "" {
		return e.Cause
	}
	return "a usable proxy: " + e.Pool.state()
}

// HealthEvent is a proxy's change of state.
type HealthEvent struct {
	Proxy    int
	At       time.Time
	State    string        // "benched", "probing", "healthy" or "rejected"
	Cooldown time.Duration // for "benched": how long
}

// StreakToForgive is how many outcomes without a fault in a row a proxy
// must carry after a bench for its cooldown's doubling to start over.
const StreakToForgive = 10

// BanHosts is how many distinct hosts must ban a proxy in a row (Banned
// outcomes with no Success or PushedBack between them; faults and neutral
// outcomes do not break the row) for it to be benched as on MaxFailures
// faults. A ban by one host is that proxy-host pair's matter, slowed as on
// pushback; bans by many hosts say the proxy's address is burnt. Repeated
// bans by the same host count once. Nothing is benched when MaxFailures is
// 0.
const BanHosts = 5

// banStreak is the distinct hosts that banned a proxy in a row: at most
// BanHosts-1 of them, nil when none has.
type banStreak struct{ hosts []string }

// add notes a ban by host and reports whether it makes BanHosts distinct
// hosts in a row; the row then starts over.
func (b *banStreak) add(host string) bool {
	if slices.Contains(b.hosts, host) {
		return false
	}
	if len(b.hosts)+1 >= BanHosts {
		b.hosts = nil
		return true
	}
	b.hosts = append(b.hosts, host)
	return false
}

// learnHealth updates proxy p's health from the outcome of an attempt; probe
// says whether it was the one attempt a probing proxy was allowed. The
// outcomes of attempts that began before a bench are old news: otherwise the
// attempts in flight when a proxy is benched would each count as a failed
// probe. host is the attempt's target. Call with s.mu held.
func (s *Local) learnHealth(p int, host string, o Outcome, now time.Time, probe bool) {
	ps := &s.proxies[p]
	switch {
	case ps.rejected:
		// Out of the run: what its attempts still in flight say is moot.
	case o == Rejected:
		s.reject(p, now) // definitive, whenever the attempt began
	case ps.probing && !probe:
		// Started before the bench: no verdict on the proxy now.
	case o == Success || o == PushedBack:
		ps.fails = 0
		delete(s.bans, int32(p))
		if ps.streak < StreakToForgive { // capped: an int32 of a long run's successes would wrap
			ps.streak++
		}
		if ps.streak >= StreakToForgive {
			ps.level = 0
		}
		if ps.probing {
			ps.probing, ps.probeOut = false, false
			s.healthy(now)
			// Back to a full load, but not a flood: under least-used its
			// count starts level with the least used of the others.
			if lo, ok := s.leastUsed(p); ok && lo > ps.used {
				ps.used = lo
			}
			s.event(p, now, "healthy", 0)
		}
	case o == ProxyFault:
		ps.streak = 0
		if s.health.MaxFailures <= 0 {
			break // never benched: nothing to count (a count would grow without end)
		}
		ps.fails++
		if ps.probing || int(ps.fails) >= s.health.MaxFailures {
			s.bench(p, now)
		}
	case o == Banned && s.banned(p, host) && s.health.MaxFailures > 0:
		ps.streak = 0
		s.bench(p, now)
	default: // a probe with no verdict (a ban among them): another may go
		ps.probeOut = false
	}
}

// bench benches proxy p (again, when it is probing) for its next cooldown.
// Call with s.mu held.
func (s *Local) bench(p int, now time.Time) {
	ps := &s.proxies[p]
	if !ps.probing {
		s.unhealthy(now)
	}
	d := s.health.Cooldown << min(ps.level, 30)
	if s.health.MaxCooldown > 0 && (d > s.health.MaxCooldown || d <= 0) {
		d = s.health.MaxCooldown
	}
	ps.level++
	ps.fails = 0
	ps.probing, ps.probeOut = true, false
	ps.benched = true
	s.benchedUntil[int32(p)] = now.Add(d)
	s.event(p, now, "benched", d)
}

// unbench forgets when proxy p's bench ends. Call with s.mu held.
func (s *Local) unbench(p int) {
	s.proxies[p].benched = false
	delete(s.benchedUntil, int32(p))
}

// banned notes a ban of proxy p by host and reports whether it makes
// BanHosts distinct hosts in a row (see banStreak). Call with s.mu held.
func (s *Local) banned(p int, host string) bool {
	b := s.bans[int32(p)]
	if b == nil {
		b = &banStreak{}
		s.bans[int32(p)] = b
	}
	row := b.add(host)
	if len(b.hosts) == 0 {
		delete(s.bans, int32(p))
	}
	return row
}

// reject takes proxy p out of the run for good: it refused its
// credentials. Call with s.mu held.
func (s *Local) reject(p int, now time.Time) {
	ps := &s.proxies[p]
	if ps.rejected {
		return
	}
	if !ps.probing {
		s.unhealthy(now)
	}
	ps.rejected = true
	ps.probing, ps.probeOut = false, false
	s.unbench(p)
	s.rejectedN++
	s.event(p, now, "rejected", 0)
	s.recheckBans() // the proxies that could serve a host are fewer
	s.checkPool(now)
}

// unhealthy notes that one more proxy is benched or rejected; when none is
// left healthy, the pool's wait starts. Call with s.mu held.
func (s *Local) unhealthy(now time.Time) {
	if s.healthyN--; s.healthyN == 0 {
		s.unusableSince = now
		if s.health.PoolWait > 0 {
			if s.poolTimer == nil {
				s.poolTimer = s.clock.AfterFunc(s.health.PoolWait, s.onPoolTimer)
			} else {
				s.poolTimer.Reset(s.health.PoolWait)
			}
		}
	}
}

// healthy notes that a proxy is healthy again: the pool's wait is over.
// Call with s.mu held.
func (s *Local) healthy(now time.Time) {
	if s.healthyN++; s.healthyN == 1 {
		s.unusableSince = time.Time{}
		if s.poolTimer != nil {
			s.poolTimer.Stop()
		}
	}
}

func (s *Local) onPoolTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkPool(s.clock.Now())
}

// checkPool ends the run's use of the pool when it cannot serve: every
// proxy rejected, or none healthy for PoolWait. Every waiter and every later
// Acquire gets the *PoolError. Call with s.mu held.
func (s *Local) checkPool(now time.Time) {
	if s.dead != nil || s.healthyN > 0 || len(s.proxies) == 0 {
		return
	}
	pe := s.poolState(now)
	switch {
	case s.rejectedN == len(s.proxies):
		pe.For = 0
	case s.health.PoolWait > 0 && now.Sub(s.unusableSince) >= s.health.PoolWait:
		pe.For = s.health.PoolWait // what it waited, not the timer's lateness
	default:
		return
	}
	s.dead = pe
	for w := s.waiters.head; w != nil; {
		next := w.next
		s.waiters.remove(w)
		w.err = pe
		w.ch <- nil
		w = next
	}
}

// poolState counts the proxies that are not healthy, for errors. Call with
// s.mu held.
func (s *Local) poolState(now time.Time) *PoolError {
	pe := &PoolError{Total: len(s.proxies), Rejected: s.rejectedN, Benched: len(s.proxies) - s.healthyN - s.rejectedN}
	if !s.unusableSince.IsZero() {
		pe.For = now.Sub(s.unusableSince).Round(time.Millisecond)
	}
	return pe
}

// leastUsed returns the fewest attempts of any proxy but p that is not
// benched.
func (s *Local) leastUsed(p int) (int64, bool) {
	var lo int64
	found := false
	for i := range s.proxies {
		q := &s.proxies[i]
		if i == p || q.probing || q.rejected {
			continue
		}
		if !found || q.used < lo {
			lo, found = q.used, true
		}
	}
	return lo, found
}

// event queues a proxy's change of state for Events. Call with s.mu held.
func (s *Local) event(p int, at time.Time, state string, d time.Duration) {
	s.events.Add(HealthEvent{Proxy: p, At: at, State: state, Cooldown: d})
}

// Events implements Scheduler.
func (s *Local) Events(dst []HealthEvent) []HealthEvent { return s.events.Take(dst) }
