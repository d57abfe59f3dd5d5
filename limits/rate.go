package limits

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a number of events per period, such as 5 per 2 seconds. The zero
// Rate means unlimited.
type Rate struct {
	N   float64       // events in each period; > 0 unless the Rate is zero
	Per time.Duration // the period; > 0 unless the Rate is zero
}

// ErrBadRate is wrapped by every error ParseRate returns.
var ErrBadRate = errors.New("limits: bad rate")

// MaxRate is the fastest rate ParseRate accepts, in events per second
// (the messages say 1e9).
const MaxRate = 1e9

// RateError is a rate ParseRate refused: the value and why. Reason does not
// quote the value, so callers that must not show it (it may come from a
// line that holds a password) can use Reason alone.
type RateError struct {
	Value  string
	Reason string
}

func (e *RateError) Error() string { return fmt.Sprintf("%v %q: %s", ErrBadRate, e.Value, e.Reason) }
func (e *RateError) Unwrap() error { return ErrBadRate }

// maxRateLen bounds the text ParseRate accepts: a rate is a short flag value.
const maxRateLen = 64

// ParseRate parses "N/s", "N/m", "N/h" or "N/DURATION" (such as "5/2s" or
// "0.5/100ms"). N is a positive decimal number; the duration is as for
// time.ParseDuration, with the bare units s, m and h meaning one of each.
// The words "unlimited" and "0" and the empty string give the zero Rate.
func ParseRate(s string) (Rate, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", "0", "unlimited":
		return Rate{}, nil
	}
	if len(s) > maxRateLen {
		return Rate{}, &RateError{s[:maxRateLen] + "...", "too long"}
	}
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, &RateError{s, "want N/s, N/m, N/h or N/DURATION"}
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	switch {
	case err != nil && !errors.Is(err, strconv.ErrRange), n != n:
		return Rate{}, &RateError{s, "the count before / is not a number"}
	case n < 0:
		return Rate{}, &RateError{s, "the count before / is negative"}
	case n == 0:
		return Rate{}, &RateError{s, "the count before / is 0 (write 0 alone for unlimited)"}
	case err != nil, n > MaxRate:
		return Rate{}, &RateError{s, "too large: at most 1e9 per second"}
	}
	per = strings.TrimSpace(per)
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	default:
		d, err = time.ParseDuration(per)
		if err != nil || d <= 0 {
			return Rate{}, &RateError{s, "the period after / must be s, m, h or a positive duration"}
		}
	}
	if n/d.Seconds() > MaxRate {
		return Rate{}, &RateError{s, "too large: at most 1e9 per second"}
	}
	return Rate{N: n, Per: d}, nil
}

// IsZero reports whether r is the zero (unlimited) Rate.
func (r Rate) IsZero() bool { return r.N <= 0 || r.Per <= 0 }

// Limit converts r to events per second for golang.org/x/time/rate; the zero
// Rate gives rate.Inf.
func (r Rate) Limit() rate.Limit {
	if r.IsZero() {
		return rate.Inf
	}
	return rate.Limit(r.N / r.Per.Seconds())
}

// String formats r so that ParseRate reads it back.
func (r Rate) String() string {
	if r.IsZero() {
		return "unlimited"
	}
	return strconv.FormatFloat(r.N, 'g', -1, 64) + "/" + r.Per.String()
}
