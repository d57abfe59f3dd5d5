package limits

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/clock"
)

// Local is the in-process Scheduler. Waiting attempts are served first come,
// first served, except that an attempt whose host is at its limit never
// holds up attempts for other hosts.
//
// Rates. Each rate limit (global, per budget, per host) is a GCRA with
// interval T = period/N. Local charges a grant at its logical time: the
// time the timer that woke it was due, when that timer is late, and
// otherwise the time of the grant (see logical). On that logical clock the
// grants of each limit meet its bound exactly: at most burst−1+⌈W/T⌉ in any
// half-open window of length W. The real start times trail their logical
// ones by the lateness of the one timer that woke them, never by lateness
// added up over a run, so the long-run rate is the rate configured.
//
// Cost. Choosing a proxy costs O(log P) in the number of proxies (see
// index.go), and so does a release, but for the release that ends a
// proxy's probing, which scans the others once for the least used
// (leastUsed); a dispatch looks at each waiting attempt once.
type Local struct {
	clock  clock.Clock
	policy Policy
	host   Spec
	global GCRA // burst 1

	mu       sync.Mutex
	proxies  []proxyState
	budgets  []budgetState
	hosts    map[string]*hostState
	waiters  waitList
	timer    clock.Timer // wakes dispatch when a rate token comes due
	timerAt  time.Time
	due      time.Time // the logical time of the last dispatch (see logical)
	rng      *rand.Rand
	closed   bool
	attempts int64

	healthyN      int         // proxies neither benched, probing nor rejected
	rejectedN     int         // proxies rejected
	unusableSince time.Time   // since when healthyN has been 0; zero while it is not
	poolTimer     clock.Timer // fires when the pool has waited Health.PoolWait
	dead          *PoolError  // set once the pool cannot serve

	health       Health
	benchedUntil map[int32]time.Time  // the benched proxies' ends of bench
	bans         map[int32]*banStreak // the proxies banned by hosts in a row
	pushback     Pushback
	events       Events // not yet taken by Events
	pairs        map[pairKey]*pairState
	draining     bool // no request will come but those waiting or in flight

	// Hosts as a whole (see hostwait.go): the proxies each host banned with
	// no success since, the hosts that banned every proxy, recent
	// Retry-After answers and the hosts that wait for one.
	hostBans  map[string]map[int32]time.Time // by host, the proxies it banned and when
	hostDead  map[string]int
	raNotes   map[string][]raNote
	hostUntil map[string]time.Time
	why       *pickWhy // set while waitCause runs a pick
	roomy     int      // budgets with a free concurrency slot

	// The index (see index.go). Each budget's heap of its available
	// proxies, best first, is a piece of one array as large as its members
	// (it holds each at most once): for 100,000 budgets, one object for the
	// garbage collector to mark, and 8 bytes a budget to find it (see
	// Local.ready).
	rall   []int32  // the pieces, budget by budget
	roff   []int32  // per budget, and one more: where its piece starts; roff[b+1]-roff[b] is its members
	rlen   []int32  // per budget, how many proxies its heap holds
	mpos   []int32  // per proxy, its place in its budget's ready heap; -1: not there
	pkey   []key    // per proxy, its key in its budget's ready heap
	bkey   []key    // per budget, its key in top (while it has an available proxy)
	top    heap32   // the open budgets, best first
	bpos   []int32  // per budget, its place in top; -1: not there
	parked wakeHeap // benched proxies and rate-limited budgets, by when to look again
	aside  []int32  // proxies set aside by the pick in progress
	hold   holdTree // the hold-back's rates by pace
	seq    int64    // grants so far, for round-robin turns
	rclock float64  // the random policy's clock: the key of the last pick
}

var _ Scheduler = (*Local)(nil)

// proxyState is what the scheduler keeps of one proxy. It holds no
// pointer and no more than it must (80 bytes): a pool of 100,000 identities
// keeps 100,000 of them, which the garbage collector then neither marks
// nor the kernel hands over page by page twice as many of. What only a
// benched or banned proxy has is kept aside (Local.benchedUntil, Local.bans).
type proxyState struct {
	used     int64 // attempts granted so far
	budget   int32
	inFlight int32

	fails      int32 // consecutive ProxyFault outcomes
	streak     int32 // consecutive successes
	level      int32 // benchings since the last long streak: the cooldown doubles with each
	holdBucket int32 // its bucket in the hold-back's tree; -1: none
	benched    bool  // it has a Local.benchedUntil: the index, which asks at every refresh, looks the map up only then
	probing    bool  // after a bench: one attempt at a time until one succeeds
	probeOut   bool  // the probe is in flight
	rejected   bool  // refused its credentials: out of the run for good

	est time.Duration // moving average of how long a successful attempt holds its lease

	turn     int64   // round-robin: the grant that last went to it
	rkey     float64 // random: its next turn on the random clock
	wakeAt   int64   // wakeKey of when it is parked in the index until; 0: not parked
	holdRate float64 // the rate it adds in the hold-back's tree
}

type budgetState struct {
	capacity int32 // 0: unlimited; int32, as a pool of 100,000 budgets keeps 100,000 of these
	inFlight int32
	limiter  GCRA
	wakeAt   int64 // wakeKey of when it is parked in the index until; 0: not parked
}

// wakeKey is what a proxy or budget keeps of when it is parked until: a
// key that tells one time from another (in the index, a wake-up for any
// other time is stale), not the time itself, which holds a pointer.
func wakeKey(t time.Time) int64 { return t.UnixNano() }

// nominal is the budget's capacity, or for an unlimited budget the nominal
// capacity of 1000 that its attempts in flight are counted against when it is
// compared with limited ones.
func (b *budgetState) nominal() int {
	if b.capacity <= 0 {
		return 1000
	}
	return int(b.capacity)
}

type hostState struct {
	inFlight int
	limiter  GCRA
}

// idle reports whether h says nothing that a new state would not: nothing in
// flight and a full token bucket.
func (h *hostState) idle(now time.Time) bool {
	return h.inFlight == 0 && h.limiter.FullAt(now)
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

		hostBans:  make(map[string]map[int32]time.Time),
		hostDead:  make(map[string]int),
		raNotes:   make(map[string][]raNote),
		hostUntil: make(map[string]time.Time),

		benchedUntil: make(map[int32]time.Time),
		bans:         make(map[int32]*banStreak),
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	s.global = NewGCRA(cfg.Global, 1)
	s.budgets = make([]budgetState, len(cfg.Budgets))
	for i, b := range cfg.Budgets {
		// Field by field: a GCRA holds a time, and a struct with a pointer
		// written whole costs a write barrier while a collection runs.
		bs, g := &s.budgets[i], NewGCRA(b.Rate, b.Burst)
		bs.capacity, bs.limiter.t, bs.limiter.tau = int32(min(b.Concurrency, math.MaxInt32)), g.t, g.tau
	}
	s.roomy = len(s.budgets)
	s.proxies = make([]proxyState, len(cfg.BudgetOf))
	s.healthyN = len(s.proxies)
	s.roff = make([]int32, len(s.budgets)+1)
	for i, b := range cfg.BudgetOf {
		if b < 0 || b >= len(s.budgets) {
			panic(fmt.Sprintf("limits: proxy %d has budget %d of %d", i, b, len(s.budgets)))
		}
		s.proxies[i].budget = int32(b)
		s.proxies[i].holdBucket = -1
		s.roff[b+1]++ // members, summed up below
	}
	for b := range s.budgets {
		s.roff[b+1] += s.roff[b]
	}
	s.rall = make([]int32, len(s.proxies))
	s.rlen = make([]int32, len(s.budgets))
	s.top = make(heap32, 0, len(s.budgets))
	s.bpos = make([]int32, len(s.budgets))
	for b := range s.bpos {
		s.bpos[b] = -1
	}
	s.mpos = make([]int32, len(s.proxies))
	s.pkey = make([]key, len(s.proxies))
	s.bkey = make([]key, len(s.budgets))
	s.build()
	return s
}

// build puts every proxy in its budget's heap and every budget that has
// one in top, as refreshProxy would one by one at the start, when every
// proxy is available and every budget open (nothing is in flight, no rate
// is spent, none is benched): each heap is filled, then ordered whole in
// linear time, so that a pool of 100,000 identities starts with one pass
// over each of the index's arrays instead of 100,000 refreshes.
func (s *Local) build() {
	for p := range s.proxies {
		ps := &s.proxies[p]
		if s.policy == Random {
			ps.rkey = s.rclock + s.rng.ExpFloat64()
		}
		s.pkey[p] = s.proxyKey(p)
		b := ps.budget
		s.rall[s.roff[b]+s.rlen[b]] = int32(p)
		s.rlen[b]++
	}
	for b := range s.budgets {
		if s.rlen[b] == 0 {
			continue
		}
		s.ready(int32(b)).heapify(s.mpos, s.proxyLess)
		s.bkey[b] = s.budgetKey(b)
		s.top = append(s.top, int32(b))
	}
	s.top.heapify(s.bpos, s.budgetLess)
}

// Acquire implements Scheduler.
func (s *Local) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.stopped() {
		return nil, context.Canceled
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
	if err := s.hostBanned(req.Host); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.waiters.head == nil {
		now := s.clock.Now()
		if l, _ := s.tryGrant(req, now, s.logical(now), 0); l != nil {
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
		return s.giveUp(w, ctx.Err(), true)
	case <-req.Stop:
		return s.giveUp(w, context.Canceled, false)
	}
}

// giveUp takes w, whose wait ended with err, off the queue. why asks for
// what it waited for (its context ended): the error is then a *WaitError.
func (s *Local) giveUp(w *waiter, err error, why bool) (*Lease, error) {
	s.mu.Lock()
	s.waiters.remove(w)
	now := s.clock.Now()
	var pool *PoolError
	if s.healthyN == 0 && len(s.proxies) > 0 {
		pool = s.poolState(now)
	}
	cause := ""
	if why && w.ch != nil && len(w.ch) == 0 && !s.closed {
		cause = s.waitCause(w.req, now)
	}
	s.mu.Unlock()
	// A grant may have raced with the cancellation: give it back.
	select {
	case l := <-w.ch:
		l.Release()
	default:
	}
	if pool != nil || cause != "" {
		we := &WaitError{Err: err, Cause: cause}
		if pool != nil {
			we.Pool = *pool
		}
		return nil, we
	}
	return nil, err
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
	due := s.logical(now)
	var wake time.Duration = -1
	ahead := 0
	for w := s.waiters.head; w != nil && s.roomy > 0; {
		next := w.next
		l, wait := s.tryGrant(w.req, now, due, ahead)
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
	fired := s.timerAt
	s.dispatch() // at the logical time of timerAt, if the timer is late
	// Nothing more is due unless dispatch armed the timer again: then
	// timerAt is the next due time, and stays, however soon it is (the
	// clock has moved on since dispatch read it), so that the next
	// wake-up's grants are charged at it.
	if s.timerAt.Equal(fired) && !fired.After(s.clock.Now()) {
		s.timerAt = time.Time{}
	}
}

// logical returns the scheduler's logical time for a dispatch at now, the
// time its rate limits charge admissions at (see GCRA): the time the armed
// timer was due, when it is overdue (the wake-up is late, or a release came
// before it), and otherwise now. It never goes back. Charging a late
// wake-up's admissions at the time they were due keeps timer lateness from
// adding up: the starts follow their schedule. Call with s.mu held.
func (s *Local) logical(now time.Time) time.Time {
	due := now
	if !s.timerAt.IsZero() && s.timerAt.Before(now) {
		due = s.timerAt
	}
	if due.Before(s.due) {
		due = s.due
	}
	s.due = due
	return due
}

// tryGrant takes a lease for req now if every limit allows it. Otherwise it
// returns how long until a rate token could allow it, or -1 when only a
// release can. due is the logical time that rate limits charge the grant at
// (see logical); ahead is how many requests wait before this one. Call with
// s.mu held.
func (s *Local) tryGrant(req Request, now, due time.Time, ahead int) (*Lease, time.Duration) {
	if d := s.hostWait(req.Host, now); d > 0 {
		return nil, d
	}
	h := s.hosts[req.Host]
	if h != nil && s.host.Concurrency > 0 && h.inFlight >= s.host.Concurrency {
		return nil, -1
	}
	var wait time.Duration
	if h != nil { // a host not seen yet starts with a full bucket
		wait = max(wait, h.limiter.WaitAt(now))
	}
	wait = max(wait, s.global.WaitAt(now))

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
		h = &hostState{limiter: NewGCRA(s.host.Rate, s.host.Burst)}
		s.hosts[req.Host] = h
	}
	h.limiter.TakeAt(h.limiter.ChargeAt(due))
	s.global.TakeAt(s.global.ChargeAt(due))
	ps := &s.proxies[p]
	b := &s.budgets[ps.budget]
	b.limiter.TakeAt(b.limiter.ChargeAt(due))
	b.inFlight++
	if b.inFlight == b.capacity {
		s.roomy--
	}
	ps.inFlight++
	ps.used++
	h.inFlight++
	s.attempts++
	s.seq++
	ps.turn = s.seq
	if s.policy == Random {
		s.rclock = max(s.rclock, ps.rkey)
		ps.rkey = s.rclock + s.rng.ExpFloat64()
	}
	probe := ps.probing && !ps.probeOut
	if probe {
		ps.probeOut = true
		if ps.benched {
			s.unbench(p)
			s.event(p, now, "probing", 0)
		}
	}
	s.refreshProxy(p, now)
	if s.attempts%sweepEvery == 0 {
		s.sweep(now)
	}
	pr := s.pairs[pairKey{p, req.Host}]
	if pr != nil {
		pr.next = now.Add(pr.spacing)
		pr.inFlight++
	}
	l := &Lease{Proxy: p, Budget: int(ps.budget), ProxyInFlight: int(ps.inFlight), HostInFlight: h.inFlight,
		local: localGrant{s: s, host: req.Host, granted: now, probe: probe, pair: pr}}
	return l, 0
}

// localGrant is what Local.release needs of a lease Local granted.
type localGrant struct {
	s       *Local
	host    string
	granted time.Time
	probe   bool
	pair    *pairState
}

func (s *Local) release(p int, host string, o Outcome, granted time.Time, probe bool, pr *pairState, ra time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := &s.proxies[p]
	now := s.clock.Now()
	if pr != nil {
		pr.inFlight-- // even when pr has been forgotten since: it is then unused
	}
	s.learnHealth(p, host, o, now, probe)
	s.learnPushback(p, host, o, now, granted)
	s.learnHost(p, host, o, now, granted, ra)
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
	s.refreshProxy(p, now)
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
	s.sweepHostWaits(now)
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
