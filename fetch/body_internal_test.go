package fetch

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBuffersReuseAndBound: a buffer put back is the next one got; the list
// keeps at most its capacity and makes a new buffer when empty.
func TestBuffersReuseAndBound(t *testing.T) {
	b := newBuffers(2)
	x, y, z := b.get(), b.get(), b.get()
	if len(*x) != copyBufferSize || x == y || y == z {
		t.Fatalf("get made %d-byte buffers, distinct: %v", len(*x), x != y && y != z)
	}
	b.put(x)
	b.put(y)
	b.put(z) // over capacity: dropped
	if n := len(b.free); n != 2 {
		t.Fatalf("%d buffers kept, want 2", n)
	}
	got := map[*[]byte]bool{b.get(): true, b.get(): true}
	if !got[x] || !got[y] {
		t.Error("the buffers put back were not the ones got")
	}
	if w := b.get(); w == x || w == y || len(*w) != copyBufferSize {
		t.Error("an empty list did not make a new buffer")
	}
}

// TestCopyAtMost: the copy stops after max bytes (all of them for -1),
// reads through short reads, and reports the reader's and writer's errors.
func TestCopyAtMost(t *testing.T) {
	src := strings.Repeat("x", 100)
	for _, tc := range []struct {
		name string
		buf  int
		max  int64
		want int64
	}{
		{"all", 7, -1, 100},
		{"under the limit", 7, 101, 100},
		{"at the limit", 7, 100, 100},
		{"cut at the limit", 7, 42, 42},
		{"limit inside the first read", 64, 5, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dst bytes.Buffer
			n, err := copyAtMost(&dst, iotest.HalfReader(strings.NewReader(src)), make([]byte, tc.buf), tc.max)
			if err != nil || n != tc.want || int64(dst.Len()) != tc.want {
				t.Fatalf("copied %d (%d written), err %v; want %d", n, dst.Len(), err, tc.want)
			}
		})
	}
	broken := errors.New("broken")
	if _, err := copyAtMost(io.Discard, iotest.ErrReader(broken), make([]byte, 8), -1); !errors.Is(err, broken) {
		t.Errorf("read error %v, want %v", err, broken)
	}
	if _, err := copyAtMost(shortWriter{}, strings.NewReader(src), make([]byte, 8), -1); !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("short write: error %v, want io.ErrShortWrite", err)
	}
}

// shortWriter writes one byte less than it is given, without an error.
type shortWriter struct{}

func (shortWriter) Write(b []byte) (int, error) { return max(len(b)-1, 0), nil }
