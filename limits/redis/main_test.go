package redis

import (
	"context"
	"errors"
	"flag"
	"os"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// scriptsFlag runs every scheduler of newSched with scripts (EVALSHA), as
// on a Redis before 7.0, not the library's functions: the test command
// runs the package both ways.
var scriptsFlag = flag.Bool("scripts", false, "run the schedulers' calls as scripts (EVALSHA), as on Redis before 7.0")

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(workerMain())
	}
	goredis.SetLogger(quiet{}) // the pool's dial failures are what the fault tests cause
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// newSched starts a Scheduler on srv for cfg and closes it (and its
// client) when t ends.
func newSched(t testing.TB, srv *redistest.Server, opt Options, cfg limits.Config, hooks ...goredis.Hook) *Scheduler {
	t.Helper()
	c := srv.Client()
	// The test's Redis is its own and new: no run's leases can be out
	// (TestNewcomerAfterEmptyRestart tests the grace this skips).
	opt.trustEmpty = true
	opt.scriptsOnly = opt.scriptsOnly || *scriptsFlag
	// It answers, if slowly on a loaded machine: a call gets testCall,
	// not LeaseTTL/6 (50ms for the TTL of 300ms some tests use), so that
	// a slow answer is not taken for a Redis that stopped answering
	// (a release left to expire, a lease lost). The tests of such a Redis
	// set their own, or call New.
	if opt.opTimeout == 0 {
		opt.opTimeout = testCall
	}
	for _, h := range hooks {
		c.AddHook(h)
	}
	s, err := New(context.Background(), c, opt, cfg)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(); c.Close() })
	return s
}

// testCall is the timeout of a call to a test's Redis that answers.
const testCall = 5 * time.Second

// queued makes s tell a test of each Acquire that joins its local queue,
// once it is there, on the channel it returns: up to n not yet taken.
func queued(s *Scheduler, n int) <-chan struct{} {
	ch := make(chan struct{}, n)
	s.onQueued = func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	return ch
}

// proxies returns a config of n proxies, each its own budget sp.
func proxies(n int, sp limits.Spec) limits.Config {
	cfg := limits.Config{}
	for i := range n {
		cfg.Budgets = append(cfg.Budgets, sp)
		cfg.BudgetOf = append(cfg.BudgetOf, i)
		id := "http://127.0.0.1:" + string(rune('a'+i%26)) + time.Duration(i).String()
		cfg.ProxyIDs = append(cfg.ProxyIDs, id)
		cfg.BudgetNames = append(cfg.BudgetNames, id)
	}
	return cfg
}

func TestSmoke(t *testing.T) {
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, proxies(2, limits.Spec{Concurrency: 1}))
	ctx := context.Background()
	a, err := s.Acquire(ctx, limits.Request{Host: "h:80"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Acquire(ctx, limits.Request{Host: "h:80"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Proxy == b.Proxy {
		t.Fatalf("both on proxy %d", a.Proxy)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = s.Acquire(short, limits.Request{Host: "h:80"})
	cancel()
	if err == nil {
		t.Fatal("third acquire granted past both caps")
	}
	// a gives its permit back once the next Acquire waits for it.
	waits := queued(s, 1)
	go func() { <-waits; a.Release() }()
	c, err := s.Acquire(ctx, limits.Request{Host: "h:80"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Proxy != a.Proxy {
		t.Fatalf("got proxy %d, want the released %d", c.Proxy, a.Proxy)
	}
	b.Release()
	c.Release()
	c.Release()
	checkIdle(t, srv, s)
}

// TestStop: closing a request's Stop ends its wait with context.Canceled,
// its context still alive, and it takes no permit: once the holder lets
// go, the next request has it and nothing is left in Redis.
func TestStop(t *testing.T) {
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, proxies(1, limits.Spec{Concurrency: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hold, err := s.Acquire(ctx, limits.Request{Host: "h:80"})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	got := make(chan error, 1)
	waits := queued(s, 1)
	go func() {
		l, err := s.Acquire(ctx, limits.Request{Host: "h:80", Stop: stop})
		if l != nil {
			l.Release()
		}
		got <- err
	}()
	<-waits // it waits in the queue
	close(stop)
	if err := <-got; !errors.Is(err, context.Canceled) || ctx.Err() != nil {
		t.Fatalf("stopped wait: err = %v (ctx %v), want context.Canceled", err, ctx.Err())
	}
	if _, err := s.Acquire(ctx, limits.Request{Host: "h:80", Stop: stop}); !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped before asking: err = %v, want context.Canceled", err)
	}
	hold.Release()
	next, err := s.Acquire(ctx, limits.Request{Host: "h:80"})
	if err != nil {
		t.Fatalf("the permit did not come back: %v", err)
	}
	next.Release()
	checkIdle(t, srv, s)
}
