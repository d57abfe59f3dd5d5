package fetch

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestBoundMessage: whatever a server sends, a message is valid UTF-8 of
// at most maxMessage bytes, cut on a rune boundary and marked when cut.
func TestBoundMessage(t *testing.T) {
	long := strings.Repeat("x", 5<<20)
	for _, tc := range []struct {
		name, in string
		want     string // "" : only the invariants are checked
		cut      bool
	}{
		{name: "short", in: "503 Service Unavailable", want: "503 Service Unavailable"},
		{name: "exactly the bound", in: strings.Repeat("a", maxMessage), want: strings.Repeat("a", maxMessage)},
		{name: "one byte over", in: strings.Repeat("a", maxMessage+1), want: strings.Repeat("a", maxMessage-len(cutMark)) + cutMark, cut: true},
		{name: "5 MB status line", in: "503 " + long, cut: true},
		{name: "invalid UTF-8 replaced", in: "bad \xff\xfe byte", want: "bad \uFFFD\uFFFD byte"},
		{name: "cut on a rune boundary", in: strings.Repeat("é", maxMessage), cut: true},
		{name: "long invalid UTF-8", in: strings.Repeat("\xff", 3*maxMessage), cut: true},
		{name: "four-byte runes", in: strings.Repeat("𝄞", maxMessage), cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundMessage(tc.in)
			if tc.want != "" && got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if len(got) > maxMessage || !utf8.ValidString(got) {
				t.Errorf("%d bytes, valid %v: %q", len(got), utf8.ValidString(got), got)
			}
			if cut := strings.HasSuffix(got, cutMark); cut != tc.cut {
				t.Errorf("marked cut %v, want %v: %q", cut, tc.cut, got)
			}
			if tc.cut && len(got) < maxMessage-utf8.UTFMax-len(cutMark) {
				t.Errorf("cut to %d bytes, more than needed: %q", len(got), got)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{100 << 10: "100KiB", 64 << 20: "64MiB", 1 << 30: "1GiB", 1500: "1500B", 0: "0B"} {
		if got := formatSize(n); got != want {
			t.Errorf("formatSize(%d) = %s, want %s", n, got, want)
		}
	}
}
