package fetch

import (
	"context"
	"net/http/httptrace"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
)

// TestFullJitter: the n-th back-off is uniform in [0, base·2^(n-1)]: never
// above it, and spread over it (1000 draws all under half the ceiling
// would happen with probability 2^-1000).
func TestFullJitter(t *testing.T) {
	base := 100 * time.Millisecond
	for n := 1; n <= 4; n++ {
		ceil := base << (n - 1)
		var hi time.Duration
		for range 1000 {
			d := fullJitter(base, n)
			if d < 0 || d > ceil {
				t.Fatalf("n=%d: back-off %s outside [0, %s]", n, d, ceil)
			}
			hi = max(hi, d)
		}
		if hi < ceil/2 {
			t.Errorf("n=%d: 1000 back-offs all under %s: not doubling with full jitter up to %s", n, ceil/2, ceil)
		}
	}
	if d := fullJitter(0, 3); d != 0 {
		t.Errorf("no back-off configured: %s", d)
	}
}

// phaseTimes are the phases of m, whose keys must be phases.
func phaseTimes(m map[string]float64) results.PhaseTimes {
	var p results.PhaseTimes
	for k, ms := range m {
		if !p.Set(k, ms) {
			panic("not a phase: " + k)
		}
	}
	return p
}

// BenchmarkTracker measures tracing one attempt through its phases on a
// fresh connection, with every per-phase timer armed: one op is one
// attempt.
func BenchmarkTracker(b *testing.B) {
	cfg := DefaultConfig()
	tr := newTracker(&cfg, context.Background()) // a worker's, for all its attempts
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		now := time.Now()
		gen := tr.begin(ctx, cancel, now, now.Add(time.Minute))
		ct, dt := &tr.trace, tr.dialTrace(gen)
		tr.set(results.IndexConnect)
		ct.GetConn("a.example:80")
		dt.ConnectStart("tcp", "127.0.0.1:80")
		dt.ConnectDone("tcp", "127.0.0.1:80", nil)
		ct.GotConn(httptrace.GotConnInfo{})
		ct.WroteRequest(httptrace.WroteRequestInfo{})
		tr.gotHeaders()
		tr.progress()
		tr.finish()
		cancel()
	}
}
