package workqueue

import (
	"fmt"
	"testing"
	"time"
)

// TestRate: the rate is the lines of the buckets of the last minute (the
// one under way among them) over the time since the first of them that
// has lines began, and the ETA the lines left at that rate.
func TestRate(t *testing.T) {
	now := time.Unix(1000, 0).Add(5 * time.Second) // 5s into bucket 100
	for _, tt := range []struct {
		name     string
		buckets  map[string]string
		left     int64
		wantRate float64
		wantETA  time.Duration
	}{
		{"none", nil, 10, 0, -1},
		{"none left", nil, 0, 0, 0},
		// 55s span: buckets 95..99 whole, 5s of 100.
		{"steady", map[string]string{"95": "100", "96": "100", "97": "100", "98": "100", "99": "100", "100": "50"}, 1100, 10, 110 * time.Second},
		{"older buckets left out", map[string]string{"90": "1000", "94": "1000", "95": "55", "100": "55"}, 0, 2, 0},
		// A run younger than a minute: from its first bucket's start, 15s.
		{"young", map[string]string{"99": "100", "100": "50"}, 20, 10, 2 * time.Second},
		{"not a bucket", map[string]string{"x": "5", "95": "55"}, 1, 1, time.Second},
	} {
		t.Run(fmt.Sprintf("%s/left=%d", tt.name, tt.left), func(t *testing.T) {
			r, eta := rate(tt.buckets, now, tt.left)
			if r != tt.wantRate || eta != tt.wantETA {
				t.Errorf("rate %v, ETA %v; want %v, %v", r, eta, tt.wantRate, tt.wantETA)
			}
		})
	}
}
