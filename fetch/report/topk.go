package report

// topTable keeps what a report says of the busiest keys (hosts, or proxies
// in a report rebuilt from records) in memory that does not grow with the
// number of keys: a value V for at most max keys, chosen by the
// space-saving algorithm (Metwally, Agrawal, El Abbadi 2005). A key that is
// not tracked when the table is full takes the place of the tracked key
// with the fewest estimated attempts; the caller moves that key's counts
// to its rest, and the newcomer is charged its estimate as missed, the most
// attempts it may have had before. So:
//
//   - every key with more than T/max of the T attempts is tracked;
//   - a tracked key's true attempts lie in [attempts, attempts+missed],
//     and missed is at most T/max;
//   - the counts of the tracked keys plus the rest's add up to the whole
//     run's exactly; with no more than max keys, every count is exact.
//
// It is not safe for concurrent use.
type topTable[V any] struct {
	max   int
	pos   map[string]*topEntry[V] // the tracked keys
	heap  []*topEntry[V]          // the same, a min-heap by estimate
	seen  distinctCount           // the distinct keys ever counted
	left  int                     // keys that left the table or were never in it, each time: at least the untracked ones
	evict func(e *topEntry[V])    // moves an entry's counts to the rest, before it is reused
}

// topEntry is a tracked key: its attempts since it was tracked, the most
// it may have had before (missed), and its value.
type topEntry[V any] struct {
	key              string
	i                int // index in heap
	attempts, missed int
	v                V
}

// estimate is the most attempts e's key may have had.
func (e *topEntry[V]) estimate() int { return e.attempts + e.missed }

// newTopTable makes a table of up to max keys, which calls evict with the
// entry of a key that leaves it, so that the caller moves its counts to its
// rest. Its map grows as keys come: most runs see a few, and a map made for
// a thousand would be cleared page by page at every start.
func newTopTable[V any](max int, evict func(e *topEntry[V])) *topTable[V] {
	return &topTable[V]{max: max, pos: make(map[string]*topEntry[V]), evict: evict}
}

// count counts one attempt to key and returns its entry, to add the rest
// of the attempt to e.v. When key was not tracked and the table was full,
// it takes the place of the least tracked key (after evict), and e.v is
// the zero V. e is nil when the table tracks no key (max 0).
func (t *topTable[V]) count(key string) *topEntry[V] {
	e := t.pos[key]
	if e == nil {
		t.seen.add(key)
		switch {
		case t.max <= 0:
			t.left++
			return nil
		case len(t.heap) < t.max:
			e = &topEntry[V]{key: key, i: len(t.heap)}
			t.heap = append(t.heap, e)
			t.up(e.i)
		default: // evict the least, whose estimate the newcomer inherits
			e = t.heap[0]
			t.evict(e)
			t.left++
			delete(t.pos, e.key)
			*e = topEntry[V]{key: key, i: e.i, missed: e.estimate()}
		}
		t.pos[key] = e
	}
	e.attempts++
	t.down(e.i)
	return e
}

// get returns key's entry, or nil when key is not tracked.
func (t *topTable[V]) get(key string) *topEntry[V] { return t.pos[key] }

// untracked is how many distinct keys were counted but are not tracked:
// exact up to exactLimit distinct keys, an estimate within about 1%
// beyond, but never more than left nor less than 1 when a key ever left.
func (t *topTable[V]) untracked() int {
	if t.left == 0 {
		return 0
	}
	return min(max(t.seen.count()-len(t.heap), 1), t.left)
}

func (t *topTable[V]) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].i, t.heap[j].i = i, j
}

func (t *topTable[V]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].estimate() <= t.heap[i].estimate() {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *topTable[V]) down(i int) {
	n := len(t.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.heap[r].estimate() < t.heap[l].estimate() {
			m = r
		}
		if t.heap[i].estimate() <= t.heap[m].estimate() {
			return
		}
		t.swap(i, m)
		i = m
	}
}
