// Package limits decides when an attempt may start and through which proxy.
//
// A Scheduler hands out a Lease: the choice of a proxy together with that
// proxy's (or pool's) concurrency permit, its rate token, the target host's
// permit and token, and the global token, all taken in one step. Taking them
// in one step is what lets a job go to whichever proxy can start it soonest
// instead of waiting behind one busy proxy, and it is what a shared (Redis)
// implementation must do atomically too.
//
// A Lease is held from the start of the attempt until its response body has
// been read to the end or closed; Release gives everything back and may be
// called any number of times.
package limits

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
)

// Scheduler grants leases. Implementations are safe for concurrent use.
//
// Its life: Acquire and Finish leases while the run goes, Drain once the
// input has run out, take Events after each Finish and once at the end, and
// Close when the run is over.
type Scheduler interface {
	// Acquire blocks until an attempt for req may start and returns its
	// lease. If ctx is done first it returns an error wrapping ctx.Err()
	// and takes nothing.
	Acquire(ctx context.Context, req Request) (*Lease, error)

	// Drain tells the scheduler that no request will come but those
	// already waiting or in flight, so that it may plan the end of the run.
	Drain()

	// Events appends to dst the proxies' changes of state since the last
	// call, oldest first, and returns the extended slice. It never blocks
	// on a lease and is cheap when there is nothing new, so callers may
	// call it after every Finish.
	Events(dst []HealthEvent) []HealthEvent

	// Close wakes every waiting Acquire with ErrClosed and stops the
	// scheduler's timers and background work. Leases already granted stay
	// valid and may still be finished.
	Close() error
}

// Config configures a Local scheduler.
type Config struct {
	Budgets  []Spec // one per proxy or pool
	BudgetOf []int  // for each proxy, the index of its budget; its length is the number of proxies

	// ProxyIDs and BudgetNames name each proxy and each budget by the
	// identity records use: the proxy's identity, and the pool name (or, for
	// a budget of one proxy's own, that proxy's identity). Indexes stay the
	// in-process handle; an implementation that keeps state outside the
	// process keys it by these names. Either may be nil for Local.
	ProxyIDs    []string
	BudgetNames []string
	Host        Spec // per target host:port
	Global      Rate // all attempts together, burst 1
	Policy      Policy
	Health      Health   // benching of failing proxies; the zero value never benches
	Pushback    Pushback // slowing of proxy-host pairs the target pushes back on; the zero value never slows

	// Clock tells the time and wakes waiting attempts; nil means the
	// real clock. Tests pass a fake one (limits.FakeClock in export_test.go).
	Clock clock.Clock
}

// Request describes the attempt that wants to start.
type Request struct {
	Host  string // target host:port, for the per-host limits
	Avoid []int  // proxies already tried for this URL: used only when no other can start

	// Stop, when closed, ends the wait for a grant as if its context were
	// cancelled (the error is context.Canceled): the caller stops admitting
	// work, while the context, which also bounds the work a grant starts,
	// goes on. Nil never stops.
	Stop <-chan struct{}
}

// stopped reports whether r.Stop is closed.
func (r Request) stopped() bool {
	select {
	case <-r.Stop:
		return true
	default:
		return false
	}
}

// Lease is one granted attempt. Leases come from a Scheduler; other
// Scheduler implementations build them with NewLease.
type Lease struct {
	Proxy  int // index of the proxy in the scheduler's configuration
	Budget int // index of the proxy's budget (its own, or its pool's)

	// In flight at the moment of the grant, this attempt included: for the
	// proxy, and for the target host. Reports take their maxima from these.
	ProxyInFlight int
	HostInFlight  int

	// Lost is closed when a shared scheduler loses the lease before Finish
	// (its coordinator expired it, or it could not be renewed in time): the
	// attempt no longer holds its permits and must be cancelled. Nil (never
	// closed) for Local and for leases built by NewLease.
	Lost <-chan struct{}

	// RetryAfter is the target's Retry-After on an attempt whose outcome is
	// PushedBack, set by the holder before Finish; 0 for none. Two or more
	// through distinct proxies within RetryAfterWindow make the host wait
	// for every proxy (see Pushback.RetryAfterMax).
	RetryAfter time.Duration

	once    sync.Once
	release func(Outcome) // NewLease's
	local   localGrant    // Local's, instead of a closure per lease
}

// NewLease returns a lease on proxy whose Finish calls release once.
func NewLease(proxy, budget int, release func(Outcome)) *Lease {
	return &Lease{Proxy: proxy, Budget: budget, release: release}
}

// Outcome is what an attempt taught about its proxy and target, reported
// when its lease is given back.
type Outcome int

const (
	// Neutral: nothing learnt (an interrupt, the URL's own deadline, a
	// failure that cannot be laid at the proxy's door).
	Neutral Outcome = iota
	// Success: the proxy carried the attempt and the target answered.
	Success
	// ProxyFault: a failure the proxy is to blame for (connect, handshake,
	// reset, the proxy refusing the request). Repeated, it benches the proxy.
	ProxyFault
	// PushedBack: the target answered 429 or 503 through this proxy. The
	// proxy worked, but this proxy-host pair should slow down (see
	// Pushback).
	PushedBack
	// Rejected: the proxy refused its credentials (407, 401 to CONNECT, a
	// SOCKS5 authentication failure). It leaves the run at once, for good.
	Rejected
	// Banned: the target answered through this proxy with a ban (a
	// --ban-status or --ban-match response). The proxy-host pair slows
	// down as on PushedBack; the proxy is benched, as on MaxFailures
	// faults, only when BanHosts distinct hosts in a row have banned it
	// (see Health).
	Banned
)

// Finish gives back the permits the lease holds and reports the attempt's
// outcome. Only the first call of Finish or Release has an effect, so it is
// safe to defer Release and also Finish early.
func (l *Lease) Finish(o Outcome) {
	if l == nil {
		return
	}
	l.once.Do(func() {
		switch g := &l.local; {
		case l.release != nil:
			l.release(o)
		case g.s != nil:
			g.s.release(l.Proxy, g.host, o, g.granted, g.probe, g.pair, l.RetryAfter)
		}
	})
}

// Release is shorthand for Finish(Neutral).
func (l *Lease) Release() { l.Finish(Neutral) }

// ErrClosed is returned by Acquire on a scheduler that was closed.
var ErrClosed = errors.New("limits: scheduler closed")

// ErrCoordinator is wrapped by the errors of a shared scheduler whose
// coordinator (Redis) could not be reached or refused the run: an Acquire
// whose ctx ended while the coordinator was unreachable returns an error
// wrapping both ErrCoordinator and ctx.Err().
var ErrCoordinator = errors.New("limits: coordinator unavailable")

// ErrCoordinatorDown is wrapped, with ErrCoordinator, by the error of
// Acquire once a shared scheduler's coordinator has been unreachable for
// Health.PoolWait: from then on Acquire fails at once, and the run stops as
// for a pool that cannot serve. Its message starts "coordinator
// unreachable".
var ErrCoordinatorDown = errors.New("coordinator unreachable")

// Spec is one concurrency and rate budget. Zero Concurrency means no
// concurrency limit; the zero Rate means no rate limit. Burst is the token
// bucket's size (at least 1).
type Spec struct {
	Concurrency int
	Rate        Rate
	Burst       int
}
