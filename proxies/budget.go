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

// Budget is one concurrency and rate budget: one for each proxy without a
// pool, and one for each pool, shared by all its proxies. Its Spec is what
// the scheduler is given for it.
type Budget struct {
	Name string // the proxy's ID, or the pool name
	Pool string // the pool name; "" for a proxy without a pool
	limits.Spec
	Members []int // indexes of its proxies in the slice given to Budgets
}

// Budgets groups ps into budgets, in order of first appearance, and returns
// them with, for each index of ps, the index of its budget.
//
// A value set on a proxy's line overrides the default def. The lines of a pool may set concurrency, rate and burst
// on one line, or repeat the same value on several (rates are the same when
// they allow the same number of events per second: 60/m is 1/s); different
// values give an error wrapping ErrPoolConflict that names the pool and the
// two lines.
func Budgets(ps []Proxy, def limits.Spec) (budgets []Budget, budgetOf []int, err error) {
	type setting struct {
		val string // for the conflict message
		src string // where it was set; "" if not set
	}
	type poolState struct {
		idx               int
		conc, rate, burst setting
	}
	pools := make(map[string]*poolState)
	budgetOf = make([]int, len(ps))
	// Made to size, and a proxy's own budget's Members a piece of one
	// slice: for 100,000 proxies, one allocation instead of 100,000, and
	// none of the list grown five times over (36 MB allocated for it).
	budgets = make([]Budget, 0, len(ps))
	own := make([]int, len(ps))
	for i, p := range ps {
		if p.Pool == "" {
			own[i] = i
			b := Budget{Name: p.ID, Spec: def, Members: own[i : i+1 : i+1]}
			if p.Concurrency > 0 {
				b.Concurrency = p.Concurrency
			}
			if p.RateSet {
				b.Rate = p.Rate
			}
			if p.Burst > 0 {
				b.Burst = p.Burst
			}
			budgetOf[i] = len(budgets)
			budgets = append(budgets, b)
			continue
		}
		st, ok := pools[p.Pool]
		if !ok {
			st = &poolState{idx: len(budgets)}
			pools[p.Pool] = st
			budgets = append(budgets, Budget{Name: p.Pool, Pool: p.Pool, Spec: def})
		}
		b := &budgets[st.idx]
		b.Members = append(b.Members, i)
		budgetOf[i] = st.idx
		conflict := func(key string, old setting, val string) error {
			return fmt.Errorf("%w: pool %q: %s=%s at %s conflicts with %s=%s at %s",
				ErrPoolConflict, p.Pool, key, val, p.Source, key, old.val, old.src)
		}
		if p.Concurrency > 0 {
			v := strconv.Itoa(p.Concurrency)
			switch {
			case st.conc.src == "":
				st.conc = setting{v, p.Source}
				b.Concurrency = p.Concurrency
			case b.Concurrency != p.Concurrency:
				return nil, nil, conflict("concurrency", st.conc, v)
			}
		}
		if p.RateSet {
			v := p.Rate.String()
			switch {
			case st.rate.src == "":
				st.rate = setting{v, p.Source}
				b.Rate = p.Rate
			case !sameRate(b.Rate, p.Rate):
				return nil, nil, conflict("rate", st.rate, v)
			}
		}
		if p.Burst > 0 {
			v := strconv.Itoa(p.Burst)
			switch {
			case st.burst.src == "":
				st.burst = setting{v, p.Source}
				b.Burst = p.Burst
			case b.Burst != p.Burst:
				return nil, nil, conflict("burst", st.burst, v)
			}
		}
	}
	return budgets, budgetOf, nil
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
