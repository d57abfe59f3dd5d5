package limits

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Local is the in-process Scheduler. Waiting attempts are served first come,
// first served, except that an attempt whose host is at its limit never
// holds up attempts for other hosts.
type Local struct {
	clock  Clock
	policy Policy
	host   Spec
	global *rate.Limiter // nil: unlimited

	mu       sync.Mutex
	proxies  []proxyState
	budgets  []budgetState
	hosts    map[string]*hostState
	waiters  waitList
	timer    Timer // wakes dispatch when a rate token comes due
	timerAt  time.Time
	rr       int
	rng      *rand.Rand
	closed   bool
	attempts int64

	healthyN      int        // proxies neither benched, probing nor rejected
	rejectedN     int        // proxies rejected
	unusableSince time.Time  // since when healthyN has been 0; zero while it is not
	poolTimer     Timer      // fires when the pool has waited Health.PoolWait
	dead          *PoolError // set once the pool cannot serve

	health   Health
	pushback Pushback
	events   Events // not yet taken by Events
	pairs    map[pairKey]*pairState
	draining bool  // no request will come but those waiting or in flight
	members  []int // proxies per budget
	roomy    int   // budgets with a free concurrency slot
}

var _ Scheduler = (*Local)(nil)

type proxyState struct {
	budget   int
	inFlight int
	used     int64 // attempts granted so far

	fails        int       // consecutive ProxyFault outcomes
	streak       int       // consecutive successes
	level        int       // benchings since the last long streak: the cooldown doubles with each
	benchedUntil time.Time // zero unless benched
	probing      bool      // after a bench: one attempt at a time until one succeeds
	probeOut     bool      // the probe is in flight
	rejected     bool      // refused its credentials: out of the run for good
	bans         banStreak // the hosts that banned it in a row (see health.go)

	est time.Duration // moving average of how long a successful attempt holds its lease
}

type budgetState struct {
	capacity int // 0: unlimited
	inFlight int
	limiter  *rate.Limiter // nil: unlimited
}

// nominal is the budget's capacity, or for an unlimited budget the nominal
// capacity of 1000 that its attempts in flight are counted against when it is
// compared with limited ones.
func (b *budgetState) nominal() int {
	if b.capacity <= 0 {
		return 1000
	}
	return b.capacity
}

type hostState struct {
	inFlight int
	limiter  *rate.Limiter // nil: unlimited
}

// idle reports whether h says nothing that a new state would not: nothing in
// flight and a full token bucket.
func (h *hostState) idle(now time.Time) bool {
	return h.inFlight == 0 && (h.limiter == nil || h.limiter.TokensAt(now) >= float64(h.limiter.Burst()))
}

// NewLocal returns an in-process scheduler for cfg. It panics if BudgetOf
// names a budget that does not exist: that is a programming error.
func NewLocal(cfg Config) *Local {
	s := &Local{
		clock:    cfg.Clock,
		policy:   cfg.Policy,
		host:     cfg.Host,
		hosts:    make(map[string]*hostState),
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		health:   cfg.Health,
		pushback: cfg.Pushback,
		pairs:    make(map[pairKey]*pairState),
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	if !cfg.Global.IsZero() {
		s.global = rate.NewLimiter(cfg.Global.Limit(), 1)
	}
	s.budgets = make([]budgetState, len(cfg.Budgets))
	for i, b := range cfg.Budgets {
		s.budgets[i] = budgetState{capacity: b.Concurrency, limiter: newLimiter(b)}
	}
	s.roomy = len(s.budgets)
	s.proxies = make([]proxyState, len(cfg.BudgetOf))
	s.healthyN = len(s.proxies)
	s.members = make([]int, len(s.budgets))
	for i, b := range cfg.BudgetOf {
		if b < 0 || b >= len(s.budgets) {
			panic(fmt.Sprintf("limits: proxy %d has budget %d of %d", i, b, len(s.budgets)))
		}
		s.proxies[i].budget = b
		s.members[b]++
	}
	return s
}

func newLimiter(sp Spec) *rate.Limiter {
	if sp.Rate.IsZero() {
		return nil
	}
	return rate.NewLimiter(sp.Rate.Limit(), max(sp.Burst, 1))
}

// Acquire implements Scheduler.
func (s *Local) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.dead != nil {
		s.mu.Unlock()
		return nil, s.dead
	}
	if s.waiters.head == nil {
		if l, _ := s.tryGrant(req, s.clock.Now(), 0); l != nil {
			s.mu.Unlock()
			return l, nil
		}
	}
	w := &waiter{req: req, ch: make(chan *Lease, 1)}
	s.waiters.push(w)
	s.dispatch()
	s.mu.Unlock()

	select {
	case l := <-w.ch:
		if l == nil {
			if w.err != nil {
				return nil, w.err
			}
			return nil, ErrClosed
		}
		return l, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.waiters.remove(w)
		var pool *PoolError
		if s.healthyN == 0 && len(s.proxies) > 0 {
			pool = s.poolState(s.clock.Now())
		}
		s.mu.Unlock()
		// A grant may have raced with the cancellation: give it back.
		select {
		case l := <-w.ch:
			l.Release()
		default:
		}
		if pool != nil {
			return nil, &WaitError{Err: ctx.Err(), Pool: *pool}
		}
		return nil, ctx.Err()
	}
}

// Close wakes every waiter with ErrClosed and stops the timer. Leases
// already granted stay valid and may still be released. It always returns
// nil.
func (s *Local) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for w := s.waiters.head; w != nil; {
		next := w.next
		s.waiters.remove(w)
		w.ch <- nil
		w = next
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.poolTimer != nil {
		s.poolTimer.Stop()
	}
	return nil
}

// dispatch grants leases to waiters in order while it can, and arms the
// timer for the soonest moment a rate-limited waiter could start. Call with
// s.mu held.
func (s *Local) dispatch() {
	if s.closed {
		return
	}
	now := s.clock.Now()
	var wake time.Duration = -1
	ahead := 0
	for w := s.waiters.head; w != nil && s.roomy > 0; {
		next := w.next
		l, wait := s.tryGrant(w.req, now, ahead)
		if l != nil {
			s.waiters.remove(w)
			w.ch <- l
		} else {
			ahead++
			if wait > 0 && (wake < 0 || wait < wake) {
				wake = wait
			}
		}
		w = next
	}
	s.armTimer(now, wake)
}

func (s *Local) armTimer(now time.Time, wait time.Duration) {
	if wait < 0 {
		return
	}
	at := now.Add(wait)
	if s.timer != nil && !s.timerAt.IsZero() && !s.timerAt.After(at) && s.timerAt.After(now) {
		return // an earlier or equal wake-up is already armed
	}
	s.timerAt = at
	if s.timer == nil {
		s.timer = s.clock.AfterFunc(wait, s.onTimer)
	} else {
		s.timer.Reset(wait)
	}
}

func (s *Local) onTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timerAt = time.Time{}
	s.dispatch()
}

// tryGrant takes a lease for req now if every limit allows it. Otherwise it
// returns how long until a rate token could allow it, or -1 when only a
// release can. ahead is how many requests wait before this one. Call with
// s.mu held.
func (s *Local) tryGrant(req Request, now time.Time, ahead int) (*Lease, time.Duration) {
	h := s.hosts[req.Host]
	if h != nil && s.host.Concurrency > 0 && h.inFlight >= s.host.Concurrency {
		return nil, -1
	}
	var wait time.Duration
	if h != nil { // a host not seen yet starts with a full bucket
		wait = max(wait, tokenWait(h.limiter, now))
	}
	wait = max(wait, tokenWait(s.global, now))

	if s.roomy == 0 {
		return nil, -1
	}
	p, pwait := s.pick(req, now, ahead)
	if p < 0 {
		if pwait < 0 {
			return nil, -1
		}
		return nil, max(wait, pwait)
	}
	if wait > 0 {
		return nil, wait
	}

	// Every limit allows it: take the lot.
	if h == nil {
		h = &hostState{limiter: newLimiter(s.host)}
		s.hosts[req.Host] = h
	}
	takeToken(h.limiter, now)
	takeToken(s.global, now)
	ps := &s.proxies[p]
	b := &s.budgets[ps.budget]
	takeToken(b.limiter, now)
	b.inFlight++
	if b.inFlight == b.capacity {
		s.roomy--
	}
	ps.inFlight++
	ps.used++
	h.inFlight++
	s.attempts++
	probe := ps.probing && !ps.probeOut
	if probe {
		ps.probeOut = true
		if !ps.benchedUntil.IsZero() {
			ps.benchedUntil = time.Time{}
			s.event(p, now, "probing", 0)
		}
	}
	if s.attempts%sweepEvery == 0 {
		s.sweep(now)
	}
	pr := s.pairs[pairKey{p, req.Host}]
	if pr != nil {
		pr.next = now.Add(pr.spacing)
		pr.inFlight++
	}
	l := &Lease{Proxy: p, Budget: ps.budget, ProxyInFlight: ps.inFlight, HostInFlight: h.inFlight}
	host := req.Host
	l.release = func(o Outcome) { s.release(p, host, o, now, probe, pr) }
	switch s.policy {
	case RoundRobin:
		s.rr = p + 1
	}
	return l, 0
}

func (s *Local) release(p int, host string, o Outcome, granted time.Time, probe bool, pr *pairState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := &s.proxies[p]
	now := s.clock.Now()
	if pr != nil {
		pr.inFlight-- // even when pr has been forgotten since: it is then unused
	}
	s.learnHealth(p, host, o, now, probe)
	s.learnPushback(p, host, o, now, granted)
	if o == Success {
		if d := now.Sub(granted); ps.est == 0 {
			ps.est = d
		} else {
			ps.est += (d - ps.est) / 5
		}
	}
	ps.inFlight--
	b := &s.budgets[ps.budget]
	if b.inFlight == b.capacity {
		s.roomy++
	}
	b.inFlight--
	if h := s.hosts[host]; h != nil {
		h.inFlight--
		if h.idle(now) {
			delete(s.hosts, host) // a new state is the same
		}
	}
	s.dispatch()
}

// sweep forgets state that says nothing any more, so that memory does not
// grow with the number of hosts seen: idle hosts whose token bucket is full
// again, and proxy-host pairs left alone for longer than the widest
// pushback. Call with s.mu held.
func (s *Local) sweep(now time.Time) {
	for host, h := range s.hosts {
		if h.idle(now) {
			delete(s.hosts, host)
		}
	}
	s.sweepPairs(now)
}

// sweepEvery is how many grants pass between sweeps: a sweep costs as much
// as the maps are large, so it is done rarely enough to be cheap per grant.
const sweepEvery = 4096

// Tracked returns how many hosts and proxy-host pairs the scheduler keeps
// state for: for diagnostics, and for tests that memory does not grow with
// the number of hosts.
func (s *Local) Tracked() (hosts, pairs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hosts), len(s.pairs)
}

// tokenWait is how long until lim has a whole token; 0 when it has one now
// or lim is nil (unlimited).
func tokenWait(lim *rate.Limiter, now time.Time) time.Duration {
	if lim == nil {
		return 0
	}
	t := lim.TokensAt(now)
	if t >= 1 {
		return 0
	}
	secs := (1 - t) / float64(lim.Limit())
	d := time.Duration(math.Ceil(secs * float64(time.Second)))
	return max(d, time.Microsecond)
}

func takeToken(lim *rate.Limiter, now time.Time) {
	if lim != nil {
		lim.AllowN(now, 1)
	}
}
