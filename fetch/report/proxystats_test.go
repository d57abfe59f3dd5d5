package report

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/fetch-dev/fetch/fetch/results"
)

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

// TestProxiesOtherDropsPools: the proxies not listed are broken down by
// pool up to maxOtherPools pools, whatever --report-proxies is; past that
// the breakdown is left out and said to be.
func TestProxiesOtherDropsPools(t *testing.T) {
	for _, pools := range []int{maxOtherPools, maxOtherPools + 1} {
		byID := map[string]*ProxyStats{}
		for i := range pools {
			ps := &ProxyStats{Proxy: Proxy{Pool: fmt.Sprintf("pool%d", i)}}
			ps.Attempt(true, 1, &results.PhaseTimes{})
			byID[fmt.Sprintf("http://p%d:1", i)] = ps
		}
		_, other := ListProxies(byID, 0)
		dropped := pools > maxOtherPools
		if other == nil || other.Attempts != pools || other.PoolsDropped != dropped || (other.Pools == nil) != dropped ||
			!dropped && len(other.Pools) != pools {
			t.Fatalf("%d pools: proxies_other %+v, want pools dropped: %v", pools, other, dropped)
		}
	}
}

// TestMergeLeavesItsArgument: merging a proxy's statistics into others
// (an identity's routes added up, see the engine's collector) adds them
// up, and leaves the merged ones as they were, their bins in place or not.
func TestMergeLeavesItsArgument(t *testing.T) {
	headers := func(ms float64) *results.PhaseTimes {
		var pt results.PhaseTimes
		pt.SetAt(results.IndexHeaders, ms)
		return &pt
	}
	var many, one ProxyStats
	for i := range fewBins + 4 {
		many.Attempt(true, 1, headers(float64(10+i)))
	}
	one.Attempt(false, 2, headers(10))
	manyBins, oneBins := slices.Clone(many.phases.bins()), slices.Clone(one.phases.bins())
	var sum ProxyStats
	sum.Merge(&many)
	sum.Merge(&one)
	if !slices.Equal(many.phases.bins(), manyBins) || many.phases.hist == nil || !slices.Equal(one.phases.bins(), oneBins) {
		t.Fatalf("merged statistics changed: %v and %v, were %v and %v", many.phases.bins(), one.phases.bins(), manyBins, oneBins)
	}
	if sum.Proxy.Attempts != fewBins+5 || sum.Proxy.OK != fewBins+4 || sum.Proxy.Failed != 1 || sum.Proxy.MaxInFlight != 2 {
		t.Fatalf("sum %+v", sum.Proxy)
	}
	if q := sum.finish().PhasesMS["headers"]; q != (Quantiles{P50: 14.98, P95: 20.97}) {
		t.Fatalf("sum's headers %+v", q)
	}
}

// TestProxyStatsSmall: what a report keeps for each proxy that carried an
// attempt (the engine: each route) stays as small as README says (288
// bytes on a 64-bit machine).
func TestProxyStatsSmall(t *testing.T) {
	if n := unsafe.Sizeof(ProxyStats{}); n > 288 {
		t.Errorf("proxyStats is %d bytes, want at most 288", n)
	}
}

// TestSelectFirst: selectFirst leaves the k first in order, and only them,
// in front, for any k, with ties broken by the order.
func TestSelectFirst(t *testing.T) {
	type item struct{ n, id int }
	before := func(a, b item) bool { return a.n > b.n || a.n == b.n && a.id < b.id }
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		s := make([]item, rng.IntN(60))
		for i := range s {
			s[i] = item{rng.IntN(5), i}
		}
		rng.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
		k := rng.IntN(len(s) + 2)
		got := slices.Clone(s)
		selectFirst(got, k, before)
		want := slices.Clone(s)
		slices.SortFunc(want, func(a, b item) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.id, b.id)) })
		first := min(k, len(s))
		front := slices.Clone(got[:first])
		slices.SortFunc(front, func(a, b item) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.id, b.id)) })
		if !slices.Equal(front, want[:first]) {
			t.Fatalf("k %d of %v: first %v, want %v", k, s, got[:first], want[:first])
		}
		all := slices.Clone(got)
		slices.SortFunc(all, func(a, b item) int { return cmp.Compare(a.id, b.id) })
		for i := range all {
			if all[i].id != i {
				t.Fatalf("k %d: elements lost or repeated: %v", k, got)
			}
		}
	}
}
