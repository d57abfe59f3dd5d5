package proxies

import (
	"hash/maphash"
	"math"
	"math/bits"
	"slices"
)

// matcher finds the strings of a set in text and replaces them: at each
// place of the text, the longest of the set that starts there, then on
// after it, as a strings.Replacer given the set longest first does.
//
// It is made for sets of hundreds of thousands (every credential of a list
// of 100,000 identities, each in several encodings) and holds no pointer
// but three: the strings are kept end to end in one string, found by
// their hash in an open-addressed table, and a place of the text is
// passed over at the cost of one look-up by its first three bytes. A
// strings.Replacer for such a set is a trie of millions of nodes: slow to
// build, and marked by the garbage collector at every cycle of the run.
type matcher struct {
	seed  maphash.Seed
	text  []byte // the strings, end to end; read-only once built
	slots []slot // by hash; len a power of 2, at most half full
	n     int    // strings in slots

	// heads are the strings of 3 bytes or more by their first 3 bytes,
	// each with the lengths the strings starting with them have: bit L
	// for L < 63, bit 63 for any length in long.
	heads  []head // len a power of 2, at most half full
	nheads int
	long   []int // distinct lengths of 63 bytes or more, longest first

	// The strings of 1 and 2 bytes, as bits: rare, and cheap to look for.
	one [256 / 64]uint64
	two []uint64 // 65536 bits; nil when there is none

	bulk bool      // between startBulk and seal
	pend []pending // the strings added since startBulk
}

type slot struct {
	h   uint32 // the low bits of the string's hash
	n   uint32 // the string is text[off:off+n]; n == 0: empty slot
	off int
}

type head struct {
	key  uint32 // the 3 bytes + 1; 0: empty
	lens uint64
}

const longLen = 63 // lengths from this one on share bit 63 of head.lens

func newMatcher() *matcher {
	return &matcher{seed: maphash.MakeSeed()}
}

// reserve makes room for n more strings of size bytes in all, so that a
// set whose size is known is built without growing.
func (m *matcher) reserve(n, size int) {
	if need := 2 * (m.n + n); need > len(m.slots) {
		m.resize(1 << bits.Len(uint(need-1)))
	}
	m.text = slices.Grow(m.text, size)
	if m.bulk {
		m.pend = slices.Grow(m.pend, n)
	}
}

// add adds s to the set; "" is ignored, and so is a string of 4 GiB or
// more, which no line of a proxy list can hold.
func (m *matcher) add(s string) {
	m.text = append(m.text, s...)
	m.addLast(len(s))
}

// addLast adds the last n bytes of m.text, which the caller appended to
// it, to the set, and takes them off the text again when they are there
// already or kept elsewhere: so a string made in place (a Basic token)
// is added without a copy of its own.
func (m *matcher) addLast(n int) {
	off := len(m.text) - n
	s := m.text[off:]
	if n < 3 || n >= 1<<32 {
		m.text = m.text[:off]
		switch n {
		case 1:
			m.one[s[0]/64] |= 1 << (s[0] % 64)
		case 2:
			if m.two == nil {
				m.two = make([]uint64, 1<<16/64)
			}
			k := uint16(s[0])<<8 | uint16(s[1])
			m.two[k/64] |= 1 << (k % 64)
		}
		return
	}
	h := maphash.Bytes(m.seed, s)
	if m.bulk && len(m.text) < math.MaxUint32 {
		m.pend = append(m.pend, pending{h: uint32(h), off: uint32(off), n: uint32(n)})
		return
	}
	if !m.insert(h, off, n) {
		m.text = m.text[:off] // there already
	}
}

// insert puts the string text[off:off+n] of hash h in the table, and
// reports whether it was not there already.
func (m *matcher) insert(h uint64, off, n int) bool {
	if 2*(m.n+1) > len(m.slots) {
		m.grow()
	}
	s := m.text[off : off+n]
	mask := len(m.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		sl := &m.slots[i]
		if sl.n == 0 {
			*sl = slot{h: uint32(h), n: uint32(n), off: off}
			m.n++
			break
		}
		if sl.h == uint32(h) && int(sl.n) == n && string(m.text[sl.off:sl.off+n]) == string(s) {
			return false
		}
	}
	bit := uint64(1) << min(n, longLen)
	if n >= longLen {
		m.addLong(n)
	}
	m.addHead(uint32(s[0])<<16|uint32(s[1])<<8|uint32(s[2]), bit)
	return true
}

// pending is a string added in bulk, not yet in the table: its hash's low
// bits (the table is smaller than 1<<32: they give its place), and where it
// is in the text.
type pending struct{ h, off, n uint32 }

// startBulk makes the strings added from now on wait for seal, which puts
// them in the table in the order of their places in it: a set of hundreds
// of thousands is then built by walking the table once, not by a cache miss
// for every string (NewRedactor for 100,000 identities: BenchmarkLoadIdentities).
func (m *matcher) startBulk() { m.bulk = true }

// seal puts the strings added since startBulk in the table. Those that
// were there already leave their bytes in the text; when they are a
// quarter of it, the text is made again without them.
func (m *matcher) seal() {
	m.bulk = false
	if len(m.pend) == 0 {
		return
	}
	if need := 2 * (m.n + len(m.pend)); need > len(m.slots) {
		m.resize(1 << bits.Len(uint(need-1)))
	}
	// A counting sort by the top 8 bits of their places: each of the 256
	// runs then fills a 256th of the table, which stays in the cache.
	shift := max(bits.Len(uint(len(m.slots)-1))-8, 0)
	mask := uint32(len(m.slots) - 1)
	var count [257]int
	for _, p := range m.pend {
		count[(p.h&mask)>>shift+1]++
	}
	for i := 1; i < len(count); i++ {
		count[i] += count[i-1]
	}
	sorted := make([]pending, len(m.pend))
	for _, p := range m.pend {
		b := (p.h & mask) >> shift
		sorted[count[b]] = p
		count[b]++
	}
	m.pend = nil
	dup := 0
	for _, p := range sorted {
		if !m.insert(uint64(p.h), int(p.off), int(p.n)) {
			dup += int(p.n)
		}
	}
	if 4*dup > len(m.text) {
		text := make([]byte, 0, len(m.text)-dup)
		for i := range m.slots {
			if sl := &m.slots[i]; sl.n != 0 {
				text = append(text, m.text[sl.off:sl.off+int(sl.n)]...)
				sl.off = len(text) - int(sl.n)
			}
		}
		m.text = text
	}
}

func (m *matcher) addLong(n int) {
	for i, l := range m.long {
		if l == n {
			return
		}
		if l < n {
			m.long = append(m.long[:i+1], m.long[i:]...)
			m.long[i] = n
			return
		}
	}
	m.long = append(m.long, n)
}

func (m *matcher) addHead(key uint32, bit uint64) {
	if 2*(m.nheads+1) > len(m.heads) {
		m.growHeads()
	}
	mask := len(m.heads) - 1
	for i := headHash(key) & mask; ; i = (i + 1) & mask {
		hd := &m.heads[i]
		if hd.key == 0 {
			*hd = head{key: key + 1, lens: bit}
			m.nheads++
			return
		}
		if hd.key == key+1 {
			hd.lens |= bit
			return
		}
	}
}

func (m *matcher) grow() { m.resize(max(64, 2*len(m.slots))) }

func (m *matcher) resize(n int) {
	old := m.slots
	m.slots = make([]slot, n)
	mask := len(m.slots) - 1
	for _, sl := range old {
		if sl.n == 0 {
			continue
		}
		i := int(maphash.Bytes(m.seed, m.text[sl.off:sl.off+int(sl.n)])) & mask
		for m.slots[i].n != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = sl
	}
}

func (m *matcher) growHeads() {
	old := m.heads
	m.heads = make([]head, max(16, 2*len(old)))
	m.nheads = 0
	for _, hd := range old {
		if hd.key != 0 {
			m.addHead(hd.key-1, hd.lens)
		}
	}
}

func key3(s string, i int) uint32 {
	return uint32(s[i])<<16 | uint32(s[i+1])<<8 | uint32(s[i+2])
}

func headHash(key uint32) int { return int((uint64(key) * 0x9E3779B97F4A7C15) >> 32) }

// empty reports whether the set has no string.
func (m *matcher) empty() bool {
	if m.n > 0 || m.two != nil {
		return false
	}
	return m.one == [4]uint64{}
}

// has reports whether s[i:i+n] is in the set, for n >= 3.
func (m *matcher) has(s string, i, n int) bool {
	w := s[i : i+n]
	h := maphash.String(m.seed, w)
	mask := len(m.slots) - 1
	for j := int(h) & mask; ; j = (j + 1) & mask {
		sl := &m.slots[j]
		if sl.n == 0 {
			return false
		}
		if sl.h == uint32(h) && int(sl.n) == n && string(m.text[sl.off:sl.off+n]) == w {
			return true
		}
	}
}

// at returns the length of the longest string of the set that s[i:] starts
// with, or 0.
func (m *matcher) at(s string, i int) int {
	rest := len(s) - i
	if rest >= 3 && m.nheads > 0 {
		key := key3(s, i)
		mask := len(m.heads) - 1
		for j := headHash(key) & mask; ; j = (j + 1) & mask {
			hd := &m.heads[j]
			if hd.key == 0 {
				break
			}
			if hd.key != key+1 {
				continue
			}
			lens := hd.lens
			if lens&(1<<longLen) != 0 {
				for _, n := range m.long {
					if n <= rest && m.has(s, i, n) {
						return n
					}
				}
				lens &^= 1 << longLen
			}
			if rest < longLen {
				lens &= 1<<(rest+1) - 1 // no longer than what is left
			}
			for lens != 0 {
				n := 63 - bits.LeadingZeros64(lens)
				if m.has(s, i, n) {
					return n
				}
				lens &^= 1 << n
			}
			break
		}
	}
	if rest >= 2 && m.two != nil {
		k := uint16(s[i])<<8 | uint16(s[i+1])
		if m.two[k/64]&(1<<(k%64)) != 0 {
			return 2
		}
	}
	if m.one[s[i]/64]&(1<<(s[i]%64)) != 0 {
		return 1
	}
	return 0
}

// replace returns s with each string of the set in it replaced by with,
// found from the left, the longest at each place; s itself when there is
// none.
func (m *matcher) replace(s, with string) string {
	var b []byte // nil until the first match
	last := 0
	for i := 0; i < len(s); {
		n := m.at(s, i)
		if n == 0 {
			i++
			continue
		}
		if b == nil {
			b = make([]byte, 0, len(s)+len(with))
		}
		b = append(b, s[last:i]...)
		b = append(b, with...)
		i += n
		last = i
	}
	if b == nil {
		return s
	}
	return string(append(b, s[last:]...))
}
