package cmd

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// ErrBadSize is wrapped by every error ParseSize returns.
var ErrBadSize = errors.New("bad size")

// maxSizeLen bounds the text ParseSize accepts: a size is a short flag value.
const maxSizeLen = 64

// sizeUnits maps a lower-case unit to its number of bytes. The IEC units
// (KiB, MiB …) and the bare letters (k, m, g, t, as curl and aria2 read them)
// are powers of 1024; the SI units (kB, MB …) are powers of 1000.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
	"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
	"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
}

// ParseSize parses a byte count such as "64MiB", "10MB", "1k", "1.5GiB" or
// "512". The number is a non-negative decimal, optionally with a fraction;
// the unit is case-insensitive: B, k/K, KiB, kB/KB and so on up to T. A
// fractional result is rounded down to whole bytes. Sizes above the largest
// int64 are an error.
func ParseSize(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	if len(s) > maxSizeLen {
		return 0, fmt.Errorf("%w: too long", ErrBadSize)
	}
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
		i++
	}
	num, unit := s[:i], strings.ToLower(strings.TrimSpace(s[i:]))
	if num == "" {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit", ErrBadSize, orig)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q: unknown unit %q (want B, k, KiB, kB, M, MiB, MB, G, GiB, GB, T, TiB or TB)", ErrBadSize, orig, s[i:])
	}
	intPart, frac, hasDot := strings.Cut(num, ".")
	if intPart == "" && frac == "" || strings.Contains(frac, ".") {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit", ErrBadSize, orig)
	}
	if !hasDot {
		n, err := strconv.ParseInt(intPart, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return 0, fmt.Errorf("%w %q: too large", ErrBadSize, orig)
		}
		return n * mult, nil
	}
	// A fraction: compute exactly with rationals, then round down.
	r, ok := new(big.Rat).SetString("0" + intPart + "." + frac + "0")
	if !ok {
		return 0, fmt.Errorf("%w %q: want a number followed by an optional unit", ErrBadSize, orig)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	if !n.IsInt64() {
		return 0, fmt.Errorf("%w %q: too large", ErrBadSize, orig)
	}
	return n.Int64(), nil
}

// FormatSize formats n bytes for people, with IEC units and one decimal
// unless the size is a whole number of its unit. ParseSize reads it back
// (to within the rounding of the decimal).
func FormatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	suffix := string("KMGTP"[exp]) + "iB"
	if n%div == 0 {
		return strconv.FormatInt(n/div, 10) + suffix
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + suffix
}
