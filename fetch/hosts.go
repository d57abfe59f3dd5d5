package fetch

import (
	"math"
	"math/bits"
)

// DefaultReportHosts is how many hosts a report lists by default
// (--report-hosts): the busiest ones. The others are summed up in
// Report.HostsOther.
const DefaultReportHosts = 1000

// hostTable keeps the per-host part of a report in memory that does not
// grow with the number of hosts: exact counts for at most max hosts, chosen
// by the space-saving algorithm (Metwally, Agrawal, El Abbadi 2005), and one
// total for the rest. A host that is not tracked when the table is full
// takes the place of the tracked host with the fewest estimated attempts;
// that host's counts go to the rest, and the newcomer is charged its
// estimate as Missed, the most attempts it may have had before. So:
//
//   - every host with more than T/max of the T attempts is tracked;
//   - a tracked host's true attempts lie in [Attempts, Attempts+Missed],
//     and Missed is at most T/max;
//   - the counts of the tracked hosts plus the rest's add up to the whole
//     run's exactly; with no more than max hosts, every count is exact.
//
// It is not safe for concurrent use.
type hostTable struct {
	max   int
	pos   map[string]*hostEntry // the tracked hosts
	heap  []*hostEntry          // the same, a min-heap by estimate
	other HostsOther            // Hosts is filled in by report
	seen  hyperLogLog           // the distinct hosts ever tracked
}

type hostEntry struct {
	host string
	i    int // index in heap
	r    HostReport
}

// estimate is the most attempts e's host may have had.
func (e *hostEntry) estimate() int { return e.r.Attempts + e.r.Missed }

// newHostTable makes a table of up to max hosts. Its map grows as hosts
// come: most runs see a few, and a map made for a thousand would be
// cleared page by page at every start.
func newHostTable(max int) *hostTable {
	return &hostTable{max: max, pos: make(map[string]*hostEntry)}
}

// add counts one attempt to host, which had inFlight attempts in flight.
func (t *hostTable) add(host string, ok bool, inFlight int) {
	e := t.pos[host]
	if e == nil {
		t.seen.add(host)
		switch {
		case t.max <= 0:
			t.other.count(ok)
			return
		case len(t.heap) < t.max:
			e = &hostEntry{host: host, i: len(t.heap)}
			t.heap = append(t.heap, e)
			t.up(e.i)
		default: // evict the least, whose estimate the newcomer inherits
			e = t.heap[0]
			t.other.Attempts += e.r.Attempts
			t.other.OK += e.r.OK
			t.other.Failed += e.r.Failed
			delete(t.pos, e.host)
			*e = hostEntry{host: host, r: HostReport{Missed: e.estimate()}}
		}
		t.pos[host] = e
	}
	e.r.Attempts++
	if ok {
		e.r.OK++
	} else {
		e.r.Failed++
	}
	e.r.MaxInFlight = max(e.r.MaxInFlight, inFlight)
	t.down(e.i)
}

func (o *HostsOther) count(ok bool) {
	o.Attempts++
	if ok {
		o.OK++
	} else {
		o.Failed++
	}
}

// ban counts a ban of an attempt to host, already added: on the host's
// entry, or with the hosts not listed.
func (t *hostTable) ban(host string) {
	if e := t.pos[host]; e != nil {
		e.r.Banned++
		return
	}
	t.other.Banned++
}

func (t *hostTable) swap(i, j int) {
	t.heap[i], t.heap[j] = t.heap[j], t.heap[i]
	t.heap[i].i, t.heap[j].i = i, j
}

func (t *hostTable) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if t.heap[p].estimate() <= t.heap[i].estimate() {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *hostTable) down(i int) {
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

// report returns the tracked hosts and, when some attempts or hosts are not
// among them, the rest.
func (t *hostTable) report() (map[string]*HostReport, *HostsOther) {
	hosts := make(map[string]*HostReport, len(t.heap))
	for _, e := range t.heap {
		r := e.r
		hosts[e.host] = &r
	}
	other := t.other
	other.Hosts = max(0, t.seen.count()-len(t.heap))
	if other.Hosts == 0 && other.Attempts == 0 {
		return hosts, nil
	}
	return hosts, &other
}

// hyperLogLog estimates the number of distinct strings added (Flajolet et
// al. 2007) in 16 KiB, within about 0.8% (one standard error); below a few
// thousand it counts by linear counting, which is all but exact. The zero
// value is empty.
type hyperLogLog struct {
	reg *[hllM]uint8
}

const (
	hllP = 14
	hllM = 1 << hllP
)

func (h *hyperLogLog) add(s string) {
	if h.reg == nil {
		h.reg = new([hllM]uint8)
	}
	x := hash64(s)
	i := x >> (64 - hllP)
	rho := uint8(bits.LeadingZeros64(x<<hllP|1<<(hllP-1)) + 1)
	if rho > h.reg[i] {
		h.reg[i] = rho
	}
}

func (h *hyperLogLog) count() int {
	if h.reg == nil {
		return 0
	}
	sum, zeros := 0.0, 0
	for _, r := range h.reg {
		sum += math.Ldexp(1, -int(r))
		if r == 0 {
			zeros++
		}
	}
	m := float64(hllM)
	est := 0.7213 / (1 + 1.079/m) * m * m / sum
	if est <= 2.5*m && zeros > 0 {
		est = m * math.Log(m/float64(zeros))
	}
	return int(math.Round(est))
}

// hash64 is FNV-1a of s, mixed by SplitMix64's finalizer so that every bit
// depends on every byte.
func hash64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
