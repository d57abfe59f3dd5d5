package report

import (
	"cmp"
	"math"
	"slices"

	"github.com/fetch-dev/fetch/fetch/results"
)

// ProxyStats is what a report keeps of one proxy while it is built: its
// part of the report, and the durations of its attempts' phases, from
// which ListProxies makes the part's quantiles. The engine's collector
// keeps one for each route that carried an attempt or changed its health,
// and Summarize one for each proxy it lists. Its zero value has no
// attempt; set Proxy.Pool for a proxy of a pool. It is not safe for
// concurrent use.
type ProxyStats struct {
	Proxy   Proxy // its part of the report, PhasesMS made by ListProxies
	phases  phaseBins
	stateAt float64 // AtMS of the last state change, kept or not (see MaxStateChanges)
}

// Merge adds o's statistics to ps's, as if their attempts and state
// changes had been ps's: counts add up, the most in flight is the larger,
// state changes are merged in time order and the state is the later one's.
func (ps *ProxyStats) Merge(o *ProxyStats) {
	p, q := &ps.Proxy, &o.Proxy
	p.Attempts += q.Attempts
	p.OK += q.OK
	p.Failed += q.Failed
	p.Banned += q.Banned
	p.MaxInFlight = max(p.MaxInFlight, q.MaxInFlight)
	if q.State != "" && (p.State == "" || o.stateAt >= ps.stateAt) {
		p.State, ps.stateAt = q.State, o.stateAt
	}
	p.HealthDropped += q.HealthDropped
	if len(q.Health) > 0 {
		p.Health = append(p.Health, q.Health...)
		slices.SortStableFunc(p.Health, func(a, b StateChange) int { return cmp.Compare(a.AtMS, b.AtMS) })
		if n := len(p.Health); n > MaxStateChanges {
			p.HealthDropped += n - MaxStateChanges
			p.Health = p.Health[:MaxStateChanges]
		}
	}
	ps.phases.merge(&o.phases)
}

// addPhases adds the durations of an attempt's phases.
func (ps *ProxyStats) addPhases(phases *results.PhaseTimes) {
	for i := range results.NumPhases {
		if ms, ok := phases.At(i); ok {
			ps.phases.add(i, ms)
		}
	}
}

// finish fills in ps.Proxy.PhasesMS from the phases' durations and returns
// ps.Proxy.
func (ps *ProxyStats) finish() *Proxy {
	ps.Proxy.PhasesMS = ps.phases.quantiles()
	return &ps.Proxy
}

// Attempt counts one attempt through the proxy, which had inFlight
// attempts in flight, with the durations of its phases.
func (ps *ProxyStats) Attempt(ok bool, inFlight int, phases *results.PhaseTimes) {
	p := &ps.Proxy
	p.Attempts++
	if ok {
		p.OK++
	} else {
		p.Failed++
	}
	p.MaxInFlight = max(p.MaxInFlight, inFlight)
	ps.addPhases(phases)
}

// Change notes the proxy's change of health state sc: kept in its Health
// when room says the caller's bound on all proxies' changes allows it and
// the proxy has fewer than MaxStateChanges, else counted in
// HealthDropped. Either way its State is sc's. It reports whether sc was
// kept.
func (ps *ProxyStats) Change(sc StateChange, room bool) bool {
	p := &ps.Proxy
	kept := room && len(p.Health) < MaxStateChanges
	if kept {
		p.Health = append(p.Health, sc)
	} else {
		p.HealthDropped++
	}
	p.State, ps.stateAt = sc.State, sc.AtMS
	return kept
}

// MaxStateChanges bounds the state changes kept per proxy, the first
// ones: a pool of 100,000 proxies that go on failing and coming back keeps
// 3.2 MB of them (with the engine's bound for all proxies together), not
// gigabytes. The others are counted (Proxy.HealthDropped).
const MaxStateChanges = 1000

// ListProxies returns the report's proxies from the statistics of each
// identity: the listed busiest (by attempts, then by identity), their
// phases' quantiles made, and the rest summed up.
func ListProxies(byID map[string]*ProxyStats, listed int) (map[string]*Proxy, *ProxiesOther) {
	type idStats struct {
		id string
		ps *ProxyStats
	}
	all := make([]idStats, 0, len(byID))
	for id, ps := range byID {
		all = append(all, idStats{id, ps})
	}
	listed = max(listed, 0)
	var other *ProxiesOther
	if len(all) > listed {
		// The busiest first: more attempts, then the smaller identity.
		selectFirst(all, listed, func(a, b idStats) bool {
			return a.ps.Proxy.Attempts > b.ps.Proxy.Attempts || a.ps.Proxy.Attempts == b.ps.Proxy.Attempts && a.id < b.id
		})
		other = &ProxiesOther{Proxies: len(all) - listed}
		for _, x := range all[listed:] {
			other.add(&x.ps.Proxy)
		}
		all = all[:listed]
	}
	proxies := make(map[string]*Proxy, len(all))
	for _, x := range all {
		proxies[x.id] = x.ps.finish()
	}
	return proxies, other
}

// selectFirst moves the k first elements of s in the order of before (a
// strict total order) to s[:k], in no particular order, and the rest after
// them: with a heap of the k, whose last is replaced by any later element
// before it, in O(len(s) log k) and in practice about one comparison an
// element, where sorting 100,000 proxies' statistics to list 1,000 took 17
// comparisons each.
func selectFirst[T any](s []T, k int, before func(a, b T) bool) {
	if k <= 0 || k >= len(s) {
		return
	}
	h := s[:k]
	// A heap with the last of the k in order at its root.
	down := func(i int) {
		for {
			j := 2*i + 1
			if j >= k {
				return
			}
			if j+1 < k && before(h[j], h[j+1]) {
				j++
			}
			if !before(h[i], h[j]) {
				return
			}
			h[i], h[j] = h[j], h[i]
			i = j
		}
	}
	for i := k/2 - 1; i >= 0; i-- {
		down(i)
	}
	for i := k; i < len(s); i++ {
		if before(s[i], h[0]) {
			h[0], s[i] = s[i], h[0]
			down(0)
		}
	}
}

// phaseBins keeps the durations of a proxy's attempts by phase, each in
// a logarithmic bucket about 2% wide, so that its memory does not grow with
// the number of attempts and its quantiles are within 2% of the exact ones.
// A proxy of a large pool, with an attempt or two, has a handful of bins:
// they are kept in place (few), in one list ordered by phase and then
// bucket. Past fewBins each phase has its own list by bucket (hist): a
// busy proxy has a few hundred bins a phase, and none more than the 1,400
// or so between 1 µs and a day. A histogram for each phase, each with a
// bin in place, was 432 bytes for every identity that carried an attempt.
type phaseBins struct {
	few  [fewBins]phaseBin
	nfew uint8
	hist *[results.NumPhases][]phaseBin // by phase, each by bucket, ascending; once there are more than fewBins, and few is then unused
}

// fewBins is how many bins a proxy keeps in place: those of an attempt
// through a proxy, every phase but input (queue, dns, connect, proxy, tls,
// request, headers, body), so that an attempt on a new tunnel to an
// https target fits too.
const fewBins = results.NumPhases - 1

type phaseBin struct {
	count  int64
	bucket int32
	phase  uint8
}

// cmpBin orders bins by phase, then bucket.
func cmpBin(a, b phaseBin) int {
	return cmp.Or(cmp.Compare(a.phase, b.phase), cmp.Compare(a.bucket, b.bucket))
}

const (
	histBase  = 1.02
	histFloor = 0.001 // ms; anything smaller counts as zero
)

var logHistBase = math.Log(histBase)

// histBucket is the bucket of ms: -1 below histFloor, else the power of
// histBase that ms/histFloor reaches.
func histBucket(ms float64) int32 {
	if ms < histFloor {
		return -1
	}
	return int32(math.Log(ms/histFloor) / logHistBase)
}

// bins returns every bin, ordered by phase and then bucket: a copy when
// the phases have their own lists.
func (pb *phaseBins) bins() []phaseBin {
	if pb.hist == nil {
		return pb.few[:pb.nfew]
	}
	return slices.Concat(pb.hist[:]...)
}

// add adds a duration of ms to phase.
func (pb *phaseBins) add(phase int, ms float64) {
	pb.addBin(phaseBin{count: 1, bucket: histBucket(ms), phase: uint8(phase)})
}

// merge adds o's durations to pb's.
func (pb *phaseBins) merge(o *phaseBins) {
	for _, bin := range o.bins() {
		pb.addBin(bin)
	}
}

// addBin adds bin's count of durations to its phase and bucket.
func (pb *phaseBins) addBin(bin phaseBin) {
	if pb.hist != nil {
		pb.hist[bin.phase] = addToBins(pb.hist[bin.phase], bin)
		return
	}
	if int(pb.nfew) < fewBins {
		bins := addToBins(pb.few[:pb.nfew:fewBins], bin) // in place: there is room
		pb.nfew = uint8(len(bins))
		return
	}
	bins := pb.few[:pb.nfew]
	if i, found := slices.BinarySearchFunc(bins, bin, cmpBin); found {
		bins[i].count += bin.count
		return
	}
	// Each phase its own list from now on.
	pb.hist = new([results.NumPhases][]phaseBin)
	for _, b := range bins {
		pb.hist[b.phase] = append(pb.hist[b.phase], b)
	}
	pb.nfew = 0
	pb.hist[bin.phase] = addToBins(pb.hist[bin.phase], bin)
}

// addToBins adds bin's count to bins, ordered by phase and bucket, and
// returns them.
func addToBins(bins []phaseBin, bin phaseBin) []phaseBin {
	i, found := slices.BinarySearchFunc(bins, bin, cmpBin)
	if found {
		bins[i].count += bin.count
		return bins
	}
	return slices.Insert(bins, i, bin)
}

// quantiles returns the 50th and 95th percentiles of each phase that has
// durations, by phase name.
func (pb *phaseBins) quantiles() map[string]Quantiles {
	out := map[string]Quantiles{}
	bins := pb.bins()
	for i := 0; i < len(bins); {
		j, n := i, int64(0)
		for ; j < len(bins) && bins[j].phase == bins[i].phase; j++ {
			n += bins[j].count
		}
		out[results.Phases[bins[i].phase]] = Quantiles{P50: quantile(bins[i:j], n, 0.50), P95: quantile(bins[i:j], n, 0.95)}
		i = j
	}
	return out
}

// quantile returns the q-quantile (0 < q <= 1) of the n durations in the
// bins of one phase, as the middle of its bucket, rounded to a hundredth of
// a millisecond.
func quantile(bins []phaseBin, n int64, q float64) float64 {
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for _, bin := range bins {
		seen += bin.count
		if seen >= rank {
			if bin.bucket < 0 {
				return 0
			}
			v := histFloor * math.Pow(histBase, float64(bin.bucket)+0.5)
			return math.Round(v*100) / 100
		}
	}
	return 0
}
