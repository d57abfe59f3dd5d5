package proxies

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/fetch-dev/fetch/limits"
)

// ErrPoolConflict is wrapped by the error Budgets returns when two lines of
// one pool set different values for the same key.
var ErrPoolConflict = errors.New("proxies: conflicting pool settings")

// Budgets groups ps into concurrency and rate budgets, in order of first
// appearance: one for each proxy without a pool, and one for each pool,
// shared by all its proxies. It returns each budget's Spec (what the
// scheduler is given for it) and name (the proxy's ID, or the pool name),
// and for each index of ps the index of its budget. The three slices are
// all it makes: for 100,000 proxies without pools, a list of per-budget
// structs beside them was 10 MB that a start allocated and dropped.
//
// A value set on a proxy's line overrides the default def. The lines of a
// pool may set concurrency, rate and burst on one line, or repeat the same
// value on several (rates are the same when they allow the same number of
// events per second: 60/m is 1/s); different values give an error wrapping
// ErrPoolConflict that names the pool and the two lines.
func Budgets(ps []Proxy, def limits.Spec) (specs []limits.Spec, names []string, budgetOf []int, err error) {
	type setting struct {
		val string // for the conflict message
		src string // where it was set; "" if not set
	}
	type poolState struct {
		idx               int
		conc, rate, burst setting
	}
	var pools map[string]*poolState
	budgetOf = make([]int, len(ps))
	// Made to size for the case without pools, one budget a proxy.
	specs = make([]limits.Spec, 0, len(ps))
	names = make([]string, 0, len(ps))
	for i := range ps {
		p := &ps[i]
		if p.Pool == "" {
			b := def
			if p.Concurrency > 0 {
				b.Concurrency = p.Concurrency
			}
			if p.RateSet {
				b.Rate = p.Rate
			}
			if p.Burst > 0 {
				b.Burst = p.Burst
			}
			budgetOf[i] = len(specs)
			specs, names = append(specs, b), append(names, p.ID)
			continue
		}
		st, ok := pools[p.Pool]
		if !ok {
			if pools == nil {
				pools = make(map[string]*poolState)
			}
			st = &poolState{idx: len(specs)}
			pools[p.Pool] = st
			specs, names = append(specs, def), append(names, p.Pool)
		}
		b := &specs[st.idx]
		budgetOf[i] = st.idx
		conflict := func(key string, old setting, val string) error {
			return fmt.Errorf("%w: pool %q: %s=%s at %s conflicts with %s=%s at %s",
				ErrPoolConflict, p.Pool, key, val, p.Source(), key, old.val, old.src)
		}
		if p.Concurrency > 0 {
			v := strconv.Itoa(p.Concurrency)
			switch {
			case st.conc.src == "":
				st.conc = setting{v, p.Source()}
				b.Concurrency = p.Concurrency
			case b.Concurrency != p.Concurrency:
				return nil, nil, nil, conflict("concurrency", st.conc, v)
			}
		}
		if p.RateSet {
			v := p.Rate.String()
			switch {
			case st.rate.src == "":
				st.rate = setting{v, p.Source()}
				b.Rate = p.Rate
			case !sameRate(b.Rate, p.Rate):
				return nil, nil, nil, conflict("rate", st.rate, v)
			}
		}
		if p.Burst > 0 {
			v := strconv.Itoa(p.Burst)
			switch {
			case st.burst.src == "":
				st.burst = setting{v, p.Source()}
				b.Burst = p.Burst
			case b.Burst != p.Burst:
				return nil, nil, nil, conflict("burst", st.burst, v)
			}
		}
	}
	return specs, names, budgetOf, nil
}

// sameRate reports whether a and b allow the same events per second, up to
// rounding.
func sameRate(a, b limits.Rate) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() == b.IsZero()
	}
	x, y := float64(a.Limit()), float64(b.Limit())
	return math.Abs(x-y) <= 1e-9*math.Max(math.Abs(x), math.Abs(y))
}
