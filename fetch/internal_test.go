package fetch

import (
	"context"
	"math"
	"math/rand/v2"
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

// TestPhaseBinsQuantiles checks p50 and p95 against exact ones, within
// the 2% buckets, for a phase whose bins are in place and one whose are not.
func TestPhaseBinsQuantiles(t *testing.T) {
	var pb phaseBins
	pb.add(results.IndexQueue, 0)
	pb.add(results.IndexQueue, 0)
	if pb.hist != nil {
		t.Fatal("two zeros: bins not in place")
	}
	for i := 1; i <= 1000; i++ {
		pb.add(results.IndexHeaders, float64(i)) // 1..1000 ms
	}
	q := pb.quantiles()
	if len(q) != 2 || q["queue"] != (Quantiles{}) {
		t.Fatalf("quantiles %v: want queue's zeros and headers", q)
	}
	bins := pb.bins()[1:] // the headers'
	for _, tc := range []struct {
		got, want float64
	}{{q["headers"].P50, 500}, {q["headers"].P95, 950}, {quantile(bins, 1000, 1), 1000}} {
		if math.Abs(tc.got-tc.want)/tc.want > 0.02 {
			t.Errorf("%.2f, want %.0f within 2%%", tc.got, tc.want)
		}
	}
}

// TestHistBucket: a value's bucket is how many times histBase fits
// between histFloor and it; below histFloor (zero among them) it is -1.
func TestHistBucket(t *testing.T) {
	for _, tc := range []struct {
		ms   float64
		want int32
	}{
		{0, -1},
		{histFloor * 0.999, -1},
		{histFloor, 0},
		{histFloor * 1.0199, 0},
		{histFloor * 1.0201, 1},
		{histFloor * math.Pow(histBase, 100) * 1.001, 100},
		{histFloor * math.Pow(histBase, 100) * 0.999, 99},
	} {
		if got := histBucket(tc.ms); got != tc.want {
			t.Errorf("histBucket(%g) = %d, want %d", tc.ms, got, tc.want)
		}
	}
}

// TestPhaseBins: durations added in any order, to any phase, keep one bin
// for each phase and bucket, in order of phase then bucket, each with its
// count: in place while they fit, and after; merged as if added.
func TestPhaseBins(t *testing.T) {
	type key struct {
		phase  uint8
		bucket int32
	}
	for _, n := range []int{1, fewBins, 20000} {
		rng := rand.New(rand.NewPCG(8, uint64(n)))
		var pb, half, rest phaseBins
		want := map[key]int64{}
		for i := range n {
			phase := rng.IntN(results.NumPhases)
			ms := math.Exp(rng.Float64()*20-8) * float64(rng.IntN(2)) // zeros, and 0.0003 ms to 8 s
			if n == fewBins {
				phase, ms = i, 1 // six bins: all in place
			}
			pb.add(phase, ms)
			if i%2 == 0 {
				half.add(phase, ms)
			} else {
				rest.add(phase, ms)
			}
			want[key{uint8(phase), histBucket(ms)}]++
		}
		half.merge(&rest)
		for _, x := range []*phaseBins{&pb, &half} {
			bins := x.bins()
			if len(bins) != len(want) || (x.hist == nil) != (len(want) <= fewBins) {
				t.Fatalf("%d durations: %d bins (in place: %v), want %d", n, len(bins), x.hist == nil, len(want))
			}
			for i, bin := range bins {
				if i > 0 && cmpBin(bins[i-1], bin) >= 0 {
					t.Fatalf("%d durations: bins %d and %d out of order: %+v, %+v", n, i-1, i, bins[i-1], bin)
				}
				if k := (key{bin.phase, bin.bucket}); bin.count != want[k] {
					t.Errorf("%d durations: %+v: %d, want %d", n, k, bin.count, want[k])
				}
			}
		}
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
