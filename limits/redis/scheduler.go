package redis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
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
	// scriptsOnly: run the scripts with EVALSHA, as for a Redis before
	// 7.0, not as a library's functions (tests of that path).
	scriptsOnly bool
	// opTimeout: the timeout of a call in a run, 0 for LeaseTTL/6 within
	// [50ms, 2s] (tests whose Redis answers, on a machine that may be
	// slow to let it).
	opTimeout time.Duration
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
	releases   groupCommit[releaseItem]
	asks       groupCommit[*ask] // acquires that found none of the process waiting (see try)
	fns        atomic.Bool       // the scripts run as the library's functions (see scripts)
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

	// Tests only: onGrant sees every grant, onWait every request told to
	// wait; onQueued, every Acquire that joins the local queue, once it is
	// there.
	onGrant  func(grantTrace)
	onWait   func(waitTrace)
	onQueued func()
}

// grantTrace is what Scheduler.onGrant tells a test of a grant: its proxy
// and host; on the Redis clock (µs), when its call ran, when its rate
// tokens were charged, the logical times the process sent with it (see
// Scheduler.dueUs and hostNext) and when the global rate's next token
// comes due; and on the client's clock, when the call was sent. From
// these a test tells an ask that reached Redis late from one that the
// scheduler charged late.
type grantTrace struct {
	proxy   int
	host    string
	sent    time.Time // when its call was sent
	ran     int64     // when its call ran
	charged int64     // when its rate tokens were charged; with no rate, ran
	due     int64     // the call's logical time for the global and proxy rates; 0 for none
	hostDue int64     // the request's logical time for its host's rate; 0 for none
	global  int64     // when the global rate's next token comes due; 0 for none
	queued  bool      // a waiter of the local queue, not an Acquire that found none waiting
}

// waitTrace is what Scheduler.onWait tells a test of a request told to
// wait: when its call was sent (client clock) and ran (Redis clock, µs),
// the wait (µs; -1: until a release), and whether nothing of any process
// starts before (hard) or only its host is limited.
type waitTrace struct {
	sent           time.Time
	ran, waitUs    int64
	hard, hostOnly bool
}

var _ limits.Scheduler = (*Scheduler)(nil)

// New connects a Scheduler for cfg to the namespace opt.Namespace on c. It
// installs cfg's limits if the namespace is new, or checks that they equal
// the live ones (the error then wraps ErrConflict and names the first
// difference). With Redis unreachable it returns an error naming the
// server's address. Each of its calls may take as long as Dial's first
// answer (5 seconds), whatever the lease TTL.
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
		opTimeout:  cmp.Or(opt.opTimeout, min(max(opt.LeaseTTL/6, 50*time.Millisecond), 2*time.Second)),
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
	s.releases.max, s.asks.max = releaseMax, batchMax
	s.hdr = header(cfg, opt.LeaseTTL, opt.Candidates, s.channel())
	// At the start, a call may take as long as Dial's answer: the
	// timeout of a call in a run (LeaseTTL/6, 166ms for a TTL of 1s) is
	// for a Redis that stops answering while leases wait on it, not for
	// one that is slow to answer first (a loaded machine, a Redis busy).
	// Redis before 7.0 has no functions (and a user may lack the right to
	// load them): the scripts then run as scripts.
	if !opt.scriptsOnly && s.loadLibrary(ctx, max(s.opTimeout, dialTimeout)) == nil {
		s.fns.Store(true)
	}
	if err := s.setup(ctx, false, max(s.opTimeout, dialTimeout)); err != nil {
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

// uncancelled is the context of a call that must run to its end once
// begun, Close or not: one that may take or give back leases.
func (s *Scheduler) uncancelled() context.Context {
	if s.base == nil {
		return context.Background()
	}
	return context.WithoutCancel(s.base)
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
