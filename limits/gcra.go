package limits

import "time"

// GCRA is a rate limit by the generic cell rate algorithm: the token bucket
// of the --rate, --proxy-rate and --host-rate flags, kept as one time, the
// theoretical arrival time (TAT), instead of a count of tokens. With
// T = Per/N (the emission interval, rounded up to the nanosecond so that the
// rate is never exceeded) and τ = T·Burst, an admission at time a is allowed
// when a ≥ TAT + T − τ, and moves TAT to max(TAT, a) + T. It is the same
// algorithm as the Redis scheduler's scripts (DISTRIBUTED.md 1b).
//
// The bound. For any sequence of admissions at non-decreasing times that
// AllowAt allowed, every half-open window of length W holds at most
// Burst−1+⌈W/T⌉ of them, exactly (a greedy caller reaches it). An idle
// limiter banks no more than Burst admissions: TAT never lags behind the
// time of the last admission.
//
// The times are logical: TakeAt takes the time an admission is charged at,
// which the caller chooses. Local charges an attempt that waited for its
// token at the moment the token came due (AllowAt), not at the later moment
// its timer fired, so that timer lateness is not lost and does not add up
// over a run: starts follow the schedule TAT, TAT+T, TAT+2T... and the real
// start times deviate from their logical ones only by the lateness of one
// timer. A caller that charges at the real time of each admission (TakeAt
// with now) gets the plain GCRA.
//
// The zero GCRA is unlimited: it allows everything and TakeAt does nothing.
// A GCRA is not safe for concurrent use; Local guards its own with its lock.
type GCRA struct {
	t   time.Duration // emission interval; 0: unlimited
	tau time.Duration // t × burst
	tat time.Time     // theoretical arrival time; zero: a full bucket
}

// NewGCRA returns the rate limit of r with a burst of burst (at least 1).
// The zero Rate gives an unlimited GCRA.
func NewGCRA(r Rate, burst int) GCRA {
	if r.IsZero() {
		return GCRA{}
	}
	// Per/N in nanoseconds, rounded up: at most 1e9/s passes ParseRate, so
	// T is at least 1ns.
	t := time.Duration(float64(r.Per) / r.N)
	if float64(t)*r.N < float64(r.Per) {
		t++
	}
	t = max(t, 1)
	return GCRA{t: t, tau: t * time.Duration(max(burst, 1))}
}

// Limited reports whether g limits anything.
func (g *GCRA) Limited() bool { return g.t > 0 }

// Interval returns T, the time between admissions at the steady rate; 0
// for an unlimited GCRA.
func (g *GCRA) Interval() time.Duration { return g.t }

// AllowAt returns the earliest time at which an admission is allowed, given
// the admissions so far: TAT + T − τ. It may be long before now; it is the
// zero time for an unlimited or full limiter.
func (g *GCRA) AllowAt() time.Time {
	if g.t == 0 || g.tat.IsZero() {
		return time.Time{}
	}
	return g.tat.Add(g.t - g.tau)
}

// WaitAt returns how long after now an admission will be allowed: 0 when
// it is allowed at now.
func (g *GCRA) WaitAt(now time.Time) time.Duration {
	if at := g.AllowAt(); at.After(now) {
		return at.Sub(now)
	}
	return 0
}

// TakeAt charges an admission at time at. The caller checks first that
// it is allowed (at is not before AllowAt); TakeAt does not check. Admissions
// should be charged at non-decreasing times for the bound to hold.
func (g *GCRA) TakeAt(at time.Time) {
	if g.t == 0 {
		return
	}
	if g.tat.Before(at) {
		g.tat = at
	}
	g.tat = g.tat.Add(g.t)
}

// ChargeAt returns the time an admission is charged at when it is made at
// now by a scheduler whose logical time is due (due ≤ now): the moment it
// became allowed, but not before due. An admission allowed before due is
// charged at due, so an idle limiter banks at most now − due of tokens.
func (g *GCRA) ChargeAt(due time.Time) time.Time {
	if at := g.AllowAt(); at.After(due) {
		return at
	}
	return due
}

// FullAt reports whether the bucket is full at now: nothing that a new
// GCRA would not say.
func (g *GCRA) FullAt(now time.Time) bool { return g.t == 0 || !g.tat.After(now) }
