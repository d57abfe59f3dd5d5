package limits_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in      string
		want    limits.Rate
		wantErr bool
	}{
		{"", limits.Rate{}, false},                                             // unset
		{"0", limits.Rate{}, false},                                            // explicit unlimited
		{"unlimited", limits.Rate{}, false},                                    // the word
		{" unlimited ", limits.Rate{}, false},                                  // trimmed
		{"10/s", limits.Rate{N: 10, Per: time.Second}, false},                  // per second
		{"30/m", limits.Rate{N: 30, Per: time.Minute}, false},                  // per minute
		{"100/h", limits.Rate{N: 100, Per: time.Hour}, false},                  // per hour
		{"5/2s", limits.Rate{N: 5, Per: 2 * time.Second}, false},               // per duration
		{"0.5/100ms", limits.Rate{N: 0.5, Per: 100 * time.Millisecond}, false}, // fractional count
		{"1/1h30m", limits.Rate{N: 1, Per: 90 * time.Minute}, false},           // compound duration
		{" 3 / s ", limits.Rate{N: 3, Per: time.Second}, false},                // spaces around the parts
		{"1e3/s", limits.Rate{N: 1000, Per: time.Second}, false},               // exponent
		{"1e9/s", limits.Rate{N: 1e9, Per: time.Second}, false},                // largest count
		{"10", limits.Rate{}, true},                                            // no period
		{"10/", limits.Rate{}, true},                                           // empty period
		{"/s", limits.Rate{}, true},                                            // empty count
		{"0/s", limits.Rate{}, true},                                           // zero count
		{"-1/s", limits.Rate{}, true},                                          // negative count
		{"1e10/s", limits.Rate{}, true},                                        // count too large
		{"NaN/s", limits.Rate{}, true},                                         // not a number
		{"Inf/s", limits.Rate{}, true},                                         // infinite
		{"ten/s", limits.Rate{}, true},                                         // words
		{"1/0s", limits.Rate{}, true},                                          // zero period
		{"1/-1s", limits.Rate{}, true},                                         // negative period
		{"1/d", limits.Rate{}, true},                                           // unknown unit
		{"1/2", limits.Rate{}, true},                                           // period without unit
		{"1/s/s", limits.Rate{}, true},                                         // two slashes
		{"1/" + string(make([]byte, 80)), limits.Rate{}, true},                 // too long
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := limits.ParseRate(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseRate(%q) = %+v, want an error", tt.in, got)
				}
				if !errors.Is(err, limits.ErrBadRate) {
					t.Errorf("error %v does not wrap ErrBadRate", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRate(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseRate(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestRateString(t *testing.T) {
	tests := []struct {
		r    limits.Rate
		want string
	}{
		{limits.Rate{}, "unlimited"},
		{limits.Rate{N: 10, Per: time.Second}, "10/1s"},
		{limits.Rate{N: 0.5, Per: 100 * time.Millisecond}, "0.5/100ms"},
		{limits.Rate{N: 1, Per: 90 * time.Minute}, "1/1h30m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.r.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzParseRate checks that ParseRate never panics, that every error wraps
// ErrBadRate, and that a parsed rate reads back the same from its String.
func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"", "0", "unlimited", "10/s", "30/m", "100/h", "5/2s", "0.5/100ms",
		"1e9/s", "1e-300/1ns", "0x1p-2/s", "1_000/s", "3/2562047h47m16.854775807s", "-1/s", "1/0s", "NaN/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := limits.ParseRate(s)
		if err != nil {
			if !errors.Is(err, limits.ErrBadRate) {
				t.Fatalf("ParseRate(%q): error %v does not wrap ErrBadRate", s, err)
			}
			return
		}
		if !r.IsZero() && (r.N <= 0 || r.Per <= 0) {
			t.Fatalf("ParseRate(%q) = %+v", s, r)
		}
		back, err := limits.ParseRate(r.String())
		if err != nil {
			t.Fatalf("ParseRate(%q) = %+v; its String %q does not parse: %v", s, r, r.String(), err)
		}
		if back != r {
			t.Fatalf("ParseRate(%q) = %+v; String %q reads back as %+v", s, r, r.String(), back)
		}
	})
}
