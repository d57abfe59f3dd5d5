package cmd

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "512", want: 512},
		{in: "512B", want: 512},
		{in: "1k", want: 1024},                  // bare letters are binary, as curl reads them
		{in: "1K", want: 1024},                  // case does not matter
		{in: "1KiB", want: 1024},                // IEC
		{in: "1kB", want: 1000},                 // SI
		{in: "10MB", want: 10_000_000},          // SI
		{in: "64MiB", want: 64 << 20},           // the --max-body default
		{in: "64mib", want: 64 << 20},           // case-insensitive unit
		{in: " 2 GiB ", want: 2 << 30},          // spaces around and before the unit
		{in: "1.5k", want: 1536},                // a fraction
		{in: ".5MiB", want: 512 << 10},          // no integer part
		{in: "0.1B", want: 0},                   // rounded down
		{in: "1T", want: 1 << 40},               // the largest unit
		{in: "8388607TiB", want: 8388607 << 40}, // just fits
		{in: "9223372036854775807", want: math.MaxInt64},
		{in: "9223372036854775808", wantErr: true}, // overflows int64
		{in: "8388608TiB", wantErr: true},          // overflows after the unit
		{in: "9999999999.9TB", wantErr: true},      // fraction overflow
		{in: "", wantErr: true},
		{in: "MiB", wantErr: true}, // no number
		{in: ".", wantErr: true},
		{in: "1..5k", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "1 PiB", wantErr: true}, // unknown unit
		{in: "1kk", wantErr: true},
		{in: "0x10", wantErr: true},
		{in: "NaN", wantErr: true},
		{in: "1_000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("in=%q", tt.in), func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseSize(%q) = %d, want an error", tt.in, got)
				}
				if !errors.Is(err, ErrBadSize) {
					t.Errorf("ParseSize(%q) error %v does not wrap ErrBadSize", tt.in, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "64MiB", "10MB", "1k", "1.5GiB", ".5t", "9223372036854775807", "1..2", "-3", " 7 kb "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			if !errors.Is(err, ErrBadSize) {
				t.Fatalf("ParseSize(%q): error %v does not wrap ErrBadSize", s, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d < 0", s, n)
		}
		// Any size read back as plain bytes is the same size.
		back, err := ParseSize(strconv.FormatInt(n, 10) + "B")
		if err != nil || back != n {
			t.Fatalf("ParseSize(%q) = %d, but its byte count reads back as %d, %v", s, n, back, err)
		}
		// A larger unit never gives fewer bytes.
		if m, err := ParseSize(s + "k"); err == nil && m < n {
			t.Fatalf("ParseSize(%q) = %d > ParseSize(%q) = %d", s, n, s+"k", m)
		}
	})
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		n    int64
		want string
	}{
		{0, "0B"},
		{1023, "1023B"},
		{1024, "1KiB"},
		{64 << 20, "64MiB"},
		{1025, "1.0KiB"},
		{1536 << 20, "1.5GiB"},
		{math.MaxInt64, "8192.0PiB"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("n=%d", tt.n), func(t *testing.T) {
			if got := FormatSize(tt.n); got != tt.want {
				t.Errorf("FormatSize(%d) = %q, want %q", tt.n, got, tt.want)
			}
		})
	}
}
