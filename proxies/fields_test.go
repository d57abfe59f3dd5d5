package proxies

import (
	"slices"
	"strings"
	"testing"
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
