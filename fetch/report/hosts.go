package report

import (
	"math"
	"math/bits"
)

// DefaultHosts is how many hosts a report lists by default
// (--report-hosts): the busiest ones. The others are summed up in
// Report.HostsOther.
const DefaultHosts = 1000

// HostTable keeps the per-host part of a report in memory that does not
// grow with the number of hosts: exact counts for at most max hosts, the
// busiest, chosen as topTable chooses them, and one total for the rest
// (HostsOther). A listed host's Missed is the most attempts it may have
// had before it was listed. It is not safe for concurrent use.
type HostTable struct {
	top   *topTable[Host]
	other HostsOther // Hosts is filled in by Report
}

// NewHostTable makes a table that lists at most max hosts.
func NewHostTable(max int) *HostTable {
	t := &HostTable{}
	t.top = newTopTable(max, func(e *topEntry[Host]) {
		t.other.add(e.attempts, e.v.OK, e.v.Failed, e.v.Banned)
	})
	return t
}

// Add counts one attempt to host, which had inFlight attempts in flight.
// A listed host's Attempts and Missed are its entry's, filled in by
// Report.
func (t *HostTable) Add(host string, ok bool, inFlight int) {
	e := t.top.count(host)
	if e == nil {
		t.other.count(ok)
		return
	}
	r := &e.v
	if ok {
		r.OK++
	} else {
		r.Failed++
	}
	r.MaxInFlight = max(r.MaxInFlight, inFlight)
}

// Ban counts a ban of an attempt to host, already added: on the host's
// entry, or with the hosts not listed.
func (t *HostTable) Ban(host string) {
	if e := t.top.get(host); e != nil {
		e.v.Banned++
		return
	}
	t.other.Banned++
}

// Report returns the tracked hosts and, when some attempts or hosts are not
// among them, the rest.
func (t *HostTable) Report() (map[string]*Host, *HostsOther) {
	hosts := make(map[string]*Host, len(t.top.heap))
	for _, e := range t.top.heap {
		r := e.v
		r.Attempts, r.Missed = e.attempts, e.missed
		hosts[e.key] = &r
	}
	other := t.other
	other.Hosts = t.top.untracked()
	if other.Hosts == 0 && other.Attempts == 0 {
		return hosts, nil
	}
	return hosts, &other
}

// distinctCount counts the distinct strings added: exactly (by their 64-bit
// hashes) up to exactLimit of them, in at most 128 KiB, and beyond that
// by HyperLogLog (Flajolet et al. 2007) in 16 KiB, within about 0.8% (one
// standard error), its registers made from the hashes when the set grows
// past exactLimit. The zero value is empty.
type distinctCount struct {
	exact map[uint64]struct{} // the hashes, while there are no more than exactLimit
	reg   *[hllM]uint8        // the registers, once there are more
}

const (
	exactLimit = 4096
	hllP       = 14
	hllM       = 1 << hllP
)

func (h *distinctCount) add(s string) {
	x := hash64(s)
	if h.reg != nil {
		h.addReg(x)
		return
	}
	if h.exact == nil {
		h.exact = make(map[uint64]struct{})
	}
	h.exact[x] = struct{}{}
	if len(h.exact) > exactLimit { // from now on, the estimate
		h.reg = new([hllM]uint8)
		for y := range h.exact {
			h.addReg(y)
		}
		h.exact = nil
	}
}

// addReg adds hash x to the registers.
func (h *distinctCount) addReg(x uint64) {
	i := x >> (64 - hllP)
	rho := uint8(bits.LeadingZeros64(x<<hllP|1<<(hllP-1)) + 1)
	if rho > h.reg[i] {
		h.reg[i] = rho
	}
}

func (h *distinctCount) count() int {
	if h.reg == nil {
		return len(h.exact)
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
