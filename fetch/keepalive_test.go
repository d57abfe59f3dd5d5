package fetch

import (
	"testing"
	"time"
)

// TestQuietInUse: keep-alive from the dial exactly when a connection in
// use may stay quiet past the first probe.
func TestQuietInUse(t *testing.T) {
	for _, tc := range []struct {
		header, idle time.Duration
		want         bool
	}{
		{30 * time.Second, 30 * time.Second, false}, // the defaults
		{10 * time.Second, 5 * time.Second, false},
		{31 * time.Second, 30 * time.Second, true},
		{30 * time.Second, time.Minute, true},
		{0, 30 * time.Second, true}, // off
		{30 * time.Second, 0, true},
	} {
		ts := &transports{cfg: &Config{HeaderTimeout: tc.header, IdleTimeout: tc.idle}}
		if got := ts.quietInUse(); got != tc.want {
			t.Errorf("header %v, idle %v: %v, want %v", tc.header, tc.idle, got, tc.want)
		}
	}
}
