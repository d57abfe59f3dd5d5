// Package arena packs many small strings into few allocations.
//
// A list of 100,000 proxies holds several short strings for each (its
// identity, its credentials, its line): made one by one they are
// hundreds of thousands of objects, which the garbage collector marks at
// every cycle of the run. Packed into blocks they are a few dozen.
package arena

import (
	"strings"
	"unsafe"
)

// Strings hands out strings that share blocks of blockSize bytes. A string
// keeps its whole block alive, so it is for strings that live about as long
// as each other. The zero Strings is ready to use; it is not safe for
// concurrent use.
type Strings struct {
	b strings.Builder // the block being filled: only ever appended to
}

// blockSize is the size of a block; a string of more than a quarter of it
// gets an allocation of its own.
const blockSize = 64 << 10

// Bytes returns a string holding a copy of p.
func (a *Strings) Bytes(p []byte) string {
	// String only reads the view, and copies it.
	return a.String(unsafe.String(unsafe.SliceData(p), len(p)))
}

// String returns a copy of s, as Bytes does: a string that outlives the
// larger one it was cut from, without keeping that one alive.
func (a *Strings) String(s string) string {
	switch {
	case len(s) == 0:
		return ""
	case len(s) > blockSize/4:
		return strings.Clone(s)
	}
	if a.b.Cap()-a.b.Len() < len(s) {
		// A new block. The strings of the old one stay valid: a Builder
		// never changes bytes it has written.
		a.b = strings.Builder{}
		a.b.Grow(blockSize)
	}
	start := a.b.Len()
	a.b.WriteString(s)
	return a.b.String()[start:]
}

// Slab hands out values of T from shared blocks of slabLen, as Strings does
// strings and for the same reason: one object for the garbage collector to
// mark per block instead of one per value. A value keeps its whole block
// alive. The zero Slab is ready to use; it is not safe for concurrent use.
type Slab[T any] struct {
	free []T // the rest of the block being handed out
}

// slabLen is how many values a block of a Slab holds.
const slabLen = 256

// New returns a pointer to a new zero T.
func (s *Slab[T]) New() *T {
	if len(s.free) == 0 {
		s.free = make([]T, slabLen)
	}
	p := &s.free[0]
	s.free = s.free[1:]
	return p
}
