package fetch

import (
	"fmt"
	"testing"
)

// TestHostFailuresBounded: however many hosts fail, hostFailures keeps at
// most maxFailingHosts of them, a host that answers is forgotten, and a
// host that reached the limit is still down after the others came and
// went.
func TestHostFailuresBounded(t *testing.T) {
	h := newHostFailures(3)
	for range 3 {
		h.failed("dead:80")
	}
	for i := range 3 * maxFailingHosts {
		h.failed(fmt.Sprintf("h%d:80", i))
	}
	if n := h.tracked(); n > maxFailingHosts {
		t.Fatalf("%d hosts kept, want at most %d", n, maxFailingHosts)
	}
	if _, down := h.down("dead:80"); !down {
		t.Error("the host that reached the limit was forgotten to make room")
	}
	for i := range 3 * maxFailingHosts {
		h.answered(fmt.Sprintf("h%d:80", i))
	}
	h.answered("dead:80")
	if n := h.tracked(); n != 0 {
		t.Errorf("%d hosts kept after every one answered, want 0", n)
	}
	if _, down := h.down("dead:80"); down {
		t.Error("a host that answered is still down")
	}
}
