package arena

import (
	"fmt"
	"strings"
	"testing"
)

// TestStringsKeepTheirBytes: every string handed out still holds what it
// was given after blocks have filled up and new ones were started, and a
// large string and an empty one come back equal too.
func TestStringsKeepTheirBytes(t *testing.T) {
	var a Strings
	var got, want []string
	for i := range 20_000 { // about 10 blocks
		s := fmt.Sprintf("http://127.0.0.1:8080#%08x-%d", i*2654435761, i)
		got, want = append(got, a.Bytes([]byte(s))), append(want, s)
	}
	big := strings.Repeat("x", blockSize)
	got, want = append(got, a.Bytes([]byte(big)), a.Bytes(nil)), append(want, big, "")
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("string %d is %q, want %q", i, got[i], want[i])
		}
	}
}

// TestStringsShareBlocks: small strings cost an allocation per block, not
// one each.
func TestStringsShareBlocks(t *testing.T) {
	var a Strings
	p := []byte("user-session-12345:pw")
	a.Bytes(p) // the first block
	if n := testing.AllocsPerRun(1000, func() { a.Bytes(p) }); n > 0.01 {
		t.Fatalf("%v allocations a string", n)
	}
}
