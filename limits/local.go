package limits

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
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
	Throttle    Throttle // slowing of proxy-host pairs the target pushes back on; the zero value never slows

	// Now returns the current time; nil means time.Now. Tests pass a fake.
	Now func() time.Time
}

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

// Throttle configures the slowing of a proxy-host pair after the target
// answers 429 or 503 through it, in the spirit of Scrapy's AutoThrottle and
// of TCP's congestion window. The first pushback caps the pair's attempts in
// flight at half of what the proxy had in flight; each further pushback
// halves that window again, and once it is down to one, spaces the pair's
// attempt starts Base apart, doubling up to Max. Each success of an attempt
// begun after the last pushback undoes one step: it halves the spacing
// (gone below Base/4), then widens the window by one; a window as wide as
// the proxy's attempts in flight at the first pushback means the pair is
// back to full speed. Other proxies and
// other hosts are not affected.
type Throttle struct {
	Base time.Duration // 0: never slow down
	Max  time.Duration
}

// HealthEvent is a proxy's change of state.
type HealthEvent struct {
	Proxy    int
	At       time.Time
	State    string        // "benched", "probing" or "healthy"
	Cooldown time.Duration // for "benched": how long
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

	health   Health
	throttle Throttle
	events   []HealthEvent // not yet taken by Events
	pending  atomic.Int32  // len(events), read without the lock
	pairs    map[pairKey]*pairState
	draining bool  // no request will come but those waiting or in flight
	members  []int // proxies per budget
	roomy    int   // budgets with a free concurrency slot
}

// pairKey names a proxy-host pair slowed by pushback.
type pairKey struct {
	proxy int
	host  string
}

type pairState struct {
	window   int           // attempts in flight allowed; at least 1
	full     int           // the proxy's attempts in flight when first pushed back: the window to get back to
	inFlight int           // attempts in flight granted since the pair was slowed
	spacing  time.Duration // between attempt starts, once window is 1
	next     time.Time     // earliest next start
	pushedAt time.Time     // the last pushback that counted
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

	est time.Duration // moving average of how long a successful attempt holds its lease
}

const streakToForgive = 10

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
		now:      cfg.Now,
		policy:   cfg.Policy,
		host:     cfg.Host,
		hosts:    make(map[string]*hostState),
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		health:   cfg.Health,
		throttle: cfg.Throttle,
		pairs:    make(map[pairKey]*pairState),
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
	s.roomy = len(s.budgets)
	s.proxies = make([]proxyState, len(cfg.BudgetOf))
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
	if s.waiters.head == nil {
		if l, _ := s.tryGrant(req, s.now(), 0); l != nil {
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
	return nil
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
	now := s.now()
	if pr != nil {
		pr.inFlight-- // even when pr has been forgotten since: it is then unused
	}
	s.learn(p, host, o, now, granted, probe)
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
		if h.inFlight == 0 && (h.limiter == nil || h.limiter.TokensAt(s.now()) >= float64(h.limiter.Burst())) {
			delete(s.hosts, host) // idle and its bucket is full: a new state is the same
		}
	}
	s.dispatch()
}

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
		if ps.probing && ps.probeOut {
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

// learn updates proxy health and pair pushback from the outcome of an
// attempt granted at granted; probe says whether it was the one attempt a
// probing proxy was allowed. Outcomes of attempts that began before the last
// change of state (a bench, a pushback) are old news and change nothing of
// it: otherwise the attempts in flight when a proxy is benched would each
// count as a failed probe, and those in flight at a pushback would each
// double it or, succeeding, undo it. Call with s.mu held.
func (s *Local) learn(p int, host string, o Outcome, now, granted time.Time, probe bool) {
	ps := &s.proxies[p]
	switch {
	case ps.probing && !probe:
		// Started before the bench: no verdict on the proxy now.
	case o == Success || o == Pushback:
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
	if s.throttle.Base <= 0 {
		return
	}
	k := pairKey{p, host}
	pr := s.pairs[k]
	fresh := pr == nil || granted.After(pr.pushedAt)
	switch {
	case o == Pushback && fresh:
		if pr == nil {
			// The proxy's attempts in flight, this one included, stand in
			// for the pair's: the window starts at half of them.
			pr = &pairState{window: max(ps.inFlight/2, 1), full: max(ps.inFlight, 2)}
			s.pairs[k] = pr
		} else if pr.window > 1 {
			pr.window = max(pr.window/2, 1)
		} else {
			pr.spacing = max(pr.spacing*2, s.throttle.Base)
			if s.throttle.Max > 0 {
				pr.spacing = min(pr.spacing, s.throttle.Max)
			}
		}
		pr.pushedAt = now
		pr.next = now.Add(pr.spacing)
	case o == Success && pr != nil && fresh:
		if pr.spacing > 0 {
			if pr.spacing /= 2; pr.spacing < s.throttle.Base/4 {
				pr.spacing = 0
			}
			break
		}
		if pr.window++; pr.window >= pr.full {
			delete(s.pairs, k)
		}
	}
}

// sweep forgets state that says nothing any more, so that memory does not
// grow with the number of hosts seen: idle hosts whose token bucket is full
// again, and proxy-host pairs left alone for longer than the widest
// pushback. Call with s.mu held.
func (s *Local) sweep(now time.Time) {
	for host, h := range s.hosts {
		if h.inFlight == 0 && (h.limiter == nil || h.limiter.TokensAt(now) >= float64(h.limiter.Burst())) {
			delete(s.hosts, host)
		}
	}
	forget := max(s.throttle.Max, s.throttle.Base)
	for k, pr := range s.pairs {
		if pr.inFlight <= 0 && now.Sub(pr.next) > forget {
			delete(s.pairs, k)
		}
	}
}

// sweepEvery is how many grants pass between sweeps: a sweep costs as much
// as the maps are large, so it is done rarely enough to be cheap per grant.
const sweepEvery = 4096

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

// Drain tells the scheduler that no request will come but those already
// waiting or in flight: the input has run out. From then on a waiting
// request is held back from a slow proxy that could start it now when the
// faster proxies, at the pace they have shown, would finish it and every
// request ahead of it sooner than the slow one would. Without this the last
// requests of a run go to whichever proxy is free, and the slowest proxy's
// latency is added to the end of the run.
func (s *Local) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.draining = true
	s.dispatch()
}

// holdBack reports whether proxy i should not take a request with ahead
// requests before it, because the proxies faster than i would finish it
// sooner. Call with s.mu held.
func (s *Local) holdBack(i, ahead int, now time.Time) bool {
	est := s.proxies[i].est
	if est <= 0 {
		return false
	}
	var rate float64 // requests per second the faster proxies carry
	fastest := est
	for q := range s.proxies {
		qs := &s.proxies[q]
		if q == i || qs.est <= 0 || qs.est >= est || qs.probing || qs.benchedUntil.After(now) {
			continue
		}
		c := s.budgets[qs.budget].capacity
		if c <= 0 {
			c = 1000
		}
		rate += float64(c) / float64(s.members[qs.budget]) / qs.est.Seconds()
		fastest = min(fastest, qs.est)
	}
	if rate == 0 {
		return false
	}
	wait := float64(ahead+1)/rate + fastest.Seconds()
	return wait < est.Seconds()
}

// Tracked returns how many hosts and proxy-host pairs the scheduler keeps
// state for: for diagnostics, and for tests that memory does not grow with
// the number of hosts.
func (s *Local) Tracked() (hosts, pairs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.hosts), len(s.pairs)
}
