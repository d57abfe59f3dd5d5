package fetchtest

import "io"

// Endless is an input of one line that never ends: Prefix, then N bytes of
// filler ('a'), with no line end, for tests of how much of a line a reader
// holds. Its zero offset starts at Prefix; it reads as an io.Reader.
type Endless struct {
	Prefix string
	N      int64
	off    int64
}

func (e *Endless) Read(p []byte) (int, error) {
	total := int64(len(e.Prefix)) + e.N
	if e.off >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.off < total {
		if e.off < int64(len(e.Prefix)) {
			p[k] = e.Prefix[e.off]
		} else {
			p[k] = 'a'
		}
		k++
		e.off++
	}
	return k, nil
}
