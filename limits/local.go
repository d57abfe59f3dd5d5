package limits

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Policy breaks ties between proxies that can all start an attempt now.
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

// ParsePolicy reads a policy name as the --policy flag spells it.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "", "least-inflight":
		return LeastInFlight, nil
	case "least-used":
		return LeastUsed, nil
	case "round-robin":
		return RoundRobin, nil
	case "random":
		return Random, nil
	}
	return 0, fmt.Errorf("limits: unknown policy %q (want least-inflight, least-used, round-robin or random)", s)
}

// Config configures a Local scheduler.
type Config struct {
	Budgets  []Spec // one per proxy or pool
	BudgetOf []int  // for each proxy, the index of its budget; its length is the number of proxies
	Host     Spec   // per target host:port
	Global   Rate   // all attempts together, burst 1
	Policy   Policy

	// Now returns the current time; nil means time.Now. Tests pass a fake.
	Now func() time.Time
}

// Local is the in-process Scheduler. Waiting attempts are served first come,
// first served, except that an attempt whose host is at its limit never
// holds up attempts for other hosts.
type Local struct {
	now    func() time.Time
	policy Policy
	host   Spec
	global *rate.Limiter // nil: unlimited

	mu       sync.Mutex
	proxies  []proxyState
	budgets  []budgetState
	hosts    map[string]*hostState
	waiters  waitList
	timer    *time.Timer // wakes dispatch when a rate token comes due
	timerAt  time.Time
	rr       int
	rng      *rand.Rand
	closed   bool
	attempts int64
}

var _ Scheduler = (*Local)(nil)

type proxyState struct {
	budget   int
	inFlight int
	used     int64 // attempts granted so far
}

type budgetState struct {
	capacity int // 0: unlimited
	inFlight int
	limiter  *rate.Limiter // nil: unlimited
}

type hostState struct {
	inFlight int
	limiter  *rate.Limiter
}

type waiter struct {
	req   Request
	ch    chan *Lease // buffered 1: the grant
	prev  *waiter
	next  *waiter
	added bool
}

// waitList is an intrusive FIFO list of waiters.
type waitList struct{ head, tail *waiter }

func (l *waitList) push(w *waiter) {
	w.added = true
	w.prev = l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
}

func (l *waitList) remove(w *waiter) {
	if !w.added {
		return
	}
	w.added = false
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
}

// NewLocal returns an in-process scheduler for cfg. It panics if BudgetOf
// names a budget that does not exist: that is a programming error.
func NewLocal(cfg Config) *Local {
	s := &Local{
		now:    cfg.Now,
		policy: cfg.Policy,
		host:   cfg.Host,
		hosts:  make(map[string]*hostState),
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if !cfg.Global.IsZero() {
		s.global = rate.NewLimiter(cfg.Global.Limit(), 1)
	}
	s.budgets = make([]budgetState, len(cfg.Budgets))
	for i, b := range cfg.Budgets {
		s.budgets[i] = budgetState{capacity: b.Concurrency, limiter: newLimiter(b)}
	}
	s.proxies = make([]proxyState, len(cfg.BudgetOf))
	for i, b := range cfg.BudgetOf {
		if b < 0 || b >= len(s.budgets) {
			panic(fmt.Sprintf("limits: proxy %d has budget %d of %d", i, b, len(s.budgets)))
		}
		s.proxies[i].budget = b
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
	if s.waiters.head == nil {
		if l, _ := s.tryGrant(req, s.now()); l != nil {
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
			return nil, ErrClosed
		}
		return l, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.waiters.remove(w)
		s.mu.Unlock()
		// A grant may have raced with the cancellation: give it back.
		select {
		case l := <-w.ch:
			l.Release()
		default:
		}
		return nil, ctx.Err()
	}
}

// Close wakes every waiter with ErrClosed and stops the timer. Leases
// already granted stay valid and may still be released.
func (s *Local) Close() {
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
}

// dispatch grants leases to waiters in order while it can, and arms the
// timer for the soonest moment a rate-limited waiter could start. Call with
// s.mu held.
func (s *Local) dispatch() {
	if s.closed {
		return
	}
	now := s.now()
	var wake time.Duration = -1
	for w := s.waiters.head; w != nil; {
		next := w.next
		l, wait := s.tryGrant(w.req, now)
		if l != nil {
			s.waiters.remove(w)
			w.ch <- l
		} else if wait > 0 && (wake < 0 || wait < wake) {
			wake = wait
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
		s.timer = time.AfterFunc(wait, s.onTimer)
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
// release can. Call with s.mu held.
func (s *Local) tryGrant(req Request, now time.Time) (*Lease, time.Duration) {
	h := s.hosts[req.Host]
	if h != nil && s.host.Concurrency > 0 && h.inFlight >= s.host.Concurrency {
		return nil, -1
	}
	var wait time.Duration
	if h != nil { // a host not seen yet starts with a full bucket
		wait = max(wait, tokenWait(h.limiter, now))
	}
	wait = max(wait, tokenWait(s.global, now))

	p, pwait := s.pick(req, now)
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
	ps.inFlight++
	ps.used++
	h.inFlight++
	s.attempts++
	l := &Lease{Proxy: p, Budget: ps.budget, ProxyInFlight: ps.inFlight, HostInFlight: h.inFlight}
	host := req.Host
	l.release = func() { s.release(p, host) }
	switch s.policy {
	case RoundRobin:
		s.rr = p + 1
	}
	return l, 0
}

func (s *Local) release(p int, host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := &s.proxies[p]
	ps.inFlight--
	s.budgets[ps.budget].inFlight--
	if h := s.hosts[host]; h != nil {
		h.inFlight--
		if h.inFlight == 0 && (h.limiter == nil || h.limiter.TokensAt(s.now()) >= float64(h.limiter.Burst())) {
			delete(s.hosts, host) // idle and its bucket is full: a new state is the same
		}
	}
	s.dispatch()
}

// pick chooses the proxy for req among those that can start now, or returns
// -1 and how long until one could (-1: only after a release). Proxies in
// req.Avoid are chosen only when no other can start now.
func (s *Local) pick(req Request, now time.Time) (int, time.Duration) {
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
		if w := tokenWait(b.limiter, now); w > 0 {
			if soonest < 0 || w < soonest {
				soonest = w
			}
			continue
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

// load is how full proxy i's budget is, from 0; an unlimited budget counts
// its in-flight attempts against a nominal capacity of 1000.
func (s *Local) load(i int) float64 {
	b := &s.budgets[s.proxies[i].budget]
	c := b.capacity
	if c <= 0 {
		c = 1000
	}
	return float64(b.inFlight) / float64(c)
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
