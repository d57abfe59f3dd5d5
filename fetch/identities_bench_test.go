package fetch_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/proxies"
)

// BenchmarkIdentities measures the cost per URL of 20,000 URLs through 10,
// 10,000 and 100,000 identities (user names) on one loopback proxy, as a
// rotating-proxy provider's sessions are: the scheduler and the transports
// must cost per URL what they cost with 10. Every case has 64 in flight
// (8 per identity, so that 10 can carry -c 64). Each op is one whole run;
// the figures are per URL (ns/url, allocs/url), with the engine's memory
// per identity (B/identity: its route, its share of the scheduler and of
// the redaction).
func BenchmarkIdentities(b *testing.B) {
	const urls = 20_000
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	var sb strings.Builder
	for i := range urls {
		fmt.Fprintf(&sb, "%s/i/%d?size=64\n", tg.URL, i)
	}
	lines := sb.String()
	for _, n := range []int{10, 10_000, 100_000} {
		b.Run(fmt.Sprintf("identities=%d", n), func(b *testing.B) {
			cfg := fetch.DefaultConfig()
			cfg.Proxies = identities(b, px.Addr, n)
			// As many in flight whatever the pool: 10 identities of the
			// default 4 each would hold a run to 40 at once.
			cfg.ProxyConcurrency = 8
			var m0, m1, m2 runtime.MemStats
			var ns, allocs float64
			perIdentity := 0.0
			var e *fetch.Engine
			for i := range b.N {
				b.StopTimer()
				e = nil // the run before's engine is not counted in m0
				if i == 0 {
					// The connections of the case before end in the
					// background (the loopback servers' goroutines and
					// buffers): a moment for them to go.
					time.Sleep(200 * time.Millisecond)
				}
				// Twice: what sync.Pools (the loopback proxy's) held is
				// freed only by the second.
				runtime.GC()
				runtime.GC()
				runtime.ReadMemStats(&m0)
				var err error
				e, err = fetch.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&m1)
				if i == 0 { // later runs' engines share m0 with the teardown of the run before
					perIdentity = (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n)
				}
				w := &countWriter{}
				b.StartTimer()
				start := time.Now()
				rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(lines)}}, w)
				ns += float64(time.Since(start))
				b.StopTimer()
				runtime.ReadMemStats(&m2)
				allocs += float64(m2.Mallocs - m1.Mallocs)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Failed != 0 || w.ok.Load() != urls {
					b.Fatalf("%d of %d ok, %d failed", w.ok.Load(), urls, rep.Failed)
				}
				e.Close()
				b.StartTimer()
			}
			b.ReportMetric(ns/float64(b.N)/urls, "ns/url")
			b.ReportMetric(allocs/float64(b.N)/urls, "allocs/url")
			b.ReportMetric(perIdentity, "B/identity")
		})
	}
}

// BenchmarkNewIdentities measures what fetch.New costs for a list of
// 100,000 identities on one gateway: the redaction of their credentials,
// their routes and the scheduler's state. One op is one engine;
// B/identity is what one keeps, and gc-ns/identity what it adds to each
// collection of the run (the garbage collector marks what an engine keeps
// at every cycle: its pointers, more than its bytes, are the cost).
func BenchmarkNewIdentities(b *testing.B) {
	const n = 100_000
	cfg := fetch.DefaultConfig()
	cfg.Proxies = identities(b, "127.0.0.1:9", n)
	// What an engine keeps (B/identity: the heap it holds once built, the
	// list given to it not counted), measured before the timed loop.
	var m0, m1 runtime.MemStats
	runtime.GC()
	without := gcTime()
	runtime.ReadMemStats(&m0)
	e, err := fetch.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	with := gcTime()
	runtime.KeepAlive(e)
	e.Close()
	b.ReportAllocs()
	for b.Loop() {
		e, err := fetch.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		e.Close()
	}
	b.ReportMetric((float64(m1.HeapAlloc)-float64(m0.HeapAlloc))/n, "B/identity")
	b.ReportMetric(float64(with-without)/n, "gc-ns/identity")
}

// gcTime is the least time of seven full collections in a row: the cost of
// marking what is live, with as little of the machine's noise as can be.
func gcTime() time.Duration {
	least := time.Duration(math.MaxInt64)
	for range 7 {
		start := time.Now()
		runtime.GC()
		least = min(least, time.Since(start))
	}
	return least
}

// BenchmarkStartIdentities measures the start of a run through 100,000
// identities on one gateway as the command makes it: the list read from a
// file (proxies.Load), the engine built from it (fetch.New), the list
// dropped. One op is one start. B/op is what it allocates, which a fresh
// process must have the kernel map page by page; kept-B/identity is what
// stays live for the run once the list is gone (its routes, the
// scheduler's state, the strings and credentials they hold), which the
// garbage collector marks at every cycle and which sets the heap's goal,
// at twice as much, for the whole run.
func BenchmarkStartIdentities(b *testing.B) {
	const n = 100_000
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "http://user-session-%d:pw@127.0.0.1:9\n", i)
	}
	name := filepath.Join(b.TempDir(), "proxies.txt")
	if err := os.WriteFile(name, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	start := func() *fetch.Engine {
		cfg := fetch.DefaultConfig()
		ps, err := proxies.Load([]string{name}, nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		cfg.Proxies = ps
		cfg.ListDropped = runtime.GC // as the command does for a list this large
		e, err := fetch.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	e := start()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(e)
	e.Close()
	b.ReportAllocs()
	for b.Loop() {
		start().Close()
	}
	b.ReportMetric((float64(m1.HeapAlloc)-float64(m0.HeapAlloc))/n, "kept-B/identity")
}
