package proxies

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestParseCap checks the bound on the proxies the lists may hold, with
// room for 5 instead of a million.
func TestParseCap(t *testing.T) {
	for _, tt := range []struct {
		name, list string
		line       int
		reason     string
	}{
		{"sessions past the room", "http://p.example\nhttp://a-{session}@p.example sessions=5\n", 2, "sessions=5: the proxy lists would hold more than 1000000 proxies"},
		{"plain lines past the room", "http://a-{session}@p.example sessions=5\nhttp://p.example\n", 2, "the proxy lists hold more than 1000000 proxies"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parse("big.txt", strings.NewReader(tt.list), 5, 0)
			var le *LineError
			if !errors.As(err, &le) || le.Line != tt.line || le.Reason != tt.reason {
				t.Fatalf("parse: %v, want big.txt:%d: %s", err, tt.line, tt.reason)
			}
		})
	}
	if ps, err := parse("ok.txt", strings.NewReader("http://a-{session}@p.example sessions=5\n"), 5, 0); err != nil || len(ps) != 5 {
		t.Fatalf("parse of exactly the room: %d proxies, %v", len(ps), err)
	}
}

// TestParseSizesList: the capacity of a list read from a file of known
// size stays within a quarter of its length, both when the size estimate
// from its first lines holds and when those lines are much shorter than the
// rest (the estimate overshoots 5 times, and the list is copied to size).
// That the estimate saves the growing is BenchmarkLoadIdentities/Load's to
// show (66 MB allocated for 100,000 proxies, 124 MB without it).
func TestParseSizesList(t *testing.T) {
	for _, tc := range []struct {
		name        string
		short, long int // lines of the two kinds, short ones first
	}{
		{"uniform", 0, 10_000},
		{"short lines first", 300, 10_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			for i := range tc.short {
				fmt.Fprintf(&sb, "http://a:%d\n", 1+i)
			}
			for i := range tc.long {
				fmt.Fprintf(&sb, "http://user-session-%d-with-a-long-name:password@gateway.example:7000\n", i)
			}
			ps, err := parse("p.txt", strings.NewReader(sb.String()), maxProxies, int64(sb.Len()))
			n := tc.short + tc.long
			if err != nil || len(ps) != n {
				t.Fatalf("%d proxies, %v; want %d", len(ps), err, n)
			}
			if c := cap(ps); c > n*5/4 {
				t.Errorf("capacity %d for %d proxies", c, n)
			}
		})
	}
}
