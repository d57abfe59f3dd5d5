package input

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// Shard is one part of the input lines, for processes that split a list
// between them: the lines whose hash falls in shard K of N. The zero Shard
// takes every line.
//
// A line belongs to shard 1 + mix(h) mod N, where h is the 64-bit FNV-1a
// hash of the input's name, a NUL byte, the line number in decimal, a NUL
// byte and the line trimmed of white space, and mix is SplitMix64's
// finaliser. The mixing is needed because FNV-1a's low bits follow the
// input's low bits: taken raw, lines that differ only in a number (line 7
// holding ...&i=7) fell in half the shards for an even N. N processes given
// the same inputs (named the same way) and shards 1..N take every line
// exactly once. Versions of fetch before the mixing put lines in other
// shards, so the shards of one run must all come from one version.
type Shard struct {
	K, N int
}

// MaxShards is the most shards a list may be split into.
const MaxShards = 1_000_000

// ParseShard reads "K/N" with 1 <= K <= N <= MaxShards.
func ParseShard(s string) (Shard, error) {
	k, n, ok := strings.Cut(s, "/")
	ki, err1 := strconv.Atoi(strings.TrimSpace(k))
	ni, err2 := strconv.Atoi(strings.TrimSpace(n))
	if !ok || err1 != nil || err2 != nil || ni < 1 || ni > MaxShards || ki < 1 || ki > ni {
		return Shard{}, fmt.Errorf("%w %q: want K/N with 1 <= K <= N <= %d", ErrBadShard, s, MaxShards)
	}
	return Shard{K: ki, N: ni}, nil
}

// ErrBadShard is wrapped by ParseShard's errors.
var ErrBadShard = errors.New("fetch: bad shard")

// String formats s as ParseShard reads it.
func (s Shard) String() string { return strconv.Itoa(s.K) + "/" + strconv.Itoa(s.N) }

// takes reports whether the line text (trimmed), line n of input, is in
// shard s.
func (s Shard) takes(input string, n int, text []byte) bool {
	if s.N <= 1 {
		return true
	}
	return s.Of(input, n, text) == s.K
}

// Of returns the shard (1..N) that line n of input, holding text, belongs
// to. It does not allocate: it runs for every input line of a sharded run.
func (s Shard) Of(input string, n int, text []byte) int {
	h := fnv.New64a()
	h.Write([]byte(input))
	var buf [24]byte
	b := append(buf[:0], 0)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, 0)
	h.Write(b)
	h.Write(bytes.TrimSpace(text))
	return 1 + int(mix64(h.Sum64())%uint64(s.N))
}

// mix64 is SplitMix64's finaliser: every bit of its result depends on every
// bit of x, so that x mod N is even for any N even when x's low bits are
// not (FNV-1a's follow the last bytes hashed).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
