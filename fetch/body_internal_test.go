package fetch

import "testing"

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
