package redis

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// The test binary re-executes itself as worker processes: with workerEnv
// set, TestMain runs workerMain instead of the tests.
const workerEnv = "LIMITS_REDIS_WORKER"

// workerConfig is the configuration every worker and the parent use: 3
// proxies of caps 1, 2, 3 and a pool of 2 proxies sharing cap 2.
func workerConfig() limits.Config {
	return limits.Config{
		Budgets:     []limits.Spec{{Concurrency: 1}, {Concurrency: 2}, {Concurrency: 3}, {Concurrency: 2}},
		BudgetOf:    []int{0, 1, 2, 3, 3},
		ProxyIDs:    []string{"http://p0:1", "http://p1:1", "http://p2:1", "http://p3:1", "http://p4:1"},
		BudgetNames: []string{"http://p0:1", "http://p1:1", "http://p2:1", "pool"},
	}
}

// workerMain: LIMITS_REDIS_WORKER=mode,socket,ttl[,target]. Mode "hammer"
// acquires, fetches target/<budget> (a fake proxy that counts requests in
// flight) and releases, until stdin closes; mode "hold" takes every permit,
// says "held" and waits to be killed.
func workerMain() int {
	f := strings.Split(os.Getenv(workerEnv), ",")
	mode, sock := f[0], f[1]
	ttl, _ := time.ParseDuration(f[2])
	c := goredis.NewClient(&goredis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer c.Close()
	cfg := workerConfig()
	// As fetch starts one (no test shortcut), but for the timeout of a
	// call: its Redis answers, if slowly on a loaded machine (newSched).
	s, err := New(context.Background(), c, Options{Namespace: "t", LeaseTTL: ttl, opTimeout: testCall}, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	switch mode {
	case "hold":
		for range 8 { // every permit: 1+2+3+2
			if _, err := s.Acquire(ctx, limits.Request{Host: "h:1"}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		fmt.Println("held")
		<-ctx.Done()
		return 0
	case "hammer":
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				for ctx.Err() == nil {
					l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
					if err != nil {
						return
					}
					resp, err := http.Get(f[3] + "/" + strconv.Itoa(cfg.BudgetOf[l.Proxy]))
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
					l.Release()
				}
			})
		}
		wg.Wait()
		return 0
	}
	return 2
}

// worker starts the test binary as a worker; closing its stdin stops it.
type worker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startWorker(t *testing.T, env string) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+env)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, stdin: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return w
}

func (w *worker) stop(t *testing.T) {
	t.Helper()
	w.stdin.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("worker: %v", err)
	}
}

// TestProcessesNeverExceedCaps: three worker processes fetch through fake
// proxies that count requests in flight; no proxy or pool ever sees more
// than its cap. The run lasts until every budget has been seen full and
// 300 requests have been served, not for 2 seconds: the workers, as fetch
// does on an empty Redis, wait out a grace from Redis's start (one TTL,
// 2s here), and a loaded machine left some runs a few requests only.
func TestProcessesNeverExceedCaps(t *testing.T) {
	srv := redistest.Start(t)
	cfg := workerConfig()
	var mu sync.Mutex
	cur, peak, total := map[string]int{}, map[string]int{}, 0
	full := make(chan struct{}) // closed once every budget was full and 300 requests were served
	var once sync.Once
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := r.URL.Path[1:]
		mu.Lock()
		cur[b]++
		peak[b] = max(peak[b], cur[b])
		total++
		done := total >= 300
		for b, sp := range cfg.Budgets {
			done = done && peak[strconv.Itoa(b)] >= sp.Concurrency
		}
		mu.Unlock()
		if done {
			once.Do(func() { close(full) })
		}
		w.WriteHeader(200)
		// A slow body: in flight until its last byte, for 3ms (the
		// attempt's own time, not a wait for something to happen).
		for range 3 {
			_, _ = w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
		mu.Lock()
		cur[b]--
		mu.Unlock()
	}))
	defer ts.Close()
	var ws []*worker
	for range 3 {
		ws = append(ws, startWorker(t, "hammer,"+srv.Sock+",2s,"+ts.URL))
	}
	select {
	case <-full:
	case <-time.After(time.Minute): // only a run that goes wrong
		t.Error("not every budget was full within a minute")
	}
	for _, w := range ws {
		w.stdin.Close() // all at once: each takes a while to exit (with -race, a second)
	}
	for _, w := range ws {
		w.stop(t)
	}
	mu.Lock()
	defer mu.Unlock()
	for b, sp := range cfg.Budgets {
		if got := peak[strconv.Itoa(b)]; got > sp.Concurrency {
			t.Errorf("budget %d: %d in flight at once, cap %d", b, got, sp.Concurrency)
		}
	}
	t.Logf("%d requests, peaks %v", total, peak)
	checkIdle(t, srv)
}

// TestKilledProcessPermitsReturn: a process killed with SIGKILL while
// holding every permit has them back as soon as its leases expire (a TTL
// after its last renewal, at most TTL/3 before the kill): the first
// acquire that reaches Redis after that sweeps them, and none is granted
// before its lease expired. Checked on the Redis clock, call by call; before, the test
// wanted them back within TTL+TTL/3+150ms of the wall clock, which a
// loaded machine's late poll can pass.
//
// This process joins the namespace first, so that the worker does not
// wait out a grace from Redis's start, and the worker is killed as soon
// as it holds every permit, so that a loaded machine does not have it
// lose leases first (it gives a lost lease back, and its permit is free
// before the others).
func TestKilledProcessPermitsReturn(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 600 * time.Millisecond
	// Each acquire call of this process: when it ran, and whether a
	// request of it was told to wait.
	type ask struct {
		ran    int64
		waited bool
	}
	var mu sync.Mutex
	var asks []ask
	var granted []int64 // when each grant's call ran
	trace := &scriptHook{hash: newScripts().acquire.Hash(), done: func(cmd goredis.Cmder, err error) {
		if err != nil {
			return
		}
		v, err := cmd.(*goredis.Cmd).Slice()
		if err != nil {
			return
		}
		var a ask
		for _, r := range v {
			rv, ok := r.([]any)
			if !ok {
				rv = []any{r}
			}
			d := decodeAcquire(rv)
			a.ran = max(a.ran, d.now)
			a.waited = a.waited || d.kind == "wait"
		}
		mu.Lock()
		asks = append(asks, a)
		mu.Unlock()
	}}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: ttl}, workerConfig(), trace)
	s.onGrant = func(g grantTrace) { mu.Lock(); granted = append(granted, g.ran); mu.Unlock() }
	w := startWorker(t, "hold,"+srv.Sock+","+ttl.String())
	if line, err := w.out.ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("worker said %q, %v", line, err)
	}
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = w.cmd.Wait()
	// The dead process's leases expire at their last renewal's score.
	ctx := context.Background()
	c := srv.Client()
	leases, err := c.ZRangeWithScores(ctx, "{t}:leases", 0, -1).Result()
	c.Close()
	if err != nil || len(leases) == 0 {
		t.Fatalf("the dead process's leases: %v, %v", leases, err)
	}
	expired := int64(leases[len(leases)-1].Score) // the last to expire, µs
	var ls []*limits.Lease
	for range 8 {
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	t.Logf("permits back %s after the kill", time.Since(killed))
	mu.Lock()
	// The k-th grant needs k permits free when its call ran: leases of the
	// dead process expired by then (each at its own score), or given back
	// by it before it died (8 less those it held when killed).
	slices.Sort(granted)
	for k, at := range granted {
		free := 8 - len(leases)
		for _, z := range leases {
			if int64(z.Score) <= at {
				free++
			}
		}
		if free < k+1 {
			t.Errorf("grant %d ran with %d of the dead process's permits free", k+1, free)
		}
	}
	for _, a := range asks {
		if a.ran >= expired && a.waited {
			t.Errorf("an acquire that ran %dµs after the dead process's leases expired was told to wait", a.ran-expired)
		}
	}
	mu.Unlock()
	for _, l := range ls {
		l.Release()
	}
	checkIdle(t, srv, s)
}
