package limits_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/limits"
)

// TestParseRateReasons: a refused rate says what is wrong with it, and the
// reason alone never quotes the value.
func TestParseRateReasons(t *testing.T) {
	tests := []struct {
		in, reason string
	}{
		{"1e308/s", "too large: at most 1e9 per second"}, // far past the largest count
		{"Inf/s", "too large"},                           // infinite
		{"2/1ns", "too large"},                           // a fine count over a tiny period
		{"0/s", "is 0 (write 0 alone for unlimited)"},    // zero count
		{"-3/s", "negative"},                             // negative count
		{"ten/s", "not a number"},                        // words
		{"5/fortnight", "the period after / must be"},    // unknown period
		{"5", "want N/s, N/m, N/h or N/DURATION"},        // no period
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := limits.ParseRate(tt.in)
			var re *limits.RateError
			if !errors.As(err, &re) || !errors.Is(err, limits.ErrBadRate) {
				t.Fatalf("ParseRate(%q) error %v: want a *RateError wrapping ErrBadRate", tt.in, err)
			}
			if !strings.Contains(re.Reason, tt.reason) {
				t.Errorf("reason %q does not say %q", re.Reason, tt.reason)
			}
			if strings.Contains(re.Reason, tt.in) {
				t.Errorf("reason %q quotes the value", re.Reason)
			}
		})
	}
}
