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
		return Rate{}, fmt.Errorf("%w: too long", ErrBadRate)
	}
	num, per, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, fmt.Errorf("%w %q: want N/s, N/m, N/h or N/DURATION", ErrBadRate, s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || n <= 0 || n > 1e9 || n != n {
		return Rate{}, fmt.Errorf("%w %q: count must be a positive number", ErrBadRate, s)
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
			return Rate{}, fmt.Errorf("%w %q: period must be s, m, h or a positive duration", ErrBadRate, s)
		}
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
