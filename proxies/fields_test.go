package proxies

import (
	"hash/maphash"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzAppendFields: appendFields splits a line as strings.Fields does, and
// keeps what dst held.
func FuzzAppendFields(f *testing.F) {
	for _, s := range []string{"", " ", "http://a:b@c:1 pool=x\trate=5/s \r", "a\u00a0b c\u0085d", "\v\fa  b\n", "é x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		got := appendFields([]string{"kept"}, line)
		want := append([]string{"kept"}, strings.Fields(line)...)
		if !slices.Equal(got, want) {
			t.Fatalf("appendFields(%q) = %q, want %q", line, got, want)
		}
	})
}

// FuzzPrintableASCII: a line printableASCII takes is one field as
// strings.Fields splits it, valid UTF-8 without a NUL byte: what parseLine
// checks one by one for other lines.
func FuzzPrintableASCII(f *testing.F) {
	for _, s := range []string{"", "a", "http://u:p@h:1", "a b", "a\x00", "a\x7f", "é", "\u00a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if !printableASCII([]byte(line)) {
			return
		}
		if got := strings.Fields(line); len(got) != 1 || got[0] != line {
			t.Fatalf("printableASCII(%q), but it splits into %q", line, got)
		}
		if !utf8.ValidString(line) || strings.IndexByte(line, 0) >= 0 {
			t.Fatalf("printableASCII(%q), but it is not valid UTF-8 without NUL", line)
		}
	})
}

// TestFirstSeenCollision: two identities of one 64-bit hash are told apart,
// each found as the first of its own.
func TestFirstSeenCollision(t *testing.T) {
	f := newFirstSeen(0)
	var out []Proxy
	if _, ok := f.index(out, "http://a:1"); ok {
		t.Fatal("a new identity was found")
	}
	out = append(out, Proxy{ID: "http://a:1"})
	// As if "http://b:1" had the hash of the first.
	f.byHash[maphash.String(f.seed, "http://b:1")] = 0
	if _, ok := f.index(out, "http://b:1"); ok {
		t.Fatal("an identity was found as another of its hash")
	}
	out = append(out, Proxy{ID: "http://b:1"})
	for id, want := range map[string]int{"http://a:1": 0, "http://b:1": 1} {
		if i, ok := f.index(out, id); !ok || i != want {
			t.Errorf("index(%s) = %d, %v; want %d, true", id, i, ok, want)
		}
	}
}
