package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestRestartWithoutData: Redis shut down without saving and restarted on
// the same socket mid-run. No cap is exceeded (a lease held across the
// restart registers again and counts), nothing is granted while Redis is
// down, the scripts come back (NOSCRIPT) and grants resume after the grace.
func TestRestartWithoutData(t *testing.T) {
	srv := redistest.Start(t)
	// The outage lasts until every scheduler has seen a call fail: well
	// within what a lease survives (lost at 3/4 TTL after its last
	// renewal, up to TTL/3 before the outage).
	const ttl = 1500 * time.Millisecond
	cfg := proxies(2, limits.Spec{Concurrency: 2})
	var ss []*Scheduler
	var grants atomic.Int64
	var downAt, upAt atomic.Int64 // unix µs
	var early atomic.Int64
	var stopping atomic.Bool // Redis is being shut down
	var mu sync.Mutex
	var want int64          // grants awaited
	var reached chan<- bool // closed when grants reach want
	var failed sync.WaitGroup
	failed.Add(3)
	// Renewals Redis answered that a lease was not held: across the
	// restart, a lease still valid registers again instead.
	var dropped atomic.Int64
	droppedHook := &scriptHook{hash: newScripts().renew.Hash(), done: func(cmd goredis.Cmder, err error) {
		if err != nil {
			return
		}
		v, err := cmd.(*goredis.Cmd).Slice()
		if err != nil || str(v, 0) != "ok" {
			return
		}
		for i := 2; i < len(v); i++ {
			if str(v, i) == "0" {
				dropped.Add(1)
			}
		}
	}}
	for range 3 {
		var once sync.Once
		sawDown := &scriptHook{hash: newScripts().acquire.Hash(), done: func(_ goredis.Cmder, err error) {
			if err != nil && stopping.Load() {
				once.Do(failed.Done) // this scheduler has seen Redis gone
			}
		}}
		s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl}, cfg, sawDown, droppedHook)
		s.onGrant = func(g grantTrace) {
			us := g.charged
			n := grants.Add(1)
			// Nothing while Redis is down, nor in the grace of one TTL
			// that the new epoch refuses acquires for.
			if d := downAt.Load(); d != 0 && us > d && (upAt.Load() == 0 || us < upAt.Load()+ttl.Microseconds()) {
				early.Add(1)
			}
			mu.Lock()
			if reached != nil && n >= want {
				close(reached)
				reached = nil
			}
			mu.Unlock()
		}
		ss = append(ss, s)
	}
	// await returns once there have been n grants in all.
	await := func(n int64, what string) {
		ch := make(chan bool)
		mu.Lock()
		want, reached = n, ch
		if grants.Load() >= n {
			close(ch)
			reached = nil
		}
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Minute): // only a run that goes wrong
			t.Fatalf("%d grants in all, want %d %s", grants.Load(), n, what)
		}
	}
	cnt := newCounter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// One lease held across the restart.
	long, err := ss[0].Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	longKey := fmt.Sprint("b", cfg.BudgetOf[long.Proxy])
	cnt.add(longKey, 1)
	longEnded := make(chan struct{})
	go func() {
		select { // in flight until the end, or until lost, as an attempt of fetch's
		case <-long.Lost:
		case <-ctx.Done():
		}
		cnt.add(longKey, -1)
		close(longEnded)
	}()
	var wg sync.WaitGroup
	for _, s := range ss {
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
					if err != nil {
						return
					}
					k := fmt.Sprint("b", cfg.BudgetOf[l.Proxy])
					cnt.add(k, 1)
					select { // the attempt: cancelled if its lease is lost
					case <-time.After(5 * time.Millisecond):
					case <-l.Lost:
					}
					cnt.add(k, -1)
					l.Release()
				}
			})
		}
	}
	await(50, "before the restart")
	before := grants.Load()
	stopping.Store(true)
	srv.Shutdown()
	downAt.Store(time.Now().UnixMicro())
	noticed := make(chan struct{})
	go func() { failed.Wait(); close(noticed) }()
	select {
	case <-noticed:
	case <-time.After(time.Minute): // only a run that goes wrong
		t.Fatal("a scheduler had no call fail within a minute of Redis going")
	}
	upAt.Store(time.Now().UnixMicro())
	srv.Restart()
	atRestart := grants.Load()
	await(atRestart+20, "after the restart")
	// A lease held across the restart registers again with its next
	// renewal: Redis never says one is not held. It may still be lost by
	// the scheduler's clock, when that renewal comes 3/4 of a TTL after
	// the last before the outage: a loaded machine's.
	select {
	case <-long.Lost:
		if dropped.Load() == 0 {
			t.Log("the lease held across the restart was lost by its clock: its renewals came late")
		}
	default:
	}
	if n := dropped.Load(); n > 0 {
		t.Errorf("%d renewals told a lease was not held: it should have registered again", n)
	}
	cancel()
	wg.Wait()
	<-longEnded
	long.Release()
	after := grants.Load()
	if after < atRestart+20 {
		t.Errorf("only %d grants after the restart", after-atRestart)
	}
	if early.Load() > 0 {
		t.Errorf("%d grants while Redis was down or in the grace after", early.Load())
	}
	checkCaps(t, cfg, cnt, 0)
	t.Logf("%d grants before the restart, %d after", before, after-atRestart)
	checkIdle(t, srv, ss...)
}

// TestClockSkew: schedulers whose clocks are an hour ahead and an hour
// behind keep every cap and the rate bound, and keep their leases.
func TestClockSkew(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 2, Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 2})
	const ttl = 300 * time.Millisecond
	var mu sync.Mutex
	at := map[int][]int64{}
	renewed := newRenewals() // of the process an hour ahead
	var ss []*Scheduler
	for i, skew := range []time.Duration{time.Hour, -time.Hour, 0} {
		var hooks []goredis.Hook
		if i == 0 {
			hooks = append(hooks, renewed)
		}
		s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl,
			Now: func() time.Time { return time.Now().Add(skew) }}, cfg, hooks...)
		s.onGrant = func(g grantTrace) { mu.Lock(); at[g.proxy] = append(at[g.proxy], g.charged); mu.Unlock() }
		ss = append(ss, s)
	}
	// A lease held for several TTLs by the skewed clock stays held.
	heldAt := time.Now()
	held, err := ss[0].Acquire(context.Background(), limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	cnt := newCounter()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hammer(ctx, t, ss, cfg, 3, []string{"h:1"}, 5*time.Millisecond, cnt)
	select {
	case <-held.Lost:
		excuseLoss(t, "a lease of the skewed process", ss[0], renewed, heldAt)
	default:
		// It was in flight all along (a lost one's permit may have gone to
		// another attempt).
		cnt.add(fmt.Sprint("b", cfg.BudgetOf[held.Proxy]), 1)
	}
	held.Release()
	checkCaps(t, cfg, cnt, 0)
	mu.Lock()
	for p, ts := range at {
		checkBound(t, fmt.Sprint("proxy ", p), append([]int64(nil), ts...), 10000, 2)
	}
	mu.Unlock()
	checkIdle(t, srv, ss...)
}

// TestRenewRacesRelease: with renewals every 20ms, leases released at
// every moment of a renewal leak nothing.
func TestRenewRacesRelease(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(4, limits.Spec{Concurrency: 8})
	var ss []*Scheduler
	for range 2 {
		ss = append(ss, newSched(t, srv, Options{Namespace: "t", LeaseTTL: 60 * time.Millisecond}, cfg))
	}
	cnt := newCounter()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	hammer(ctx, t, ss, cfg, 8, []string{"a:1", "b:1"}, 25*time.Millisecond, cnt)
	checkCaps(t, cfg, cnt, 0)
	checkIdle(t, srv, ss...)
}

// TestLostLease: a lease that Redis no longer has (another process swept
// it as expired) is reported lost by the next renewal, and its counts go
// back with that heartbeat; a lease that cannot be renewed because Redis
// is gone is reported lost once 3/4 of a TTL has passed since its last
// renewal, by the scheduler's clock, and not before.
//
// The test waits for renewals (a goredis hook tells when each is sent),
// not for time, and the scheduler's clock is one it moves itself: before,
// it wanted the loss within ttl/3+200ms and within the TTL of the wall
// clock, which a loaded machine's late timers can pass.
func TestLostLease(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	clk := &stoppedClock{t: time.Now()}
	renewals := make(chan struct{}, 1)
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl, Now: clk.Now}, proxies(1, limits.Spec{Concurrency: 2}),
		&scriptHook{hash: newScripts().renew.Hash(), sent: func(cmd goredis.Cmder) {
			if cmd.Name() == "eval" { // a renewal sent again whole: the same one
				return
			}
			select {
			case renewals <- struct{}{}:
			default:
			}
		}})
	// renewed returns once a heartbeat that began after it was called is
	// done: two renewals were sent since, and a heartbeat renews first.
	renewed := func() {
		select {
		case <-renewals:
		default:
		}
		<-renewals
		<-renewals
	}
	ctx := context.Background()
	a, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	ids, _ := c.ZRange(ctx, "{t}:leases", 0, -1).Result()
	c.Close()
	for _, id := range ids {
		if _, err := srv.Do("ZADD", "{t}:leases", "0", id); err != nil { // expired long ago
			t.Fatal(err)
		}
	}
	renewed()
	select {
	case <-a.Lost:
	default:
		t.Fatal("a lease Redis dropped was not reported lost at the next renewal")
	}
	a.Release() // harmless
	for _, e := range counts(t, srv, "t", true) {
		t.Errorf("after the heartbeat that lost it: %s", e)
	}

	b, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	clk.advance(s.lostAfter() - time.Microsecond)
	renewed()
	select {
	case <-b.Lost:
		t.Fatal("a lease was lost before 3/4 of a TTL had passed since its last renewal")
	default:
	}
	clk.advance(time.Microsecond)
	renewed()
	select {
	case <-b.Lost:
	default:
		t.Fatal("a lease that could not be renewed for 3/4 of a TTL was not reported lost")
	}
	b.Release()
	srv.Restart()
}

// stoppedClock is a clock for Options.Now that moves only when a test
// moves it.
type stoppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stoppedClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestFailClosed: with Redis unreachable, Acquire waits until its context
// ends and then fails with limits.ErrCoordinator and the context's error,
// naming the server; once Redis is back, it grants again.
func TestFailClosed(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl}, proxies(1, limits.Spec{Concurrency: 2}))
	srv.Shutdown()
	for range 2 { // the first notices, the second waits in the queue
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		cancel()
		if !errors.Is(err, limits.ErrCoordinator) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with Redis down: %v", err)
		}
		if !strings.Contains(err.Error(), srv.Sock) {
			t.Errorf("error does not name the server: %v", err)
		}
	}
	srv.Restart()
	ctx, cancel := context.WithTimeout(context.Background(), ttl+3*time.Second)
	defer cancel()
	l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatalf("after Redis came back: %v", err)
	}
	l.Release()
	checkIdle(t, srv, s)
}

// TestConfigConflict: a process whose limits differ from the namespace's
// live ones is refused, with the first difference named; one with the same
// limits in another order is accepted.
func TestConfigConflict(t *testing.T) {
	srv := redistest.Start(t)
	cfg := poolConfig()
	newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)

	same := poolConfig() // the proxies listed in another order
	same.BudgetOf = []int{3, 3, 3, 3, 0, 1, 2}
	same.ProxyIDs = []string{"http://d:1", "http://e:1", "http://f:1", "http://g:1", "http://a:1", "http://b:1", "http://c:1"}
	newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, same)

	for _, tc := range []struct {
		name string
		opt  Options
		edit func(*limits.Config)
		want string
	}{
		{"pool cap", Options{LeaseTTL: time.Second}, func(c *limits.Config) { c.Budgets[3].Concurrency = 4 }, `budget resi: live "concurrency=3 rate=unlimited burst=1 members=4", this process "concurrency=4`},
		{"lease ttl", Options{LeaseTTL: 2 * time.Second}, func(*limits.Config) {}, `lease-ttl: live "1s", this process "2s"`},
		{"extra proxy", Options{LeaseTTL: time.Second}, func(c *limits.Config) {
			c.BudgetOf = append(c.BudgetOf, 3)
			c.ProxyIDs = append(c.ProxyIDs, "http://h:1")
		}, `budget resi`},
		{"host rate", Options{LeaseTTL: time.Second}, func(c *limits.Config) { c.Host.Rate = limits.Rate{N: 1, Per: time.Second} }, `host: live`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := poolConfig()
			tc.edit(&c)
			cl := srv.Client()
			defer cl.Close()
			tc.opt.Namespace = "t"
			_, err := New(context.Background(), cl, tc.opt, c)
			if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrConflict naming %s", err, tc.want)
			}
		})
	}
}

// TestStateVersionConflict: a namespace laid out by a fetch version before
// stateVersion (its limits text has no "state" line) is not shared: the
// process is refused, naming the line.
func TestStateVersionConflict(t *testing.T) {
	srv := redistest.Start(t)
	cfg := poolConfig()
	newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	// What an older version would have installed: the same limits but the
	// line, and so another digest.
	if _, err := srv.Do("HDEL", "{t}:limits", "state"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("HSET", "{t}:limits", "~sum", "older"); err != nil {
		t.Fatal(err)
	}
	cl := srv.Client()
	defer cl.Close()
	_, err := New(context.Background(), cl, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	if want := `state: live (none), this process "` + stateVersion + `"`; !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want ErrConflict naming %s", err, want)
	}
}

// TestUnreachable: Dial and New with no server name the address, never
// the password.
func TestUnreachable(t *testing.T) {
	tg, err := ParseTarget([]string{"redis://user:s3cret@127.0.0.1:1/0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(context.Background(), tg)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Dial: %v", err)
	}
	sock := t.TempDir() + "/none.sock"
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer c.Close()
	_, err = New(context.Background(), c, Options{Namespace: "t"}, proxies(1, limits.Spec{}))
	if err == nil || !strings.Contains(err.Error(), sock) {
		t.Errorf("New: %v", err)
	}
	srv := redistest.Start(t)
	tg, err = ParseTarget([]string{srv.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	t.Logf("dialled %s", tg)
}

// TestHealthShared: a proxy benched by one process is benched for all;
// after its cooldown one probe at a time goes to it across processes; the
// events say what each process caused.
func TestHealthShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	cfg.Health = limits.Health{MaxFailures: 2, Cooldown: 300 * time.Millisecond, MaxCooldown: time.Second}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	for range 2 {
		l, err := a.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
		if err != nil || l.Proxy != 0 {
			t.Fatalf("got %v, %v", l, err)
		}
		l.Finish(limits.ProxyFault)
	}
	if ev := a.Events(nil); len(ev) != 1 || ev[0].State != "benched" || ev[0].Proxy != 0 || ev[0].Cooldown != 300*time.Millisecond {
		t.Fatalf("events %+v", ev)
	}
	for range 6 { // proxy 0 is benched for b too, even when it avoids 1
		l, err := b.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Proxy == 0 {
			t.Fatal("b got the benched proxy")
		}
		l.Release()
	}
	sleepPastBench(t, srv, "t", cfg.ProxyIDs[0])
	// Both want proxy 0: only one probe goes, the rest go to proxy 1.
	var probes []*limits.Lease
	var others []*limits.Lease
	for i := range 6 {
		s := []*Scheduler{a, b}[i%2]
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Proxy == 0 {
			probes = append(probes, l)
		} else {
			others = append(others, l)
		}
		if len(others) == 3 { // proxy 1 full at 4 with the next: make room
			others[0].Release()
			others = others[1:]
		}
	}
	if len(probes) != 1 {
		t.Fatalf("%d probes at once, want 1", len(probes))
	}
	probes[0].Finish(limits.Success)
	for _, l := range others {
		l.Release()
	}
	evs := append(a.Events(nil), b.Events(nil)...)
	var states []string
	for _, e := range evs {
		states = append(states, e.State)
	}
	if strings.Join(states, ",") != "probing,healthy" {
		t.Errorf("events after the bench: %v", states)
	}
	// Healthy again: proxy 0 takes attempts again, for both.
	l, err := b.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
	if err != nil || l.Proxy != 0 {
		t.Fatalf("after the probe: %v, %v", l, err)
	}
	l.Release()
	checkIdle(t, srv, a, b)
}

// sleepPastBench sleeps until the bench of proxy p in namespace ns is over
// by the Redis clock: its end is p's score in the bench set.
func sleepPastBench(t *testing.T, srv *redistest.Server, ns, p string) {
	t.Helper()
	c := srv.Client()
	defer c.Close()
	end, err := c.ZScore(t.Context(), "{"+ns+"}:bench", p).Result()
	if err != nil {
		t.Fatalf("the bench of %s: %v", p, err)
	}
	now, err := c.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(int64(end)-now.UnixMicro()+1) * time.Microsecond)
}

// waitHook is a goredis.Hook that calls done once each pipeline with a
// WAIT in it has returned: a grant sent with its WAIT (runConfirmed).
type waitHook func()

func (waitHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (waitHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook { return next }

func (done waitHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "wait" {
				done()
				break
			}
		}
		return err
	}
}

// TestPushbackShared: a target's pushback through a proxy, seen by one
// process, narrows that proxy-host pair for every process, and for no
// other host.
func TestPushbackShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 8})
	cfg.Pushback = limits.Pushback{Delay: 200 * time.Millisecond, Max: time.Second}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	l1, _ := a.Acquire(ctx, limits.Request{Host: "h:1"})
	l2, _ := a.Acquire(ctx, limits.Request{Host: "h:1"})
	l1.Finish(limits.PushedBack) // the window: half of 2 in flight
	l2.Release()
	l3, err := b.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if l, err := b.Acquire(short, limits.Request{Host: "h:1"}); err == nil {
		l.Release()
		t.Fatal("a second attempt on the pushed-back pair was let through")
	}
	other, err := b.Acquire(ctx, limits.Request{Host: "other:1"})
	if err != nil {
		t.Fatal(err)
	}
	other.Release()
	l3.Finish(limits.Success) // widens the window back to 2: the pair is forgotten
	l4, err := a.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	l5, err := a.Acquire(ctx, limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	l4.Release()
	l5.Release()
	checkIdle(t, srv, a, b)
}

// TestRejectedShared: a proxy that refused its credentials in one process
// is out for every process, for good; once every proxy is, Acquire fails
// with a PoolError everywhere instead of waiting.
func TestRejectedShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	cfg.Health = limits.Health{MaxFailures: 2, Cooldown: 100 * time.Millisecond, MaxCooldown: time.Second}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	l, err := a.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
	if err != nil || l.Proxy != 0 {
		t.Fatalf("got %v, %v", l, err)
	}
	l.Finish(limits.Rejected)
	if ev := a.Events(nil); len(ev) != 1 || ev[0].State != "rejected" || ev[0].Proxy != 0 {
		t.Fatalf("events %+v, want proxy 0 rejected", ev)
	}
	// Past any cooldown (100ms): a rejection is no bench that ends. The
	// sleep is the time the test is about, and longer is as good.
	time.Sleep(300 * time.Millisecond)
	for range 6 {
		l, err := b.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{1}})
		if err != nil {
			t.Fatal(err)
		}
		if l.Proxy == 0 {
			t.Fatal("b got the rejected proxy")
		}
		if l.Proxy == 1 {
			l.Finish(limits.Rejected)
			break
		}
	}
	for _, s := range []*Scheduler{a, b} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.Acquire(cctx, limits.Request{Host: "h:1"})
		cancel()
		var pe *limits.PoolError
		if !errors.As(err, &pe) || pe.Rejected != 2 || pe.Total != 2 || errors.Is(err, limits.ErrCoordinator) {
			t.Errorf("Acquire once every proxy is rejected: %v, want a PoolError of 2 rejected", err)
		}
	}
	checkIdle(t, srv, a, b)
}

// TestPoolWaitShared: the pool's wait is measured on the shared state: once
// no proxy has been healthy for PoolWait, whichever process asks, Acquire
// fails with a PoolError instead of waiting out its deadline. It fails at
// once: no acquire call of the process that ran once the wait was over
// was told to wait (a probe may still go), on the Redis clock (the wait
// runs from when acquire.lua first saw no proxy healthy, which it keeps).
// Before, the test wanted it within a second of the wall clock after the
// wait.
func TestPoolWaitShared(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	const wait = 600 * time.Millisecond
	cfg.Health = limits.Health{MaxFailures: 1, Cooldown: 200 * time.Millisecond, MaxCooldown: 400 * time.Millisecond, PoolWait: wait}
	// Each acquire call of process a: when it ran, and whether it was
	// told to wait.
	type ask struct {
		ran    int64
		waited bool
	}
	var mu sync.Mutex
	var asks []ask
	trace := &scriptHook{hash: newScripts().acquire.Hash(), done: func(cmd goredis.Cmder, err error) {
		if err != nil {
			return
		}
		v, err := cmd.(*goredis.Cmd).Slice()
		if err != nil || len(v) == 0 {
			return
		}
		rv, ok := v[0].([]any)
		if !ok {
			rv = []any{v[0]}
		}
		r := decodeAcquire(rv)
		mu.Lock()
		asks = append(asks, ask{ran: r.now, waited: r.kind == "wait"})
		mu.Unlock()
	}}
	a := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg, trace)
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	// Process a benches both proxies; their probes keep failing.
	start := time.Now()
	fail := func(s *Scheduler) error {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l, err := s.Acquire(cctx, limits.Request{Host: "h:1"})
		if err != nil {
			return err
		}
		l.Finish(limits.ProxyFault)
		return nil
	}
	var err error
	for err == nil && time.Since(start) < time.Minute { // the minute: only a run that goes wrong
		err = fail(a)
	}
	var pe *limits.PoolError
	if !errors.As(err, &pe) || pe.Benched != 2 || pe.For != wait {
		t.Fatalf("a: %v, want a PoolError of 2 benched for %s", err, wait)
	}
	if took := time.Since(start); took < wait {
		t.Errorf("the pool gave up after %s, before its wait %s", took, wait)
	}
	v, err := srv.Do("HGET", "{t}:st", "t:nh") // tat's field nh, in the state hash
	if err != nil {
		t.Fatalf("when the pool's wait began: %v", err)
	}
	since, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
	mu.Lock()
	for _, x := range asks {
		if float64(x.ran) >= since+float64(wait.Microseconds()) && x.waited {
			t.Errorf("an acquire that ran %.0fµs after the pool's wait was over was told to wait",
				float64(x.ran)-since-float64(wait.Microseconds()))
		}
	}
	mu.Unlock()
	// Process b, which never saw a failure, sees the same.
	if err := fail(b); !errors.As(err, &pe) {
		t.Errorf("b: %v, want a PoolError", err)
	}
	checkIdle(t, srv, a, b)
}

// TestNamespaceFreedAtTheEnd: once every process has left a namespace (or
// its presence has expired), the next run starts afresh: other limits are
// no conflict, and no bench, rejection or dead pool of the old run is left.
func TestNamespaceFreedAtTheEnd(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	a, err := New(context.Background(), srv.Client(), Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Acquire(context.Background(), limits.Request{Host: "h:1"})
	if err != nil {
		t.Fatal(err)
	}
	l.Finish(limits.Rejected) // the run stops: every proxy is rejected
	a.Close()
	cfg.Budgets[0].Concurrency = 3 // the list mended, other limits
	b := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var ls []*limits.Lease
	for range 3 {
		l, err := b.Acquire(ctx, limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatalf("a fresh run: %v", err)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		l.Finish(limits.Success)
	}
	checkIdle(t, srv, b)
}

// TestNewcomerAfterEmptyRestart: Redis restarted without its data while a
// process holds every permit of a proxy, and a new process reaches the
// empty Redis first. The newcomer waits as the running process does: it
// gets no permit while the running one's leases are out, those leases
// survive (they register again), and it gets one once they are released.
// Before, the newcomer started at once: 3 in flight against a cap of 2,
// and the running process lost its leases at its next renewal.
func TestNewcomerAfterEmptyRestart(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = time.Second
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	old := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl}, cfg)
	ctx := context.Background()
	held := acquireN(t, old, 2)
	srv.Shutdown()
	// The grace runs from the new Redis's start, not from when it first
	// answered: on a loaded machine a start can take a second.
	restarted := time.Now()
	srv.Restart()

	// The newcomer, as fetch starts it: no test shortcut.
	c := srv.Client()
	defer c.Close()
	newcomer, err := New(ctx, c, Options{Namespace: "t", LeaseTTL: ttl}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer newcomer.Close()
	got := make(chan *limits.Lease, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 10*ttl)
		defer cancel()
		l, err := newcomer.Acquire(actx, limits.Request{Host: "h:1"})
		if err != nil {
			t.Errorf("newcomer: %v", err)
		}
		got <- l
	}()
	// The running process holds both permits for two TTLs: its renewals
	// (every TTL/3) find the newcomer's epoch and register its leases again.
	select {
	case l := <-got:
		// Before the grace (one TTL from the restart) a permit is the bug:
		// 3 in flight against a cap of 2. After it, the running process
		// may have lost its leases, if its renewals could not register
		// them in time (a machine too busy to renew for a TTL): then it
		// stopped its attempts (fail closed), and the permit is theirs.
		at := time.Since(restarted)
		if l != nil {
			l.Release()
		}
		if at < ttl-50*time.Millisecond {
			t.Fatalf("the newcomer got a permit %s after the restart, while the running process held both: 3 in flight against a cap of 2", at)
		}
		for i, h := range held {
			select {
			case <-h.Lost:
			case <-time.After(ttl):
				t.Fatalf("the newcomer got a permit %s after the restart while lease %d of the running process was still held", at, i)
			}
		}
		for _, h := range held {
			h.Release() // harmless once lost
		}
		t.Logf("the running process lost its leases (too busy to renew within the grace); the newcomer's permit came %s after the restart", at)
		return
	case <-time.After(2 * ttl):
	}
	for i, l := range held {
		select {
		case <-l.Lost:
			t.Errorf("lease %d of the running process was lost: it should have registered again", i)
		default:
		}
		l.Release()
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("the newcomer got no permit")
		}
		l.Release()
	case <-time.After(5 * time.Second):
		t.Fatal("the newcomer got no permit within 5s of the release")
	}
	checkIdle(t, srv, old, newcomer)
}

// TestGraceFromRedisStart: a process that finds the namespace empty on a
// Redis that started less than a grace ago (restarted without its data,
// perhaps under a running run) makes acquires wait until a grace after
// that start. Redis tells its uptime in whole seconds of the wall clock,
// the second it reads less the second it started in, so one started at
// x.95s says 1 at x+1.05s; taken for a second old, a Redis 0.1s old got
// no grace at all with a TTL of 1s. The test starts Redis in the last
// tenth of a second and seals the namespace in the next (waiting for
// those phases of the wall clock is the case under test), and checks the
// grace against when Redis was started, by the same clock: it ends no
// earlier than a grace after that, or there is none and a grace has
// passed since.
func TestGraceFromRedisStart(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = time.Second // the grace
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	srv.Shutdown()
	for time.Now().Nanosecond() < 900_000_000 {
		time.Sleep(time.Millisecond)
	}
	started := time.Now() // Redis starts after this
	srv.Restart()
	for time.Now().Nanosecond() >= 900_000_000 {
		time.Sleep(time.Millisecond)
	}
	c := srv.Client()
	defer c.Close()
	s, err := New(context.Background(), c, Options{Namespace: "t", LeaseTTL: ttl}, cfg) // as fetch starts one
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	v, err := srv.Do("HGET", "{t}:st", "~epoch")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(fmt.Sprint(v))
	if len(f) != 2 {
		t.Fatalf("epoch %q", v)
	}
	end, _ := strconv.ParseInt(f[1], 10, 64)
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := started.Add(ttl).UnixMicro()
	switch {
	case end == 0 && now.UnixMicro() < want:
		t.Errorf("no grace, %v after Redis was started: want one until a grace after", now.Sub(started))
	case end != 0 && end < want:
		t.Errorf("the grace ends %v after Redis was started, want at least %v", time.Duration(end-started.UnixMicro())*time.Microsecond, ttl)
	}
}

// TestCoordinatorGoneStops: with Redis unreachable for the pool wait, a
// waiting Acquire fails with limits.ErrCoordinatorDown (not at its own,
// much later, deadline), naming the server, and so does every Acquire
// after it, at once. Before, each waited out its whole context.
//
// The scheduler runs on a clock the test moves, and the test counts the
// acquire calls that fail (a goredis hook): the Acquire still waits after
// calls that fail just short of the pool wait, and fails with the first
// call that fails once it is over (or the one failing as the clock
// moves); the next Acquire fails without a call.
// Before, the test wanted the failure within 4s of the wall clock after
// the wait (the dispatcher backs off up to 3s between tries) and the next
// within a second.
func TestCoordinatorGoneStops(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	const poolWait = 500 * time.Millisecond
	cfg.Health.PoolWait = poolWait
	clk := &stoppedClock{t: time.Now()}
	var failed atomic.Int64
	failures := make(chan struct{}, 1)
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second, Now: clk.Now}, cfg,
		&scriptHook{hash: newScripts().acquire.Hash(), done: func(_ goredis.Cmder, err error) {
			if err != nil {
				failed.Add(1)
				select {
				case failures <- struct{}{}:
				default:
				}
			}
		}})
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		got <- err
	}()
	// stillWaits returns after two more calls have failed, once the
	// Acquire is seen to wait on.
	stillWaits := func(when string) {
		select {
		case <-failures:
		default:
		}
		<-failures
		<-failures
		select {
		case err := <-got:
			t.Fatalf("Acquire failed %s: %v", when, err)
		default:
		}
	}
	stillWaits("as soon as Redis was gone")
	clk.advance(poolWait - time.Microsecond)
	stillWaits("before the pool wait was over")
	clk.advance(time.Microsecond)
	n := failed.Load()
	err := <-got
	// The call whose failure ends it may have failed as the clock moved.
	if calls := failed.Load() - n; calls > 1 {
		t.Errorf("%d calls failed once the pool wait was over before the Acquire did, want the first only", calls)
	}
	if !errors.Is(err, limits.ErrCoordinatorDown) || !errors.Is(err, limits.ErrCoordinator) {
		t.Fatalf("Acquire with Redis gone: %v, want limits.ErrCoordinatorDown", err)
	}
	if !strings.Contains(err.Error(), srv.Sock) || !strings.HasPrefix(err.Error(), "coordinator unreachable") {
		t.Errorf("error does not start %q or name the server: %v", "coordinator unreachable", err)
	}
	n = failed.Load()
	_, err = s.Acquire(ctx, limits.Request{Host: "h:1"})
	if !errors.Is(err, limits.ErrCoordinatorDown) || failed.Load() != n {
		t.Errorf("the next Acquire: %v after %d calls, want limits.ErrCoordinatorDown at once", err, failed.Load()-n)
	}
	srv.Restart()
}

// TestGrantsWaitForAReplica: with Options.Replicas, a grant is used only
// once a replica has acknowledged it. A master without a replica grants
// nothing: Acquire fails closed, naming the missing acknowledgement, and
// the grants given back leave no lease behind. With a replica (a real
// Sentinel's master), grants go through.
func TestGrantsWaitForAReplica(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	// Half a call's timeout bounds WAIT: 500ms here.
	confirmed := make(chan struct{}, 2) // a grant sent with its WAIT has returned
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second, Replicas: 1, opTimeout: time.Second}, cfg,
		waitHook(func() {
			select {
			case confirmed <- struct{}{}:
			default:
			}
		}))
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		got <- err
	}()
	// Two grants not acknowledged: the first's failure is taken in by the
	// time the second returns. Then the Acquire's context ends, as when a
	// deadline would (it waited for a deadline of 600ms, which a loaded
	// machine's first call can outlast).
	for range 2 {
		select {
		case <-confirmed:
		case <-time.After(time.Minute): // only a run that goes wrong
			t.Fatal("no grant sent with its WAIT returned within a minute")
		}
	}
	cancel()
	if err := <-got; !errors.Is(err, limits.ErrCoordinator) || !strings.Contains(err.Error(), "replicas acknowledged") {
		t.Fatalf("Acquire on a master without a replica: %v", err)
	}
	s.Close()
	checkIdle(t, srv, s)

	sn := redistest.StartSentinel(t)
	tg, err := ParseTarget([]string{sn.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s2, err := New(context.Background(), c, Options{Namespace: "t", LeaseTTL: time.Second, Replicas: 1, trustEmpty: true}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	for _, l := range acquireN(t, s2, 2) {
		l.Release()
	}
}
