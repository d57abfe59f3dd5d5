package redis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
)

// Options configures a Scheduler beyond its limits.
type Options struct {
	// Namespace separates runs sharing one Redis; processes of one
	// namespace share every limit and must agree on them. Default "fetch".
	Namespace string
	// LeaseTTL is how long a permit outlives a process that stopped
	// renewing it. Leases are renewed every LeaseTTL/3. Default 10s.
	LeaseTTL time.Duration
	// Candidates is how many budgets, and proxies within each, one acquire
	// looks at (M). Default 16.
	Candidates int
	// Poll is the longest a waiting Acquire goes without asking Redis again
	// when it waits for another process's release. Default LeaseTTL/20,
	// within [50ms, 500ms].
	Poll time.Duration
	// Addr names the server in error messages (Dial returns it). It must
	// not hold a password. Default: the client's address if it tells it.
	Addr string
	// Now is the client's clock, used only to schedule local timers and
	// renewals; every limit is timed by the Redis clock. Default time.Now.
	Now func() time.Time

	// Replicas is how many replicas must acknowledge a grant (WAIT) before
	// it is used, so that a failover to one of them never loses a lease in
	// use: set it for a Sentinel-managed master (fetch sets 1). A grant
	// not acknowledged in time is given back, and the Acquire waits on as
	// when Redis is unreachable. Not for a Cluster client. Default 0.
	Replicas int

	// trustEmpty: an empty namespace is a new one, whatever Redis's
	// uptime (tests whose Redis is their own; see setup.lua's seal).
	trustEmpty bool
}

// Scheduler is a limits.Scheduler whose limits, proxy health, pushback and
// usage counts live in Redis and hold across every process that uses the
// same namespace. It is safe for concurrent use. Use New to make one.
//
// Waiting Acquires of one process wait in a local queue, first come first
// served except that a request whose host is at its limit does not hold up
// requests for other hosts, and tried up to batchMax at a time in one call
// of the acquire script. They are tried again on a local release, when
// Redis says a rate token will be due, on a release by another process
// (pub/sub), and at least every Options.Poll.
//
// Leases are renewed every LeaseTTL/3 by one goroutine for the whole
// scheduler, in batches. Close stops renewing: finish leases before Close.
type Scheduler struct {
	c          rediser
	ns         string
	id         string // this process's (this scheduler's) name in the namespace's procs
	keys       []string
	hdr        []any
	scripts    scripts
	plan       *plan
	ttl        time.Duration
	opTimeout  time.Duration
	poll       time.Duration
	addr       string
	now        func() time.Time
	rngMu      sync.Mutex
	rng        *mrand.Rand
	setupMu    sync.Mutex
	trustEmpty bool
	renewMu    sync.RWMutex // held by a renewal batch; a release waits for it
	releases   releases
	ps         *goredis.PubSub

	mu      sync.Mutex
	waiters []*waiter
	nwait   int
	held    map[string]*held
	orphans map[string]orphan // leases to release in the background (see orphan)
	epoch   string
	events  limits.Events
	closed  bool
	down    error // the last Redis error, nil since a call succeeded
	// downSince (client clock): when the calls began to fail, while down.
	downSince time.Time
	// dead: Redis was unreachable for poolWait; every Acquire fails with
	// it (wrapping limits.ErrCoordinatorDown) from then on.
	dead     error
	poolWait time.Duration // cfg.Health.PoolWait: 0 waits for Redis forever
	replicas int           // Options.Replicas
	// notBefore (client clock): Redis said nothing can start before then,
	// so a new Acquire need not ask before it either.
	notBefore time.Time
	// rateAt (client clock): Redis said nothing of any process starts
	// before then, whatever is released: the global rate's next token (or
	// the grace after a reset). The dispatcher does not ask before it.
	rateAt time.Time
	// dueUs (Redis clock, µs): the local queue's logical time for rates:
	// when its next token comes due, as the last wait Redis told of says,
	// or while waiters remain, the last grant; 0 for none. The dispatcher
	// sends it with every ask, and Redis charges the rate tokens of one
	// that arrives a little late at that time, or when its own token came
	// due if that is later (see acquire.lua), so that neither the lateness
	// of the dispatcher's timer nor the round trips of the asks before add
	// up over a run. An Acquire that finds none waiting sends none: it is
	// charged when it reaches Redis, as limits.Local charges one. It is
	// the time of the global and proxy rates.
	dueUs int64
	// hostNext is dueUs and rateAt for the host rate, which every host
	// keeps on its own: for each host with waiters, when its next token
	// comes due, as the last wait told for it, or while others of the host
	// wait, its last grant. With one time for all, a host's wait overwrote
	// another's and every host lost its lateness at each token; and with
	// no time for each, every release woke the dispatcher to ask for
	// waiters whose hosts' tokens had not come due. With a host rate only.
	hostNext map[string]hostTime
	// hostWait counts the waiters of each host, with a host rate only: a
	// host's schedule goes on only while some of its attempts wait, and is
	// dropped with its last waiter.
	hostWait  map[string]int
	hostRated bool
	// hostBatch: how many waiters of one host a call asks for at most.
	hostBatch int

	kick      chan struct{}
	stop      chan struct{}
	base      context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	onGrant func(proxy int, host string, redisUs int64) // tests: every grant with its host and Redis time
}

var _ limits.Scheduler = (*Scheduler)(nil)

// hostTime is when a host's next rate token comes due: us on the Redis
// clock, at on the client's.
type hostTime struct {
	us int64
	at time.Time
}

type waiter struct {
	req  limits.Request
	ch   chan grant // buffered 1
	done bool       // granted, failed or cancelled; under Scheduler.mu
}

type grant struct {
	l   *limits.Lease
	err error
}

// held is a lease this process holds.
type held struct {
	id, proxy, budget, host string
	epoch                   string    // the epoch it was taken or last renewed in
	lastOK                  time.Time // client clock: when its last successful acquire or renewal was sent
	lost                    chan struct{}
	gone                    bool // lost or finished; under Scheduler.mu
}

// New connects a Scheduler for cfg to the namespace opt.Namespace on c. It
// installs cfg's limits if the namespace is new, or checks that they equal
// the live ones (the error then wraps ErrConflict and names the first
// difference). With Redis unreachable it returns an error naming the
// server's address.
func New(ctx context.Context, c rediser, opt Options, cfg limits.Config) (*Scheduler, error) {
	if opt.Namespace == "" {
		opt.Namespace = "fetch"
	}
	if opt.LeaseTTL <= 0 {
		opt.LeaseTTL = 10 * time.Second
	}
	if opt.LeaseTTL < 30*time.Millisecond {
		return nil, fmt.Errorf("limits/redis: lease TTL %s is too short", opt.LeaseTTL)
	}
	if opt.Candidates <= 0 {
		opt.Candidates = 16
	}
	if opt.Poll <= 0 {
		opt.Poll = min(max(opt.LeaseTTL/20, 50*time.Millisecond), 500*time.Millisecond)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Addr == "" {
		if o, ok := c.(interface{ Options() *goredis.Options }); ok {
			opt.Addr = o.Options().Addr
		}
	}
	pl, err := newPlan(cfg, opt.LeaseTTL)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		c:          c,
		scripts:    newScripts(),
		ns:         opt.Namespace,
		id:         newID(),
		keys:       keys(opt.Namespace),
		plan:       pl,
		ttl:        opt.LeaseTTL,
		opTimeout:  min(max(opt.LeaseTTL/6, 50*time.Millisecond), 2*time.Second),
		poll:       opt.Poll,
		addr:       opt.Addr,
		now:        opt.Now,
		rng:        mrand.New(mrand.NewPCG(mrand.Uint64(), mrand.Uint64())),
		held:       map[string]*held{},
		orphans:    map[string]orphan{},
		hostNext:   map[string]hostTime{},
		hostWait:   map[string]int{},
		hostRated:  !cfg.Host.Rate.IsZero(),
		hostBatch:  hostBatch(cfg),
		trustEmpty: opt.trustEmpty,
		poolWait:   cfg.Health.PoolWait,
		replicas:   opt.Replicas,
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	s.hdr = header(cfg, opt.LeaseTTL, opt.Candidates, s.channel())
	if err := s.setup(ctx, false); err != nil {
		if errors.Is(err, ErrConflict) {
			return nil, err
		}
		return nil, fmt.Errorf("limits/redis: cannot use Redis at %s: %w", s.addr, err)
	}
	s.base, s.cancel = context.WithCancel(context.Background())
	s.ps = c.Subscribe(s.base, s.channel())
	s.wg.Add(3)
	go s.dispatcher()
	go s.heartbeat()
	go s.listen()
	return s, nil
}

func (s *Scheduler) channel() string { return "{" + s.ns + "}:released" }

func (s *Scheduler) rand() uint64 {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.Uint64()
}

// newID returns a fresh lease id: made before the script runs, so that a
// call whose outcome is unknown can be undone by releasing it.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Scheduler) noteErr(err error) {
	s.mu.Lock()
	if s.down == nil {
		s.downSince = s.now()
	}
	s.down = err
	s.mu.Unlock()
}

func (s *Scheduler) noteOK() {
	s.mu.Lock()
	s.down = nil
	s.mu.Unlock()
}

// gone returns the error every Acquire fails with once Redis has been
// unreachable for the pool wait, or nil: it says where, for how long and
// the last error, and wraps limits.ErrCoordinatorDown and
// limits.ErrCoordinator.
func (s *Scheduler) gone() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead != nil || s.down == nil || s.poolWait <= 0 {
		return s.dead
	}
	if d := s.now().Sub(s.downSince); d >= s.poolWait {
		s.dead = fmt.Errorf("%w: Redis at %s for %s (--pool-wait): %v: %w", limits.ErrCoordinatorDown, s.addr,
			d.Round(time.Millisecond), s.down, limits.ErrCoordinator)
	}
	return s.dead
}

func (s *Scheduler) setEpoch(e string) {
	s.mu.Lock()
	s.epoch = e
	s.mu.Unlock()
}

func (s *Scheduler) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Acquire implements limits.Scheduler. It waits, within ctx, for a lease
// that every limit shared in the namespace allows. While Redis is
// unreachable it keeps waiting (fail closed); if ctx ends then, the error
// wraps both limits.ErrCoordinator and ctx.Err().
func (s *Scheduler) Acquire(ctx context.Context, req limits.Request) (*limits.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-req.Stop:
		return nil, context.Canceled
	default:
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, limits.ErrClosed
	}
	if s.dead != nil {
		s.mu.Unlock()
		return nil, s.dead
	}
	fast := s.nwait == 0 && s.down == nil && !s.now().Before(s.notBefore)
	s.mu.Unlock()
	if fast {
		// Not cancelled by ctx: a call cut short may have taken a lease.
		// None waits: charged when it reaches Redis, as in limits.Local.
		r := s.try(context.WithoutCancel(ctx), req)
		if r.lease != nil {
			if ctx.Err() != nil {
				r.lease.Release()
				return nil, ctx.Err()
			}
			return r.lease, nil
		}
	}
	w := &waiter{req: req, ch: make(chan grant, 1)}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, limits.ErrClosed
	}
	s.waiters = append(s.waiters, w)
	s.nwait++
	if s.hostRated {
		s.hostWait[req.Host]++
	}
	s.mu.Unlock()
	s.wake()
	var stopped error // context.Canceled when req.Stop ended the wait
	select {
	case g := <-w.ch:
		return g.l, g.err
	case <-req.Stop:
		stopped = context.Canceled
	case <-ctx.Done():
	}
	s.mu.Lock()
	taken := w.done
	if !taken {
		s.unqueue(w)
	}
	s.mu.Unlock()
	if taken { // a grant raced with the cancellation: give it back
		if g := <-w.ch; g.l != nil {
			g.l.Release()
		}
	}
	if stopped != nil {
		return nil, stopped
	}
	return nil, s.waitErr(ctx)
}

func (s *Scheduler) waitErr(ctx context.Context) error {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down == nil {
		return ctx.Err()
	}
	return fmt.Errorf("%w: Redis at %s: %v: %w", limits.ErrCoordinator, s.addr, down, ctx.Err())
}

// result is the outcome of one acquire script.
type result struct {
	lease *limits.Lease
	wait  time.Duration // before trying again; -1: until a release
	host  bool          // the host is what is limited: other hosts may go
	err   error
}

// try runs the acquire script once for req alone (the fast path: none of
// this process waits), charging its rate tokens when it reaches Redis.
func (s *Scheduler) try(ctx context.Context, req limits.Request) result {
	c := s.callAcquire(ctx, []limits.Request{req}, nil, 0)
	if c.err != nil {
		return result{err: c.err}
	}
	return s.reply(ctx, c, 0, req, false)
}

// usArg is a time in µs as the scripts take it: "" for none (0).
func usArg(us int64) string {
	if us <= 0 {
		return ""
	}
	return strconv.FormatInt(us, 10)
}

// acquireCall is one run of the acquire script for one or more requests.
type acquireCall struct {
	ids     []string // the lease ids, one a request
	replies [][]any  // a reply for each request tried, in order
	sent    time.Time
	err     error
}

// callAcquire runs the acquire script once for reqs, in order, which it tries
// until one is told that nothing can start; due is the logical time
// (dueUs) to charge their global and proxy rate tokens from when it is a
// little before now, 0 for none, and hostDue[i] the same for the host rate
// of reqs[i] (nil: none for any; see acquire.lua). On an error every id is
// an orphan: the call may have run.
func (s *Scheduler) callAcquire(ctx context.Context, reqs []limits.Request, hostDue []int64, due int64) acquireCall {
	c := acquireCall{ids: make([]string, len(reqs))}
	args := make([]any, 0, 2+4*len(reqs))
	args = append(args, strconv.Itoa(len(reqs)), usArg(due))
	for i, req := range reqs {
		var avoid []string
		for _, p := range req.Avoid {
			if p >= 0 && p < len(s.plan.pnames) {
				avoid = append(avoid, s.plan.pnames[p])
			}
		}
		var hd int64
		if i < len(hostDue) {
			hd = hostDue[i]
		}
		c.ids[i] = newID()
		args = append(args, c.ids[i], req.Host, strings.Join(avoid, "\n"), usArg(hd))
	}
	c.sent = s.now()
	run := s.run
	if s.replicas > 0 {
		run = s.runConfirmed
	}
	v, err := run(ctx, s.scripts.acquire, args...)
	if err == nil && (len(v) == 0 || len(v) > len(reqs)) {
		err = fmt.Errorf("limits/redis: %d replies to %d requests", len(v), len(reqs))
	}
	if err != nil {
		for _, id := range c.ids {
			s.orphan(releaseItem{id: id})
		}
		c.err = err
		return c
	}
	for _, r := range v {
		rv, ok := r.([]any)
		if !ok {
			rv = []any{r}
		}
		c.replies = append(c.replies, rv)
	}
	return c
}

// reply reads the i-th reply of c, for req; queued says whether req is a
// waiter of the local queue. Call it for a call's replies in order, each
// before the grant of the one before is handed over.
func (s *Scheduler) reply(ctx context.Context, c acquireCall, i int, req limits.Request, queued bool) result {
	v, id, sent := c.replies[i], c.ids[i], c.sent
	switch str(v, 0) {
	case "reset":
		if err := s.setup(ctx, true); err != nil {
			return result{err: err}
		}
		s.mu.Lock()
		clear(s.hostNext) // of tokens Redis no longer has
		s.mu.Unlock()
		return result{wait: 0}
	case "wait":
		w, now := atoi(str(v, 2)), atoi(str(v, 3))
		d := time.Duration(-1)
		s.mu.Lock()
		if w >= 0 {
			d = time.Duration(w) * time.Microsecond
			if str(v, 1) == "all" {
				s.notBefore = sent.Add(d)
			}
			if str(v, 4) == "1" {
				s.rateAt = sent.Add(d)
			}
			switch {
			case now <= 0:
			case str(v, 1) != "host":
				s.dueUs = now + w
			case s.hostRated && (!queued || s.hostWait[req.Host] > 0): // an Acquire about to wait, or a waiter
				s.hostNext[req.Host] = hostTime{us: now + w, at: sent.Add(d)}
			}
		}
		s.mu.Unlock()
		return result{wait: d, host: str(v, 1) == "host"}
	case "dead":
		n, rej := int(atoi(str(v, 1))), int(atoi(str(v, 2)))
		return result{err: &limits.PoolError{Total: n, Rejected: rej, Benched: n - rej, For: time.Duration(atoi(str(v, 3))) * time.Microsecond}}
	case "ok":
	default:
		return result{err: fmt.Errorf("limits/redis: unexpected reply %v", v)}
	}
	h := &held{id: id, proxy: str(v, 1), budget: str(v, 2), host: req.Host, epoch: str(v, 5),
		lastOK: sent, lost: make(chan struct{})}
	pi, bi := s.plan.proxies[h.proxy], s.plan.budgets[h.budget]
	l := limits.NewLease(pi, bi, func(o limits.Outcome) { s.release(h, o) })
	l.ProxyInFlight, l.HostInFlight = int(atoi(str(v, 3))), int(atoi(str(v, 4)))
	l.Lost = h.lost
	s.mu.Lock()
	s.held[id] = h
	s.epoch = h.epoch
	if str(v, 6) == "1" {
		s.event(pi, "probing", 0)
	}
	charged := atoi(str(v, 8)) // 0 with no rate, and in a repeated call's reply
	// The schedule goes on only while others wait (see dueUs).
	if queued {
		s.dueUs = 0
		if next := atoi(str(v, 9)); next > 0 && s.nwait > 1 {
			s.dueUs = next
		}
		// A repeated call's reply has no next: the host's next ask is
		// charged when it arrives.
		delete(s.hostNext, req.Host)
		if next, now := atoi(str(v, 11)), atoi(str(v, 7)); next > 0 && s.hostWait[req.Host] > 1 {
			s.hostNext[req.Host] = hostTime{us: next, at: sent.Add(time.Duration(next-now) * time.Microsecond)}
		}
	}
	if g, now := atoi(str(v, 10)), atoi(str(v, 7)); g > now {
		s.rateAt = sent.Add(time.Duration(g-now) * time.Microsecond)
		if s.notBefore.Before(s.rateAt) {
			s.notBefore = s.rateAt
		}
	}
	s.mu.Unlock()
	if s.onGrant != nil {
		at := charged
		if at == 0 {
			at = atoi(str(v, 7)) // a repeated call's reply: the time it ran
		}
		s.onGrant(pi, req.Host, at)
	}
	return result{lease: l}
}

// orphan is a lease released in the background (releaseOrphans) until
// that succeeds or it has expired anyway: one whose acquire or release
// failed and may or may not have run, or that was lost. A failed release
// keeps its outcome, so that Redis still learns it.
type orphan struct {
	at    time.Time // since when
	proxy string    // "" when not known (an acquire that failed)
	o     limits.Outcome
}

// orphan remembers it as an orphan, from now unless it is one already.
func (s *Scheduler) orphan(it releaseItem) {
	s.mu.Lock()
	if _, ok := s.orphans[it.id]; !ok {
		s.orphans[it.id] = orphan{at: s.now(), proxy: it.proxy, o: it.o}
	}
	s.mu.Unlock()
}

// release gives lease h back with outcome o.
func (s *Scheduler) release(h *held, o limits.Outcome) {
	s.renewMu.RLock() // a renewal batch that includes h has finished
	s.mu.Lock()
	gone := h.gone
	h.gone = true
	delete(s.held, h.id)
	s.mu.Unlock()
	s.renewMu.RUnlock()
	if gone { // lost: Redis has dropped it already, or will at its expiry
		s.wake()
		return
	}
	s.releases.send(s, releaseItem{id: h.id, proxy: h.proxy, o: o})
	s.wake()
}

// lose marks h lost: the attempt holding it is to be cancelled. Call with
// s.mu held.
func (s *Scheduler) lose(h *held) {
	if h.gone {
		return
	}
	h.gone = true
	delete(s.held, h.id)
	close(h.lost)
	s.orphans[h.id] = orphan{at: s.now(), proxy: h.proxy}
}

// dispatcher serves the local queue of waiters.
func (s *Scheduler) dispatcher() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		wait, failed := s.pass()
		if failed {
			backoff = min(max(backoff*2, 20*time.Millisecond), 2*time.Second)
			wait = backoff/2 + time.Duration(s.rand()%uint64(backoff))
		} else {
			backoff = 0
		}
		if wait != 0 {
			if !failed && (wait < 0 || wait > s.poll) {
				// Poll within [poll/2, 3poll/2) for other processes' releases,
				// in case their pub/sub message is missed, but not past a
				// token's due time.
				p := s.poll/2 + time.Duration(s.rand()%uint64(s.poll))
				if wait < 0 || p < wait {
					wait = p
				}
			}
			t.Reset(wait)
			select {
			case <-s.stop:
				return
			case <-s.kick:
			case <-t.C:
			}
			t.Stop()
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// batchMax is how many waiters one acquire call tries at most: enough
// that one round trip starts what a release or a rate's tokens allow, few
// enough that the script holds Redis briefly.
const batchMax = 16

// late is acquire.lua's LATE: an ask at most this late is charged on its
// schedule, so one call may start that much of a rate's tokens.
const late = 10 * time.Millisecond

// hostBatch is how many waiters of one host one acquire call asks for at
// most under cfg's host limits: one more than may start at most (the host
// rate's burst and the tokens of a late ask, or the host concurrency cap),
// so that the call also tells the host to wait, and at most batchMax;
// batchMax without host limits.
func hostBatch(cfg limits.Config) int {
	n := batchMax
	if h := cfg.Host; !h.Rate.IsZero() {
		n = max(h.Burst, 1) + int(math.Ceil(float64(late)*h.Rate.N/float64(h.Rate.Per)))
	}
	if c := cfg.Host.Concurrency; c > 0 {
		n = min(n, c)
	}
	return min(n+1, batchMax)
}

// pass tries the waiters in order once, batchMax to an acquire call. It
// returns how long until the next pass is due (0: at once, -1: on a
// wake-up or poll), and whether Redis failed.
func (s *Scheduler) pass() (time.Duration, bool) {
	s.mu.Lock()
	live := s.waiters[:0]
	for _, w := range s.waiters {
		if !w.done {
			live = append(live, w)
		}
	}
	clear(s.waiters[len(live):])
	s.waiters = live
	ws := append([]*waiter(nil), live...)
	s.mu.Unlock()
	if len(ws) == 0 {
		return -1, false
	}
	if d := s.untilRate(); d > 0 {
		return d, false
	}
	// wakeAt: when the next pass is due, the soonest of the waits told,
	// each from when it was told (a pass makes calls one after another);
	// zero for none.
	var wakeAt time.Time
	soonAt := func(t time.Time) {
		if wakeAt.IsZero() || t.Before(wakeAt) {
			wakeAt = t
		}
	}
	soon := func(d time.Duration) {
		if d >= 0 {
			soonAt(s.now().Add(d))
		}
	}
	next := func() time.Duration {
		if wakeAt.IsZero() {
			return -1
		}
		return max(wakeAt.Sub(s.now()), 0)
	}
	all := ws
	failed := func(err error) (time.Duration, bool) {
		if errors.Is(err, ErrConflict) || errors.Is(err, limits.ErrNoUsableProxy) {
			// the namespace was taken over with other limits, or every proxy is out: nothing will pass
			s.fail(all, err)
		} else if dead := s.gone(); dead != nil {
			s.fail(all, dead) // Redis gone for the pool wait: the run stops
		}
		return 0, true
	}
	var blocked map[string]bool
	batch := make([]*waiter, 0, batchMax)
	reqs := make([]limits.Request, 0, batchMax)
	hostDue := make([]int64, 0, batchMax)
	// With host limits, a round asks for at most s.hostBatch waiters of a
	// host, and those behind them (later) in a round after: a host whose
	// limits let few start must not fill calls with waiters that would be
	// told to wait while other hosts' waiters wait behind them.
	var asked map[string]int
	if s.hostBatch < batchMax {
		asked = map[string]int{}
	}
	var later []*waiter
	for len(ws) > 0 || len(later) > 0 {
		if len(ws) == 0 { // a round is over: those held back, of hosts all of whose asks passed
			ws, later = later, nil
			clear(asked)
		}
		// The next waiters not done, whose hosts were not told to wait
		// and whose hosts' rate tokens have come due.
		batch, reqs, hostDue = batch[:0], reqs[:0], hostDue[:0]
		s.mu.Lock()
		now := s.now()
		for len(ws) > 0 && len(batch) < batchMax {
			w := ws[0]
			ws = ws[1:]
			if w.done || blocked[w.req.Host] {
				continue
			}
			hn := s.hostNext[w.req.Host]
			if hn.at.After(now) {
				soonAt(hn.at)
				continue
			}
			if asked != nil {
				if asked[w.req.Host] >= s.hostBatch {
					later = append(later, w)
					continue
				}
				asked[w.req.Host]++
			}
			hostDue = append(hostDue, hn.us)
			batch = append(batch, w)
			reqs = append(reqs, w.req)
		}
		due := s.dueUs
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		c := s.callAcquire(s.base, reqs, hostDue, due)
		if c.err != nil {
			return failed(c.err)
		}
		for i, w := range batch[:len(c.replies)] {
			r := s.reply(s.base, c, i, w.req, true)
			switch {
			case r.err != nil:
				return failed(r.err)
			case r.lease != nil:
				s.mu.Lock()
				if w.done {
					s.mu.Unlock()
					r.lease.Release()
					continue
				}
				s.unqueue(w)
				w.ch <- grant{l: r.lease}
				s.mu.Unlock()
			case r.host:
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[w.req.Host] = true
				soon(r.wait)
			default:
				soon(r.wait)
				return next(), false // nothing can start: those behind would be told the same
			}
		}
		if d := s.untilRate(); d > 0 { // a grant's reply told of the global rate's next token
			soon(d)
			return next(), false
		}
	}
	return next(), false
}

// unqueue marks w done: granted, failed or cancelled. A host's schedule
// ends with its last waiter. Call with s.mu held.
func (s *Scheduler) unqueue(w *waiter) {
	w.done = true
	s.nwait--
	if !s.hostRated {
		return
	}
	h := w.req.Host
	if n := s.hostWait[h] - 1; n > 0 {
		s.hostWait[h] = n
		return
	}
	delete(s.hostWait, h)
	delete(s.hostNext, h)
}

// untilRate returns how long until rateAt: before it, no ask can pass.
func (s *Scheduler) untilRate() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateAt.Sub(s.now())
}

// fail ends waiters with err.
func (s *Scheduler) fail(ws []*waiter, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !errors.Is(err, limits.ErrNoUsableProxy) && !errors.Is(err, limits.ErrCoordinator) {
		err = fmt.Errorf("%w: %w", limits.ErrCoordinator, err)
	}
	for _, w := range ws {
		if !w.done {
			s.unqueue(w)
			w.ch <- grant{err: err}
		}
	}
}

// listen wakes the dispatcher on other processes' releases.
func (s *Scheduler) listen() {
	defer s.wg.Done()
	ch := s.ps.Channel()
	for {
		select {
		case <-s.stop:
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			s.mu.Lock()
			n := s.nwait
			s.mu.Unlock()
			if n > 0 {
				s.wake()
			}
		}
	}
}

// heartbeat renews the held leases every TTL/3, more often while renewals
// fail, and releases orphans.
func (s *Scheduler) heartbeat() {
	defer s.wg.Done()
	t := time.NewTimer(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.expire()
		next := s.ttl / 3
		if !s.renewAll() {
			next = s.ttl/16 + time.Duration(s.rand()%uint64(s.ttl/16))
			if d := s.untilExpiry(); d < next {
				next = max(d, time.Millisecond) // lose them on time even if Redis stays away
			}
		}
		s.releaseOrphans()
		t.Reset(next)
	}
}

const renewBatch = 200

// renewAll renews every held lease and reports whether Redis answered.
// Leases Redis says are lost, and leases whose renewal keeps failing until
// their last successful one is almost TTL old, are lost: their Lost
// channel is closed.
func (s *Scheduler) renewAll() bool {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	s.mu.Lock()
	hs := make([]*held, 0, len(s.held))
	for _, h := range s.held {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	ok := true
	for first := true; first || len(hs) > 0; first = false { // once with none: the process's presence
		n := min(renewBatch, len(hs))
		if !s.renew(hs[:n]) {
			ok = false
		}
		hs = hs[n:]
	}
	return ok
}

func (s *Scheduler) renew(hs []*held) bool {
	for range 2 { // a second time after a reset
		args := []any{s.id, strconv.Itoa(len(hs))}
		s.mu.Lock()
		for _, h := range hs {
			args = append(args, h.id, h.epoch, h.proxy, h.budget, h.host)
		}
		s.mu.Unlock()
		sent := s.now()
		v, err := s.run(s.base, s.scripts.renew, args...)
		if err != nil {
			s.expire()
			return false
		}
		if str(v, 0) == "reset" {
			if s.setup(s.base, true) != nil {
				return false
			}
			continue
		}
		e := str(v, 1)
		s.mu.Lock()
		for i, h := range hs {
			if str(v, 2+i) == "1" {
				h.lastOK, h.epoch = sent, e
			} else {
				s.lose(h)
			}
		}
		s.mu.Unlock()
		return true
	}
	return false
}

// lostAfter is how long after its last successful renewal was sent a
// lease counts as lost when renewals fail: Redis set its expiry TTL after
// it received that renewal, so this errs on the early side, and the margin
// covers a renewal's timeout.
func (s *Scheduler) lostAfter() time.Duration { return s.ttl - s.ttl/4 }

// expire loses the leases whose renewals have failed for too long.
func (s *Scheduler) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, h := range s.held {
		if now.Sub(h.lastOK) >= s.lostAfter() {
			s.lose(h)
		}
	}
}

// untilExpiry is how long until expire would lose the first held lease.
func (s *Scheduler) untilExpiry() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d := time.Duration(1<<63 - 1)
	for _, h := range s.held {
		d = min(d, s.lostAfter()-now.Sub(h.lastOK))
	}
	return d
}

func (s *Scheduler) releaseOrphans() {
	s.mu.Lock()
	items := make([]releaseItem, 0, len(s.orphans))
	for id, or := range s.orphans {
		if s.now().Sub(or.at) > 2*s.ttl { // expired long since: acquires sweep it
			delete(s.orphans, id)
			continue
		}
		items = append(items, releaseItem{id: id, proxy: or.proxy, o: or.o})
	}
	s.mu.Unlock()
	for len(items) > 0 {
		n := min(len(items), releaseMax)
		if s.callRelease(items[:n]) != nil {
			return
		}
		s.mu.Lock()
		for _, it := range items[:n] {
			delete(s.orphans, it.id)
		}
		s.mu.Unlock()
		items = items[n:]
	}
}

// event queues a change of state that this process caused. Call with s.mu
// held.
func (s *Scheduler) event(p int, state string, d time.Duration) {
	s.events.Add(limits.HealthEvent{Proxy: p, At: s.now(), State: state, Cooldown: d})
}

// Events implements limits.Scheduler: it reports the changes of proxy
// state that this process's outcomes caused (those caused by other
// processes are theirs to report).
func (s *Scheduler) Events(dst []limits.HealthEvent) []limits.HealthEvent {
	return s.events.Take(dst)
}

// Drain implements limits.Scheduler. The shared scheduler does not hold
// requests back from slow proxies at the end of a run: it does nothing.
func (s *Scheduler) Drain() {}

// Close implements limits.Scheduler: it wakes every waiting Acquire with
// limits.ErrClosed and stops the background work, renewals included, so
// leases still held lapse one TTL later. It always returns nil.
func (s *Scheduler) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for _, w := range s.waiters {
			if !w.done {
				s.unqueue(w)
				w.ch <- grant{err: limits.ErrClosed}
			}
		}
		s.waiters = nil
		s.mu.Unlock()
		close(s.stop)
		s.cancel()
		_ = s.ps.Close()
		s.wg.Wait()
		// Give back what the background had yet to (acquires that failed
		// and may have run), rather than leave it to expire.
		s.releaseOrphans()
		// Leave the namespace, so that the next run may start afresh.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = s.run(ctx, s.scripts.setup, "leave", s.plan.sum, s.id)
		cancel()
	})
	return nil
}

// InFlight reports how many leases this process holds.
func (s *Scheduler) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}
