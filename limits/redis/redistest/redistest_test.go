package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goredis.SetLogger(quiet{}) // the failover client's notes on the switch
	goleak.VerifyTestMain(m)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// slotKeys are keys to check Slot with, hash tags' corner cases among them.
func slotKeys() []string {
	keys := []string{"", "a", "foo", "123456789", "user:1000", "{user1000}.following",
		"{user1000}.followers", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{x}", "x{", "{}"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("key:%d", i), fmt.Sprintf("{t%d}:x", i))
	}
	return keys
}

func TestSlot(t *testing.T) {
	// CRC16/XMODEM's check value is 0x31c3; the hash tag's is the key's.
	for k, want := range map[string]int{"123456789": 0x31c3, "{123456789}": 0x31c3, "a{123456789}b{c}": 0x31c3, "": 0} {
		if got := keySlot(k); got != want {
			t.Errorf("Slot(%q) = %d, want %d", k, got, want)
		}
	}
}

func TestCluster(t *testing.T) {
	t0 := time.Now()
	c := StartCluster(t, 3)
	t.Logf("StartCluster(3): %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if len(c.Addrs) != 3 || len(c.URLs) != 3 || c.URLs[1] != "redis://"+c.Addrs[1] {
		t.Fatalf("Addrs %q, URLs %q", c.Addrs, c.URLs)
	}
	pipe := c.admin[0].Pipeline()
	keys := slotKeys()
	var slots []*goredis.IntCmd
	for _, k := range keys {
		slots = append(slots, pipe.ClusterKeySlot(ctx, k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got, want := c.Slot(k), int(slots[i].Val()); got != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT %d", k, got, want)
		}
	}
	for slot, want := range map[int]int{0: 0, 5460: 0, 5461: 1, 10921: 1, 10922: 2, 16383: 2} {
		if got := c.NodeFor(slot); got != want {
			t.Errorf("NodeFor(%d) = %d, want %d", slot, got, want)
		}
	}

	cc := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: c.Addrs, MaxRedirects: 16})
	defer cc.Close()
	redirects := newRedirectCount()
	cc.OnNewNode(func(n *goredis.Client) { n.AddHook(redirects) })
	// A key on each node, set through the cluster client, is on that node.
	onNode := map[int]string{}
	for i := 0; len(onNode) < 3; i++ {
		k := fmt.Sprintf("key:%d", i)
		if n := c.NodeFor(c.Slot(k)); onNode[n] == "" {
			onNode[n] = k
		}
	}
	for n, k := range onNode {
		if err := cc.Set(ctx, k, "v-"+k, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := c.admin[n].Get(ctx, k).Result(); err != nil || v != "v-"+k {
			t.Errorf("node %d: GET %s = %q, %v", n, k, v, err)
		}
	}

	// The slot of {hot}: 250 keys and two counters that scripts increment
	// together, all along its migration. Made before and after the rest,
	// the counters go in different MIGRATEs (GETKEYSINSLOT lists the
	// newest first).
	slot := c.Slot("{hot}")
	from := c.NodeFor(slot)
	to := (from + 1) % 3
	pipe = cc.Pipeline()
	pipe.Set(ctx, "{hot}:a", 0, 0)
	for i := range 250 {
		pipe.Set(ctx, fmt.Sprintf("{hot}:fill:%d", i), i, 0)
	}
	pipe.Set(ctx, "{hot}:data", "payload", 0)
	pipe.Set(ctx, "{hot}:b", 0, 0)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	incr := goredis.NewScript(`
local a = redis.call('INCR', KEYS[1])
local b = redis.call('INCR', KEYS[2])
return a - b`)
	var (
		ok     atomic.Int64
		mu     sync.Mutex
		errs   []string
		wg     sync.WaitGroup
		stop   = make(chan struct{})
		marks  = make(chan int64, 64) // ok counts, each 50th
		hotKey = []string{"{hot}:a", "{hot}:b"}
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := incr.Run(ctx, cc, hotKey).Int64()
				if err == nil && d != 0 {
					err = fmt.Errorf("the counters differ by %d", d)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
					if ctx.Err() != nil {
						return
					}
					continue
				}
				if n := ok.Add(1); n%50 == 0 {
					select {
					case marks <- n:
					default:
					}
				}
			}
		}()
	}
	waitOK := func(min int64) {
		t.Helper()
		for {
			select {
			case n := <-marks:
				if n >= min {
					return
				}
			case <-ctx.Done():
				t.Fatalf("the scripts did not reach %d runs: %d", min, ok.Load())
			}
		}
	}
	waitOK(100)
	// After each MIGRATE, until the scripts have met the state it left:
	// TRYAGAIN while the counters are split between the nodes, ASK once
	// both have moved, before the slot changes hands.
	split := false // whether a MIGRATE left the counters on different nodes
	c.afterMigrate = func() {
		// (EXISTS would have the same redirections.)
		left, err := c.admin[from].ClusterGetKeysInSlot(ctx, slot, 1000).Result()
		if err != nil {
			t.Error(err)
			return
		}
		n := 0
		for _, k := range left {
			if k == hotKey[0] || k == hotKey[1] {
				n++
			}
		}
		want := map[int]string{1: "TRYAGAIN", 0: "ASK"}[n]
		if want == "" {
			return
		}
		split = split || n == 1
		select {
		case <-redirects.first[want]:
		case <-time.After(10 * time.Second):
			t.Errorf("no %s in 10s with %d counters moved", want, 2-n)
		}
	}
	before := ok.Load()
	t1 := time.Now()
	if err := c.MigrateSlot(ctx, slot, to); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	during := ok.Load() - before
	t.Logf("MigrateSlot(%d, %d) from node %d with 253 keys: %v; %d script runs meanwhile",
		slot, to, from, time.Since(t1), during)
	waitOK(ok.Load() + 100) // and on the new owner
	close(stop)
	wg.Wait()
	t.Logf("%d script runs; the nodes answered %s", ok.Load(), redirects)
	// (MOVED depends on when the client reloads its slot map.)
	if redirects.n["ASK"].Load() == 0 || split && redirects.n["TRYAGAIN"].Load() == 0 {
		t.Errorf("the scripts did not run into every state of the migration (split counters: %v)", split)
	}
	if len(errs) > 0 {
		t.Errorf("%d script runs failed, the first: %s", len(errs), errs[0])
	}
	runs := ok.Load()
	for _, k := range hotKey {
		if n, err := cc.Get(ctx, k).Int64(); err != nil || n != runs {
			t.Errorf("GET %s = %d, %v; want %d (the runs)", k, n, err, runs)
		}
	}

	if got := c.NodeFor(slot); got != to {
		t.Errorf("after the migration NodeFor(%d) = %d, want %d", slot, got, to)
	}
	if v, err := cc.Get(ctx, "{hot}:data").Result(); err != nil || v != "payload" {
		t.Errorf("GET {hot}:data through the cluster client = %q, %v", v, err)
	}
	if v, err := c.admin[to].Get(ctx, "{hot}:data").Result(); err != nil || v != "payload" {
		t.Errorf("GET {hot}:data on node %d = %q, %v", to, v, err)
	}
	if err := c.admin[from].Get(ctx, "{hot}:data").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Errorf("GET {hot}:data on the old owner: %v, want MOVED", err)
	}
	for n, want := range map[int]int64{to: 253, from: 0} {
		if got, err := c.admin[n].ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || got != want {
			t.Errorf("node %d: CLUSTER COUNTKEYSINSLOT %d = %d, %v; want %d", n, slot, got, err, want)
		}
	}
	for _, k := range onNode {
		if v, err := cc.Get(ctx, k).Result(); err != nil || v != "v-"+k {
			t.Errorf("GET %s = %q, %v", k, v, err)
		}
	}
	if err := c.MigrateSlot(ctx, slot, to); err != nil {
		t.Errorf("MigrateSlot to the owner: %v", err)
	}
	if err := c.MigrateSlot(ctx, slot, 3); err == nil {
		t.Error("MigrateSlot to node 3 of 3: no error")
	}
}

func TestSentinel(t *testing.T) {
	t0 := time.Now()
	s := StartSentinel(t)
	t.Logf("StartSentinel: %v", time.Since(t0))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if s.Master != "mymaster" || s.URL != "redis+sentinel://"+s.SentinelAddr+"/mymaster" {
		t.Errorf("Master %q, URL %q", s.Master, s.URL)
	}
	first, err := s.MasterAddr()
	if err != nil {
		t.Fatal(err)
	}
	if first != s.servers[0].addr {
		t.Fatalf("MasterAddr() = %s, want %s", first, s.servers[0].addr)
	}
	fc := goredis.NewFailoverClient(&goredis.FailoverOptions{MasterName: s.Master,
		SentinelAddrs: []string{s.SentinelAddr}, MaxRetries: 5})
	defer fc.Close()
	if err := fc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}

	// check that addr is the master, with the keys, and other its replica.
	check := func(addr, other string, kv ...string) {
		t.Helper()
		c := goredis.NewClient(&goredis.Options{Addr: addr})
		defer c.Close()
		if role, err := c.Do(ctx, "ROLE").Slice(); err != nil || role[0] != "master" {
			t.Errorf("%s: ROLE = %v, %v", addr, role, err)
		}
		for i := 0; i < len(kv); i += 2 {
			if v, err := c.Get(ctx, kv[i]).Result(); err != nil || v != kv[i+1] {
				t.Errorf("%s: GET %s = %q, %v; want %q", addr, kv[i], v, err, kv[i+1])
			}
		}
		o := goredis.NewClient(&goredis.Options{Addr: other})
		defer o.Close()
		if info, err := o.Info(ctx, "replication").Result(); err != nil ||
			!strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			t.Errorf("%s: INFO replication: %q, %v", other, info, err)
		}
	}

	t1 := time.Now()
	second, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Failover: %v", time.Since(t1))
	if second == first {
		t.Fatalf("Failover: the master is still %s", first)
	}
	if a, err := s.MasterAddr(); err != nil || a != second {
		t.Errorf("MasterAddr() after Failover = %s, %v; want %s", a, err, second)
	}
	if v, err := fc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("GET k through the failover client = %q, %v", v, err)
	}
	if err := fc.Set(ctx, "k2", "w", 0).Err(); err != nil {
		t.Fatal(err)
	}
	check(second, first, "k", "v", "k2", "w")

	// And back.
	t2 := time.Now()
	third, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Failover back: %v", time.Since(t2))
	if third != first {
		t.Fatalf("Failover back: the master is %s, want %s", third, first)
	}
	if err := fc.Set(ctx, "k3", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	check(first, second, "k", "v", "k2", "w", "k3", "x")
}

// redirectCount counts the nodes' MOVED, ASK and TRYAGAIN errors.
type redirectCount struct {
	n     map[string]*atomic.Int64
	first map[string]chan struct{} // closed on the first of each
	once  map[string]*sync.Once
}

func newRedirectCount() *redirectCount {
	r := &redirectCount{n: map[string]*atomic.Int64{}, first: map[string]chan struct{}{}, once: map[string]*sync.Once{}}
	for _, k := range []string{"MOVED", "ASK", "TRYAGAIN"} {
		r.n[k], r.first[k], r.once[k] = new(atomic.Int64), make(chan struct{}), new(sync.Once)
	}
	return r
}

func (r *redirectCount) note(err error) {
	if err == nil {
		return
	}
	if p, _, _ := strings.Cut(err.Error(), " "); r.n[p] != nil {
		r.n[p].Add(1)
		r.once[p].Do(func() { close(r.first[p]) })
	}
}

func (r *redirectCount) String() string {
	return fmt.Sprintf("MOVED %d times, ASK %d, TRYAGAIN %d",
		r.n["MOVED"].Load(), r.n["ASK"].Load(), r.n["TRYAGAIN"].Load())
}

func (r *redirectCount) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (r *redirectCount) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		r.note(err) // a redirection is returned, not always set on cmd
		return err
	}
}

func (r *redirectCount) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			r.note(c.Err())
		}
		return err
	}
}

// TestStartAOF: a server started by StartAOF keeps what it answered
// through a kill -9 and Restart; one started by Start comes back empty.
func TestStartAOF(t *testing.T) {
	for _, tt := range []struct {
		name  string
		start func(testing.TB) *Server
		want  any
	}{
		{"aof", StartAOF, "v"},
		{"no persistence", Start, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.start(t)
			if _, err := s.Do("SET", "k", "v"); err != nil {
				t.Fatal(err)
			}
			s.Stop()
			s.Restart()
			got, err := s.Do("GET", "k")
			if err != nil && !errors.Is(err, goredis.Nil) {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("after a kill and restart: GET k = %v, want %v", got, tt.want)
			}
		})
	}
}
