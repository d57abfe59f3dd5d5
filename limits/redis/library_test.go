package redis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestScriptsAndFunctionsShare: a process whose Redis calls run as
// scripts (EVALSHA, as before Redis 7) and one whose run as the library's
// functions (FCALL) share one namespace's limits: the proxy's cap of 2
// holds across them, a release by either lets the other start, and the
// counts are exact after.
func TestScriptsAndFunctionsShare(t *testing.T) {
	if *scriptsFlag {
		t.Skip("-scripts: no scheduler runs functions")
	}
	srv := redistest.Start(t)
	cfg := proxies(1, limits.Spec{Concurrency: 2})
	fn := newSched(t, srv, Options{Namespace: "t"}, cfg)
	sc := newSched(t, srv, Options{Namespace: "t", scriptsOnly: true}, cfg)
	if !fn.fns.Load() || sc.fns.Load() {
		t.Fatalf("functions: %v and %v, want true and false", fn.fns.Load(), sc.fns.Load())
	}
	ctx := context.Background()
	a := acquireN(t, fn, 1)
	b := acquireN(t, sc, 1)
	// Full: neither starts a third.
	for _, s := range []*Scheduler{fn, sc} {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		l, err := s.Acquire(short, limits.Request{Host: "h:1"})
		cancel()
		if err == nil {
			l.Release()
			t.Fatalf("a third lease past the cap of 2 (functions: %v)", s.fns.Load())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v, want the deadline", err)
		}
	}
	a[0].Release() // by the functions' process: the scripts' starts
	c := acquireN(t, sc, 1)
	b[0].Release()
	d := acquireN(t, fn, 1)
	c[0].Release()
	d[0].Release()
	in, err := srv.Info()
	if err != nil {
		t.Fatal(err)
	}
	if in.Calls["fcall"] == 0 || in.Calls["evalsha"]+in.Calls["eval"] == 0 {
		t.Errorf("fcall %v, evalsha %v, eval %v: want both ways used", in.Calls["fcall"], in.Calls["evalsha"], in.Calls["eval"])
	}
	checkIdle(t, srv, fn, sc)
}

// TestLibraryLoadedAgain: a Redis that loses the library (FUNCTION FLUSH,
// as a restart without its data does) gets it again from the next call
// that finds it missing, and the call runs.
func TestLibraryLoadedAgain(t *testing.T) {
	if *scriptsFlag {
		t.Skip("-scripts: no library")
	}
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t"}, proxies(2, limits.Spec{Concurrency: 2}))
	ls := acquireN(t, s, 1)
	if _, err := srv.Do("FUNCTION", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	// Within a bound: without the library, an Acquire waits as for a Redis
	// that is down.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 2 {
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1"})
		if err != nil {
			t.Fatalf("after the flush: %v", err)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		l.Release()
	}
	in, err := srv.Info()
	if err != nil {
		t.Fatal(err)
	}
	if n := in.Calls["function|load"]; n < 2 {
		t.Errorf("the library was loaded %v times, want 2: at New and after the flush", n)
	}
	if !s.fns.Load() {
		t.Error("the scheduler fell back to scripts")
	}
	checkIdle(t, srv, s)
}

// TestClusterFunctions: on a Redis Cluster the library is loaded on every
// master, so the namespace's slot may move to another node mid-run and
// its calls still run as functions there, with the cap kept.
func TestClusterFunctions(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	tg, err := ParseTarget(cl.URLs[:1], func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Dial(ctx, tg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := New(ctx, c, Options{Namespace: "t", trustEmpty: true, opTimeout: testCall}, proxies(1, limits.Spec{Concurrency: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.fns.Load() {
		t.Fatal("the scheduler runs scripts on a Cluster of Redis 7")
	}
	a := acquireN(t, s, 2)
	slot := cl.Slot("{t}:st")
	to := (cl.NodeFor(slot) + 1) % 3
	if err := cl.MigrateSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if l, err := s.Acquire(short, limits.Request{Host: "h:1"}); err == nil {
		l.Release()
		t.Fatal("a third lease past the cap of 2 after the slot moved")
	}
	cancel()
	a[0].Release()
	b := acquireN(t, s, 1) // on the node the slot moved to
	a[1].Release()
	b[0].Release()
	if !s.fns.Load() {
		t.Error("the scheduler fell back to scripts")
	}
}
