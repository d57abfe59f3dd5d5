package limits

import (
	"math"
	"math/bits"
	"time"
)

// The scheduler's index makes a grant cost O(log P) in the number of
// proxies P instead of a scan of them all.
//
// A proxy is available when it could take an attempt now as far as it alone
// is concerned: not rejected, not benched, and not a probing proxy whose
// probe is out. A budget is open when it has a free concurrency slot, its
// rate limit allows an attempt now, and at least one of its proxies is
// available. Each budget keeps a heap of its available proxies (ready[b]),
// best first under the policy, and the open budgets are in a heap (top)
// ordered by their best proxy (and, for least-inflight, first by how full
// the budget is). The best proxy of the top budget is the best proxy that can
// start now, whatever the request; the per-request conditions (the target's
// pushback for that proxy, Avoid, the hold-back while draining) are checked
// for the candidates in order, setting each one that fails aside until the
// pick is over.
//
// Benched proxies and rate-limited budgets are parked in a heap of wake-up
// times (parked) and come back when their time comes; full budgets and
// probing proxies whose probe is out come back on a release.
//
// While draining, proxies are ordered fastest first (by their estimated
// time per attempt, unknown ones first): the hold-back is monotonic in that
// time, so the first candidate held back means that every later one is too.

// heap32 is a binary min-heap of ids with their positions kept in pos
// (-1: absent), ordered by less. The same pos slice serves every heap an id
// can be in, since it is in at most one at a time.
type heap32 []int32

func (h *heap32) push(id int32, pos []int32, less func(a, b int32) bool) {
	*h = append(*h, id)
	pos[id] = int32(len(*h) - 1)
	h.up(len(*h)-1, pos, less)
}

func (h *heap32) remove(id int32, pos []int32, less func(a, b int32) bool) {
	i := int(pos[id])
	n := len(*h) - 1
	if i != n {
		h.swap(i, n, pos)
	}
	*h = (*h)[:n]
	pos[id] = -1
	if i != n {
		h.fix(i, pos, less)
	}
}

func (h heap32) fix(i int, pos []int32, less func(a, b int32) bool) {
	if !h.down(i, pos, less) {
		h.up(i, pos, less)
	}
}

func (h heap32) swap(i, j int, pos []int32) {
	h[i], h[j] = h[j], h[i]
	pos[h[i]] = int32(i)
	pos[h[j]] = int32(j)
}

func (h heap32) up(j int, pos []int32, less func(a, b int32) bool) {
	for j > 0 {
		i := (j - 1) / 2
		if !less(h[j], h[i]) {
			break
		}
		h.swap(i, j, pos)
		j = i
	}
}

func (h heap32) down(i0 int, pos []int32, less func(a, b int32) bool) bool {
	i, n := i0, len(h)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && less(h[j2], h[j]) {
			j = j2
		}
		if !less(h[j], h[i]) {
			break
		}
		h.swap(i, j, pos)
		i = j
	}
	return i > i0
}

// heapify orders h from scratch.
func (h heap32) heapify(pos []int32, less func(a, b int32) bool) {
	for i, id := range h {
		pos[id] = int32(i)
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i, pos, less)
	}
}

// wake is a parked proxy or budget and when to look at it again. An entry
// whose time is not its owner's wakeAt any more is stale and skipped.
type wake struct {
	at     time.Time
	id     int32
	budget bool
}

type wakeHeap []wake

func (h *wakeHeap) push(w wake) {
	*h = append(*h, w)
	q := *h
	for j := len(q) - 1; j > 0; {
		i := (j - 1) / 2
		if !q[j].at.Before(q[i].at) {
			break
		}
		q[i], q[j] = q[j], q[i]
		j = i
	}
}

func (h *wakeHeap) pop() wake {
	q := *h
	w := q[0]
	n := len(q) - 1
	q[0] = q[n]
	q = q[:n]
	for i := 0; ; {
		j := 2*i + 1
		if j >= n {
			break
		}
		if j2 := j + 1; j2 < n && q[j2].at.Before(q[j].at) {
			j = j2
		}
		if !q[j].at.Before(q[i].at) {
			break
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
	*h = q
	return w
}

// The heaps compare keys, kept up to date in pkey and bkey by refreshProxy
// and refreshBudget (and build and reindex), not the proxies' and budgets'
// states: a heap of 100,000 budgets compares about 17 pairs for a change,
// and reading two proxies and two budgets of a pool that large for each
// missed the caches every time (a grant and a release cost 1.4 µs with 100,000
// proxies against 0.57 with 10, nearly all of it the comparisons).
//
// A key orders by a, then b, then c, then id, all ascending:
//   - a: while draining, the proxy's pace (est; 0, not known, last); else 0;
//   - b: a budget's load under least-inflight (see loadKey); 0 for a proxy
//     in its budget's heap, whose members all share their budget's load;
//   - c: the policy's order: attempts granted (least-inflight, least-used),
//     the grant that last went to it (round-robin), its next turn on the
//     random clock (random);
//   - id: the proxy (a budget's key is its best proxy's).
type key struct {
	a, b, c uint64
	id      int32
}

func (k *key) less(o *key) bool {
	switch {
	case k.a != o.a:
		return k.a < o.a
	case k.b != o.b:
		return k.b < o.b
	case k.c != o.c:
		return k.c < o.c
	}
	return k.id < o.id
}

// proxyLess orders proxies under the policy (best first); while draining,
// fastest first, then under the policy. A proxy whose pace is not known
// (est 0: no attempt of it has succeeded yet) comes after those that have
// shown theirs: it may be slow, or fail every attempt. Call with s.mu held.
func (s *Local) proxyLess(i, j int32) bool { return s.pkey[i].less(&s.pkey[j]) }

// budgetLess orders open budgets by their best available proxy, and under
// least-inflight first by how full they are.
func (s *Local) budgetLess(a, b int32) bool { return s.bkey[a].less(&s.bkey[b]) }

// proxyKey is proxy p's key in its budget's heap, from its state now.
func (s *Local) proxyKey(p int) key {
	ps := &s.proxies[p]
	k := key{id: int32(p)}
	if s.draining {
		k.a = math.MaxUint64 // not known: last
		if ps.est > 0 {
			k.a = uint64(ps.est)
		}
	}
	switch s.policy {
	case RoundRobin:
		k.c = uint64(ps.turn)
	case Random:
		k.c = math.Float64bits(ps.rkey) // >= 0: its bits are in its order
	default:
		k.c = uint64(ps.used)
	}
	return k
}

// ready returns budget b's heap of its available proxies, best first:
// its piece of rall, with room for all its members. Call with s.mu held.
func (s *Local) ready(b int32) heap32 {
	o := s.roff[b]
	return s.rall[o : o+s.rlen[b] : s.roff[b+1]]
}

// members is how many proxies budget b has.
func (s *Local) members(b int32) int { return int(s.roff[b+1] - s.roff[b]) }

// pushReady puts proxy p, available, in its budget b's heap.
func (s *Local) pushReady(b, p int32) {
	h := s.ready(b)
	h.push(p, s.mpos, s.proxyLess) // within its capacity: in place
	s.rlen[b]++
}

// removeReady takes proxy p out of its budget b's heap.
func (s *Local) removeReady(b, p int32) {
	h := s.ready(b)
	h.remove(p, s.mpos, s.proxyLess)
	s.rlen[b]--
}

// budgetKey is budget b's key in top: its best proxy's, with its load.
// b has an available proxy.
func (s *Local) budgetKey(b int) key {
	k := s.pkey[s.rall[s.roff[b]]]
	if s.policy == LeastInFlight {
		k.b = s.loadKey(b)
	}
	return k
}

// loadKey orders budgets by how full they are: in flight over nominal
// capacity, as a float64's bits (the scan of index_test.go compares the
// two products exactly). Both are at most a few million, so two different
// loads differ by more than a float64 rounds off, and equal ones (1/2 and
// 2/4) divide to the same float64.
func (s *Local) loadKey(b int) uint64 {
	bs := &s.budgets[b]
	return math.Float64bits(float64(bs.inFlight) / float64(bs.nominal()))
}

// available reports whether proxy p could take an attempt at now as far
// as its own state goes. Call with s.mu held.
func (s *Local) available(p int, now time.Time) bool {
	ps := &s.proxies[p]
	return !ps.rejected && !(ps.probing && ps.probeOut) && !(ps.benched && s.benchedUntil[int32(p)].After(now))
}

// refreshProxy puts proxy p where its state says it belongs in the index,
// after any change to it (or to the key it is ordered by), and its budget
// too. Call with s.mu held.
func (s *Local) refreshProxy(p int, now time.Time) {
	ps := &s.proxies[p]
	s.holdRate(p)
	b := ps.budget
	in := s.mpos[p] >= 0
	want := s.available(p, now)
	if want && !in && s.policy == Random {
		ps.rkey = s.rclock + s.rng.ExpFloat64()
	}
	s.pkey[p] = s.proxyKey(p)
	switch {
	case want && !in:
		s.pushReady(b, int32(p))
	case !want && in:
		s.removeReady(b, int32(p))
	case in:
		s.ready(b).fix(int(s.mpos[p]), s.mpos, s.proxyLess)
	}
	if ps.benched && !ps.rejected {
		if until := s.benchedUntil[int32(p)]; until.After(now) && ps.wakeAt != wakeKey(until) {
			ps.wakeAt = wakeKey(until)
			s.parked.push(wake{at: until, id: int32(p)})
		}
	}
	s.refreshBudget(int(b), now)
}

// refreshBudget puts budget b where its state says it belongs: open (in
// top), parked until its rate limit allows, or out until a release. Call
// with s.mu held.
func (s *Local) refreshBudget(b int, now time.Time) {
	bs := &s.budgets[b]
	room := bs.capacity <= 0 || bs.inFlight < bs.capacity
	want := room && s.rlen[b] > 0
	if want {
		if at := bs.limiter.AllowAt(); at.After(now) {
			want = false
			if bs.wakeAt != wakeKey(at) {
				bs.wakeAt = wakeKey(at)
				s.parked.push(wake{at: at, id: int32(b), budget: true})
			}
		}
	}
	if s.rlen[b] > 0 {
		s.bkey[b] = s.budgetKey(b)
	}
	switch in := s.bpos[b] >= 0; {
	case want && !in:
		s.top.push(int32(b), s.bpos, s.budgetLess)
	case !want && in:
		s.top.remove(int32(b), s.bpos, s.budgetLess)
	case in:
		s.top.fix(int(s.bpos[b]), s.bpos, s.budgetLess)
	}
}

// unpark brings back what was parked until now or earlier, and returns how
// long until the next parked wake-up (-1: none). Call with s.mu held.
func (s *Local) unpark(now time.Time) time.Duration {
	for len(s.parked) > 0 {
		w := s.parked[0]
		var at *int64
		if w.budget {
			at = &s.budgets[w.id].wakeAt
		} else {
			at = &s.proxies[w.id].wakeAt
		}
		if wakeKey(w.at) != *at {
			s.parked.pop() // stale
			continue
		}
		if w.at.After(now) {
			return w.at.Sub(now)
		}
		s.parked.pop()
		*at = 0
		if w.budget {
			s.refreshBudget(int(w.id), now)
		} else {
			s.refreshProxy(int(w.id), now)
		}
	}
	return -1
}

// reindex orders every heap from scratch: the order changed (Drain).
// Call with s.mu held.
func (s *Local) reindex() {
	for p := range s.proxies {
		s.pkey[p] = s.proxyKey(p)
	}
	for b := range s.rlen {
		s.ready(int32(b)).heapify(s.mpos, s.proxyLess)
		if s.rlen[b] > 0 {
			s.bkey[b] = s.budgetKey(b)
		}
	}
	s.top.heapify(s.bpos, s.budgetLess)
}

// The hold-back needs, for a proxy, the rate the proxies faster than it
// carry together. It is kept incrementally in a Fenwick tree over buckets of
// the estimated time per attempt: the buckets are the top bits of the
// estimate as a float64 (its exponent and 7 bits of mantissa), so they are
// ordered as the estimates are and under 1% wide; proxies in a proxy's own
// bucket do not count as faster.
const (
	holdMant    = 7
	holdBuckets = 44 << holdMant // estimates from 1ns to 2^44ns (4.9h)
)

// holdBucket returns the bucket of estimate d (> 0).
func holdBucket(d time.Duration) int {
	f := float64(min(d, 1<<44-1))
	b := int(math.Float64bits(f)>>(52-holdMant)) - 1023<<holdMant
	return min(max(b, 0), holdBuckets-1)
}

// holdFloor returns the smallest estimate in bucket b.
func holdFloor(b int) time.Duration {
	return time.Duration(math.Float64frombits(uint64(b+1023<<holdMant) << (52 - holdMant)))
}

// holdTree is a Fenwick tree of the rates and counts of proxies by bucket.
type holdTree struct {
	rate  []float64
	count []int32
}

func (t *holdTree) add(b int, rate float64, n int32) {
	if t.rate == nil {
		t.rate, t.count = make([]float64, holdBuckets+1), make([]int32, holdBuckets+1)
	}
	for i := b + 1; i <= holdBuckets; i += i & -i {
		t.rate[i] += rate
		t.count[i] += n
	}
}

// below returns the total rate and count of the buckets before b.
func (t *holdTree) below(b int) (float64, int32) {
	var sum float64
	var n int32
	for i := b; i > 0 && t.rate != nil; i -= i & -i {
		sum += t.rate[i]
		n += t.count[i]
	}
	return sum, n
}

// first returns the first bucket with a proxy in it, or -1.
func (t *holdTree) first() int {
	if t.count == nil {
		return -1
	}
	pos := 0
	for step := 1 << (bits.Len(holdBuckets) - 1); step > 0; step >>= 1 {
		if next := pos + step; next <= holdBuckets && t.count[next] == 0 {
			pos = next
		}
	}
	if pos >= holdBuckets {
		return -1
	}
	return pos // bucket pos is the first with a count (index pos+1)
}

// holdRate updates proxy p's share of the hold-back's tree: the rate it
// carries at its pace if it is healthy and its pace is known. Call with s.mu
// held.
func (s *Local) holdRate(p int) {
	ps := &s.proxies[p]
	bucket, rate := int32(-1), 0.0
	if ps.est > 0 && !ps.probing && !ps.rejected {
		bucket = int32(holdBucket(ps.est))
		c := s.budgets[ps.budget].nominal()
		rate = float64(c) / float64(s.members(ps.budget)) / ps.est.Seconds()
	}
	if bucket == ps.holdBucket && rate == ps.holdRate {
		return
	}
	if ps.holdBucket >= 0 {
		s.hold.add(int(ps.holdBucket), -ps.holdRate, -1)
	}
	if bucket >= 0 {
		s.hold.add(int(bucket), rate, 1)
	}
	ps.holdBucket, ps.holdRate = bucket, rate
}
