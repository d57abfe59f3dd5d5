package proxies

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// replacerOf is what matcher replaces: a strings.Replacer given the set
// longest first, as NewRedactor built its replacers before matcher.
func replacerOf(set []string, with string) *strings.Replacer {
	set = slices.Clone(set)
	slices.SortFunc(set, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	set = slices.Compact(set)
	var args []string
	for _, s := range set {
		if s != "" {
			args = append(args, s, with)
		}
	}
	return strings.NewReplacer(args...)
}

// TestMatcherAsReplacer compares matcher with strings.Replacer on random
// sets and texts over a small alphabet, so that the strings overlap, share
// heads and nest: of 1 and 2 bytes (kept as bits), of 3 to 62 (by head),
// and of 63 and more (the long lengths), and sets large enough to grow
// both tables several times.
func TestMatcherAsReplacer(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(alpha string, n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		return string(b)
	}
	cases := []struct {
		name     string
		alpha    string
		sets     int
		size     int // strings per set, at most
		min, max int // their lengths
		text     int // bytes of text
	}{
		{"short", "ab", 200, 6, 1, 4, 40},
		{"medium", "abc", 200, 20, 1, 12, 200},
		{"long", "ab", 100, 10, 60, 70, 400},
		{"large", "abcdefgh", 5, 5000, 3, 20, 5000},
		{"bytes", "\x00\xff@:%", 200, 8, 1, 6, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.sets {
				var set []string
				m, bulk := newMatcher(), newMatcher() // one by one, and in bulk (see seal)
				bulk.startBulk()
				for range 1 + rng.IntN(tc.size) {
					s := word(tc.alpha, tc.min+rng.IntN(tc.max-tc.min+1))
					set = append(set, s)
					m.add(s)
					bulk.add(s)
				}
				bulk.seal()
				rep := replacerOf(set, "<>")
				// The text is made of pieces of the set and of noise.
				var sb strings.Builder
				for sb.Len() < tc.text {
					if rng.IntN(2) == 0 {
						s := set[rng.IntN(len(set))]
						sb.WriteString(s[rng.IntN(len(s)):])
					} else {
						sb.WriteString(word(tc.alpha, 1+rng.IntN(4)))
					}
				}
				text := sb.String()
				want := rep.Replace(text)
				if got := m.replace(text, "<>"); got != want {
					t.Fatalf("set %q\ntext %q\nmatcher  %q\nReplacer %q", set, text, got, want)
				}
				if got := bulk.replace(text, "<>"); got != want {
					t.Fatalf("set %q\ntext %q\nmatcher in bulk %q\nReplacer %q", set, text, got, want)
				}
			}
		})
	}
}

func TestMatcherEmpty(t *testing.T) {
	m := newMatcher()
	m.add("")
	if !m.empty() {
		t.Fatal("a matcher given only \"\" is not empty")
	}
	if got := m.replace("abc", "x"); got != "abc" {
		t.Fatalf("the empty matcher replaced: %q", got)
	}
	for _, s := range []string{"a", "ab", "abc"} {
		m := newMatcher()
		m.add(s)
		if m.empty() {
			t.Fatalf("a matcher of %q is empty", s)
		}
	}
}

// TestMatcherKeepsText: replace returns its argument itself, not a copy,
// when nothing in it is to be replaced.
func TestMatcherKeepsText(t *testing.T) {
	m := newMatcher()
	m.add("secret")
	text := strings.Repeat("no match here ", 4)
	if n := testing.AllocsPerRun(10, func() { _ = m.replace(text, "***") }); n != 0 {
		t.Fatalf("%v allocations for a text with nothing to replace", n)
	}
}

// TestMatcherBulkDropsDuplicates: strings added in bulk more than once are
// in the set once, and their repeats do not stay in the text.
func TestMatcherBulkDropsDuplicates(t *testing.T) {
	m := newMatcher()
	m.startBulk()
	m.reserve(2000, 2000*12)
	for i := range 1000 {
		m.add("samepassword") // every identity's password
		m.add(fmt.Sprintf("user-%d", i))
	}
	m.seal()
	if m.n != 1001 {
		t.Fatalf("%d strings in the set, want 1001", m.n)
	}
	if want := len("samepassword") + 10*len("user-0") + 90*len("user-10") + 900*len("user-100"); len(m.text) != want {
		t.Fatalf("%d bytes of text, want %d", len(m.text), want)
	}
	if got := m.replace("as user-999 with samepassword, not user-", "***"); got != "as *** with ***, not user-" {
		t.Fatalf("replaced: %q", got)
	}
}
