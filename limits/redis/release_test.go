package redis

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestReleasesGroupCommit: 200 leases given back at once by 200 goroutines
// take far fewer calls of the release script than releases (each carries
// those that came while the one before was on its way), every Release
// returns once its lease is gone from Redis, and a health change learnt in
// the middle of a call is the right proxy's.
func TestReleasesGroupCommit(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(50, limits.Spec{Concurrency: 1000})
	cfg.Health = limits.Health{MaxFailures: 1, Cooldown: time.Minute}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Minute}, cfg)
	const n = 200
	ls := acquireN(t, s, n)
	// One lease of one proxy fails (MaxFailures 1: its proxy is benched);
	// the others succeed.
	faulty := ls[n/2].Proxy
	calls0 := scriptCalls(t, srv)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			<-start
			if i == n/2 {
				l.Finish(limits.ProxyFault)
			} else {
				l.Finish(limits.Success)
			}
		})
	}
	close(start)
	wg.Wait()
	calls := scriptCalls(t, srv) - calls0
	if calls > n/4 {
		t.Errorf("%d calls of the release script for %d releases at once, want at most %d", calls, n, n/4)
	}
	t.Logf("%d releases in %d calls", n, calls)
	for _, e := range counts(t, srv, "t", true) { // at once: every Release has returned
		t.Error(e)
	}
	evs := s.Events(nil)
	if len(evs) != 1 || evs[0].Proxy != faulty || evs[0].State != "benched" {
		t.Errorf("events %+v, want proxy %d benched", evs, faulty)
	}
}

// scriptCalls is how many scripts srv has run (FCALL, EVALSHA).
func scriptCalls(t *testing.T, srv *redistest.Server) int {
	t.Helper()
	in, err := srv.Info()
	if err != nil {
		t.Fatal(err)
	}
	return int(in.Calls["fcall"] + in.Calls["evalsha"])
}

// TestReleasesQueuedBehindAHungCall: with Redis hanging, releases that
// queue behind the call on its way do not wait for one timeout after
// another: when that call fails, they are orphans at once, to be released
// in the background when Redis answers. 512 releases at once take one
// call and return one timeout after they began (before, they took 9
// calls, one after another, and the last returned 9 timeouts after it
// began); 512 more, after it failed, take one call more. Redis is a fake
// that never answers and the clock is synctest's, so the count and the
// times are exact: time moves only once every release waits.
func TestReleasesQueuedBehindAHungCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := &hungRedis{}
		s := &Scheduler{c: hung, scripts: newScripts(), keys: keys("t"), opTimeout: 200 * time.Millisecond,
			hdr: header(proxies(1, limits.Spec{}), time.Second, 16, "c"), now: time.Now,
			rng: mrand.New(mrand.NewPCG(1, 2)), orphans: map[string]orphan{}, releases: groupCommit[releaseItem]{max: releaseMax}}
		const n = 512
		for wave := range 2 {
			start := time.Now()
			var wg sync.WaitGroup
			var mu sync.Mutex
			var took []time.Duration
			for i := range n {
				wg.Go(func() {
					s.releaseNow(releaseItem{id: fmt.Sprint(wave, "-", i), o: limits.Success})
					mu.Lock()
					took = append(took, time.Since(start))
					mu.Unlock()
				})
			}
			wg.Wait()
			if calls := hung.calls.Load(); calls != int64(wave+1) {
				t.Errorf("wave %d: %d calls of the release script in all, want %d", wave, calls, wave+1)
			}
			for _, d := range took {
				if d != s.opTimeout {
					t.Errorf("wave %d: a Release returned %v after it began, want one call's timeout, %v", wave, d, s.opTimeout)
					break
				}
			}
			if len(s.orphans) != (wave+1)*n {
				t.Errorf("wave %d: %d orphans, want every lease given back so far: %d", wave, len(s.orphans), (wave+1)*n)
			}
		}
	})
}

// hungRedis is a Redis that never answers: each script call hangs until
// its context ends, as one to a server that neither answers nor closes
// its connections does. It counts the calls.
type hungRedis struct{ calls atomic.Int64 }

func (h *hungRedis) hang(ctx context.Context) *goredis.Cmd {
	h.calls.Add(1)
	<-ctx.Done()
	cmd := goredis.NewCmd(ctx)
	cmd.SetErr(ctx.Err())
	return cmd
}

func (h *hungRedis) Eval(ctx context.Context, _ string, _ []string, _ ...any) *goredis.Cmd {
	return h.hang(ctx)
}

func (h *hungRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *goredis.Cmd {
	return h.hang(ctx)
}

func (h *hungRedis) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *goredis.Cmd {
	return h.hang(ctx)
}

func (h *hungRedis) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *goredis.Cmd {
	return h.hang(ctx)
}

func (h *hungRedis) FCall(ctx context.Context, _ string, _ []string, _ ...any) *goredis.Cmd {
	return h.hang(ctx)
}

func (*hungRedis) FunctionLoadReplace(context.Context, string) *goredis.StringCmd {
	panic("hungRedis: not used")
}

func (*hungRedis) ScriptExists(context.Context, ...string) *goredis.BoolSliceCmd {
	panic("hungRedis: not used")
}

func (*hungRedis) ScriptLoad(context.Context, string) *goredis.StringCmd {
	panic("hungRedis: not used")
}

func (*hungRedis) Subscribe(context.Context, ...string) *goredis.PubSub { panic("hungRedis: not used") }

func (*hungRedis) Pipeline() goredis.Pipeliner { panic("hungRedis: not used") }

// TestReleasesWhileRedisHangs: with a redis-server hanging (SIGSTOP), no
// Release waits for it to answer: every one returns before it is resumed,
// though the client has no read or write timeout of its own here, so that
// only the scheduler's timeout of a call, its context, can end a call to
// the hung server (go-redis passes it to the socket with
// ContextTimeoutEnabled, which Dial sets). That none waits for more than
// the call on its way is TestReleasesQueuedBehindAHungCall's, on an exact
// clock; before, this test held the slowest Release to 600 ms, three
// calls' timeouts, and a loaded machine took 609. When Redis answers
// again, the orphans are released in the background, in calls of many,
// each with its outcome (a proxy fault queued behind the first call
// benches its proxy), and nothing is left over.
func TestReleasesWhileRedisHangs(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 1200 * time.Millisecond // a call's timeout: ttl/6 = 200ms
	cfg := proxies(50, limits.Spec{Concurrency: 1000})
	cfg.Health = limits.Health{MaxFailures: 1, Cooldown: time.Minute}
	var resumed atomic.Bool
	releasing := make(chan struct{}) // closed when the first call of the release script is sent
	var once sync.Once
	renewed := make(chan struct{}, 64) // a renewal Redis answered once it was resumed
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: srv.Sock, MaxRetries: -1,
		ReadTimeout: -1, WriteTimeout: -1, ContextTimeoutEnabled: true})
	c.AddHook(&scriptHook{hash: newScripts().release.Hash(), sent: func(goredis.Cmder) { once.Do(func() { close(releasing) }) }})
	c.AddHook(&scriptHook{hash: newScripts().renew.Hash(), done: func(_ goredis.Cmder, err error) {
		if err == nil && resumed.Load() {
			select {
			case renewed <- struct{}{}:
			default:
			}
		}
	}})
	defer c.Close()
	s, err := New(context.Background(), c, Options{Namespace: "t", LeaseTTL: ttl, trustEmpty: true}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 512
	ls := acquireN(t, s, n)
	srv.Pause()
	var wg sync.WaitGroup
	var late atomic.Int64 // Releases that returned once Redis was resumed
	const faulty = 7
	for i, l := range ls {
		wg.Go(func() {
			o := limits.Success
			if i == faulty {
				o = limits.ProxyFault
				<-releasing // behind the first call: queued, an orphan when it fails
			}
			l.Finish(o)
			if resumed.Load() {
				late.Add(1)
			}
		})
	}
	returned := make(chan struct{})
	go func() { wg.Wait(); close(returned) }()
	select {
	case <-returned:
	case <-time.After(time.Minute): // only when Releases wait for Redis to answer
	}
	resumed.Store(true)
	srv.Resume()
	<-returned
	if n := late.Load(); n > 0 {
		t.Fatalf("%d Releases returned only once Redis was resumed: their calls waited for it to answer", n)
	}
	calls0 := scriptCalls(t, srv)
	// The heartbeat releases the orphans after its first renewal that
	// Redis answers, and its next renewal begins once that is done.
	for range 2 {
		select {
		case <-renewed:
		case <-time.After(time.Minute):
			t.Fatal("no renewal answered within a minute of Redis being resumed")
		}
	}
	for _, e := range counts(t, srv, "t", true) {
		t.Error(e)
	}
	// The orphans went back in calls of up to releaseMax, not one each
	// (with the heartbeat's renewals: a few calls more).
	if calls := scriptCalls(t, srv) - calls0; calls >= n/4 {
		t.Errorf("%d script calls to release %d orphans, want fewer than %d", calls, n, n/4)
	} else {
		t.Logf("%d orphans released in %d script calls", n, calls)
	}
	var benched bool
	for _, ev := range s.Events(nil) {
		benched = benched || ev.Proxy == ls[faulty].Proxy && ev.State == "benched"
	}
	if !benched {
		t.Errorf("proxy %d, whose lease failed while Redis hung, is not benched: its outcome was lost", ls[faulty].Proxy)
	}
}

// scriptHook is a goredis.Hook that tells of the calls of the script of
// hash, by EVALSHA or by EVAL: sent, if not nil, of each command before
// it is sent, and done, if not nil, once it has returned, with its error
// (the command holds its reply, but not every error: go-redis sets one
// that comes before a reply, a failed dial, on the command only after
// the hooks). A call whose EVALSHA finds the script missing is sent again
// by EVAL: two commands for one call.
type scriptHook struct {
	hash string
	sent func(goredis.Cmder)
	done func(goredis.Cmder, error)
}

func (*scriptHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *scriptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if !runs(cmd, h.hash) {
			return next(ctx, cmd)
		}
		if h.sent != nil {
			h.sent(cmd)
		}
		err := next(ctx, cmd)
		if h.done != nil {
			h.done(cmd, err)
		}
		return err
	}
}

func (*scriptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// runs reports whether cmd runs the script of hash, by FCALL of its
// function, EVALSHA or EVAL.
func runs(cmd goredis.Cmder, hash string) bool {
	a := cmd.Args()
	if len(a) < 2 {
		return false
	}
	switch a[0] {
	case "fcall":
		sc := newScripts()
		for _, x := range []*script{sc.acquire, sc.renew, sc.release, sc.setup} {
			if x.Hash() == hash {
				return a[1] == x.fn
			}
		}
		return false
	case "evalsha":
		return a[1] == hash
	case "eval":
		src, ok := a[1].(string)
		return ok && goredis.NewScript(src).Hash() == hash
	}
	return false
}

// acquireN takes n leases on s, for host h:1.
func acquireN(t *testing.T, s *Scheduler, n int) []*limits.Lease {
	t.Helper()
	ls := make([]*limits.Lease, n)
	for i := range ls {
		l, err := s.Acquire(context.Background(), limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}
