package arena

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"
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

// TestStringCopies: String hands out a copy, in the arena's block, of
// strings small and large: not the string it was given, which may be a
// piece of a larger one the caller wants collected.
func TestStringCopies(t *testing.T) {
	var a Strings
	line := "http://user-session-12345:pw@127.0.0.1:8080"
	name := line[7:25]
	big := strings.Repeat("y", blockSize)
	for _, s := range []string{name, big[1:]} {
		got := a.String(s)
		if got != s {
			t.Fatalf("String(%.30q...) = %.30q...", s, got)
		}
		if unsafe.StringData(got) == unsafe.StringData(s) {
			t.Fatalf("String(%.30q...) is the string it was given, not a copy", s)
		}
	}
	if a.String("") != "" {
		t.Fatal("String of an empty string is not empty")
	}
	p := "user-session-12345"
	a.String(p)
	if n := testing.AllocsPerRun(1000, func() { a.String(p) }); n > 0.01 {
		t.Fatalf("%v allocations a string", n)
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

// TestSlabHandsOutDistinctValues: every value is zero when handed out and
// its own, across blocks, and values cost an allocation per block.
func TestSlabHandsOutDistinctValues(t *testing.T) {
	var s Slab[[2]int]
	var got []*[2]int
	for i := range 3*slabLen + 1 {
		p := s.New()
		if *p != [2]int{} {
			t.Fatalf("value %d is %v when handed out", i, *p)
		}
		*p = [2]int{i, -i}
		got = append(got, p)
	}
	for i, p := range got {
		if *p != [2]int{i, -i} {
			t.Fatalf("value %d holds %v", i, *p)
		}
	}
	if n := testing.AllocsPerRun(10*slabLen, func() { s.New() }); n > 1.0/slabLen+0.001 {
		t.Fatalf("%v allocations a value, want one a block of %d", n, slabLen)
	}
}
