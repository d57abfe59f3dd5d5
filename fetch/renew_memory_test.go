//go:build !race

package fetch

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// TestFailingHostsMemory: a direct run over 20,000 hosts that refuse
// every connection keeps little once it is done, while the engine (and its
// transport) lives on: each transport renewal lets go of the waiters that
// net/http keeps for hosts that never answered (see renew.Transport). With a
// renewal every 1,000 failures at most about 1,000 of them are kept; with
// none, all 20,000 (about 10 MiB). The URLs are https://, which go through
// net/http; plain http:// ones go through h1, which keeps nothing for a
// host it could not reach, renewals or not. Without the race detector,
// whose runtime changes the heap.
func TestFailingHostsMemory(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close() // a port nothing listens on, on every loopback address
	const hosts = 20000
	list := func(scheme string) string {
		var in strings.Builder
		for i := range hosts {
			fmt.Fprintf(&in, "%s://127.%d.%d.%d:%s/\n", scheme, 1+i>>16, i>>8&255, i&255, port)
		}
		return in.String()
	}
	retained := func(in string, renewEvery int64) uint64 {
		cfg := DefaultConfig()
		cfg.Concurrency = 32
		cfg.Retries = 0
		cfg.renewEvery = renewEvery
		e, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rep, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(in)}}, discardRecords{})
		if err != nil || rep.Jobs != hosts || rep.OK != 0 {
			t.Fatalf("err %v, %d jobs, %d ok, by kind %v", err, rep.Jobs, rep.OK, rep.ByKind)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(e)
		if after.HeapAlloc < before.HeapAlloc {
			return 0
		}
		return after.HeapAlloc - before.HeapAlloc
	}
	https := list("https")
	kept, never := retained(https, 1000), retained(https, 1<<40)
	t.Logf("heap kept after %d failing hosts: %d KiB renewing every 1,000 failures, %d KiB never renewing", hosts, kept>>10, never>>10)
	// Tolerance: the failing-host table (hostdown.go) keeps its own
	// bounded entries in both runs; the waiters alone differ by ~10 MiB.
	if kept > 5<<20 || kept*2 > never {
		t.Errorf("kept %d KiB with renewals (never renewing: %d KiB): want under 5 MiB and under half", kept>>10, never>>10)
	}
	if plain := retained(list("http"), 1<<40); plain > 5<<20 {
		t.Errorf("kept %d KiB after %d failing http:// hosts, never renewing: want under 5 MiB", plain>>10, hosts)
	} else {
		t.Logf("heap kept after %d failing http:// hosts (h1), never renewing: %d KiB", hosts, plain>>10)
	}
}

// discardRecords is a RecordWriter that keeps nothing.
type discardRecords struct{}

func (discardRecords) Write(*results.Record) error { return nil }
