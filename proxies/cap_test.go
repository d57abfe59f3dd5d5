package proxies

import (
	"errors"
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
