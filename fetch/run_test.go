package fetch_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// goroutineWriter notes the most goroutines alive when a record is written.
type goroutineWriter struct {
	memWriter
	most int
}

func (w *goroutineWriter) Write(r *results.Record) error {
	w.most = max(w.most, runtime.NumGoroutine())
	return w.memWriter.Write(r)
}

// TestHugeConcurrencyCostsNothingUpFront: -c is a limit, not an
// allocation. A run with -c 2^30 over a few URLs allocates no more than a
// small run does (before workers were started lazily it allocated a
// record buffer of 2^30 pointers: 8 GiB) and starts no more goroutines than
// there are URLs in flight.
func TestHugeConcurrencyCostsNothingUpFront(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	const urls = 20
	var lines []string
	for i := range urls {
		lines = append(lines, fmt.Sprintf("%s/c/%d?delay=20ms", tg.URL, i))
	}
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 1 << 30
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := &goroutineWriter{}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, w)
	runtime.ReadMemStats(&after)
	if err != nil || rep.OK != urls {
		t.Fatalf("err %v, %d of %d ok: %+v", err, rep.OK, urls, rep.ByKind)
	}
	// Tolerance: 20 URLs need well under 1 MiB each (buffers of a
	// connection, a request and its record); 32 MiB leaves room for the
	// runtime and the race detector's own.
	const most = 32 << 20
	if got := after.TotalAlloc - before.TotalAlloc; got > most {
		t.Errorf("run allocated %d MiB, want at most %d MiB", got>>20, most>>20)
	}
	t.Logf("allocated %d KiB, at most %d goroutines (%d before)", (after.TotalAlloc-before.TotalAlloc)>>10, w.most, base)
	// Per URL in flight: a worker, the client connection's read and write
	// loops, the dial, the server's connection and a timer or two; and a
	// few for the run itself. Not 2^30.
	if limit := base + 8*urls + 16; w.most > limit {
		t.Errorf("%d goroutines at a write, want at most %d", w.most, limit)
	}
}
