package redis

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// ErrConflict is wrapped by the error New returns when the namespace is in
// use by processes with other limits. The message names the first
// difference.
var ErrConflict = errors.New("limits/redis: namespace in use with other limits")

// stateVersion names how the scripts lay out a namespace's state in Redis.
// It is a line of the limits text, so that processes that would read each
// other's state wrongly (fetch versions either side of a change to it) do
// not share a namespace: the second is refused with ErrConflict naming it.
// Version 2: a proxy's health has a fourth field, its ban row's flag.
// Version 3: a lease's info has a seventh field, whether its host had bans
// when it was granted; hosts have fields x|, y| and r| (see hostLearn).
// Version 4: the hashes are one, st, its fields prefixed; a budget of one
// member names it, and its proxy is not in pidx.
const stateVersion = "4"

// setupItem is one field the setup script installs: kind 'l' (a line of
// the limits text processes compare), 'b' (a budget) or 'p' (a proxy).
type setupItem struct{ kind, field, value string }

// plan is what a configuration puts in Redis.
type plan struct {
	lines   map[string]string // the limits text: key → value
	items   []setupItem       // lines, then budgets, then proxies
	sum     string            // digest of the limits text
	nfields int               // budget and proxy fields in the cfg hash
	seq     int               // the round-robin counter's start: above every initial score
	proxies map[string]int    // proxy id → index
	budgets map[string]int    // budget name → index
	pnames  []string          // index → proxy id
	bnames  []string          // index → budget name
}

// usRate gives a rate's emission interval T and tolerance tau in
// microseconds, as the scripts' GCRA takes them: T = period/N, tau = T·burst.
// The zero Rate gives 0, 0 (unlimited).
func usRate(r limits.Rate, burst int) (t, tau float64) {
	if r.IsZero() {
		return 0, 0
	}
	t = float64(r.Per.Microseconds()) / r.N
	return t, t * float64(max(burst, 1))
}

func ff(x float64) string { return strconv.FormatFloat(x, 'g', 17, 64) }

func specText(sp limits.Spec) string {
	return fmt.Sprintf("concurrency=%d rate=%s burst=%d", max(sp.Concurrency, 0), sp.Rate, max(sp.Burst, 1))
}

func policyName(p limits.Policy) string {
	switch p {
	case limits.LeastUsed:
		return "least-used"
	case limits.RoundRobin:
		return "round-robin"
	case limits.Random:
		return "random"
	}
	return "least-inflight"
}

// newPlan checks cfg and derives what New installs. Proxies and budgets are
// keyed by their names, so two processes listing the same proxies in
// another order agree.
func newPlan(cfg limits.Config, ttl time.Duration) (*plan, error) {
	np, nb := len(cfg.BudgetOf), len(cfg.Budgets)
	if np == 0 {
		return nil, errors.New("limits/redis: no proxies")
	}
	pl := &plan{lines: map[string]string{}, proxies: map[string]int{}, budgets: map[string]int{},
		pnames: make([]string, np), bnames: make([]string, nb)}
	for i := range np {
		id := fmt.Sprintf("proxy-%d", i)
		if i < len(cfg.ProxyIDs) && cfg.ProxyIDs[i] != "" {
			id = cfg.ProxyIDs[i]
		}
		pl.pnames[i] = id
	}
	for i := range nb {
		name := fmt.Sprintf("budget-%d", i)
		if i < len(cfg.BudgetNames) && cfg.BudgetNames[i] != "" {
			name = cfg.BudgetNames[i]
		}
		pl.bnames[i] = name
	}
	for kind, names := range map[string][]string{"proxy": pl.pnames, "budget": pl.bnames} {
		seen := map[string]bool{}
		for _, n := range names {
			if strings.ContainsAny(n, " \t\r\n") {
				return nil, fmt.Errorf("limits/redis: %s name %q has white space", kind, n)
			}
			if seen[n] {
				return nil, fmt.Errorf("limits/redis: two proxies or budgets named %q", n)
			}
			seen[n] = true
		}
	}
	for i, n := range pl.pnames {
		pl.proxies[n] = i
	}
	for i, n := range pl.bnames {
		pl.budgets[n] = i
	}

	l := pl.lines
	l["state"] = stateVersion
	l["lease-ttl"] = ttl.String()
	l["policy"] = policyName(cfg.Policy)
	l["host"] = specText(cfg.Host)
	l["global"] = cfg.Global.String()
	l["health"] = fmt.Sprintf("max-failures=%d cooldown=%s max-cooldown=%s pool-wait=%s", cfg.Health.MaxFailures, cfg.Health.Cooldown, cfg.Health.MaxCooldown, cfg.Health.PoolWait)
	l["pushback"] = fmt.Sprintf("base=%s max=%s retry-after-max=%s", cfg.Pushback.Delay, cfg.Pushback.Max, cfg.Pushback.RetryAfterMax)

	members := make([][]string, nb)
	for i, b := range cfg.BudgetOf {
		if b < 0 || b >= nb {
			return nil, fmt.Errorf("limits/redis: proxy %d has budget %d of %d", i, b, nb)
		}
		members[b] = append(members[b], pl.pnames[i])
	}
	sortedB := slices.Clone(pl.bnames)
	slices.Sort(sortedB)
	var budgetItems, proxyItems []setupItem
	maxMembers := 0
	for bi, name := range sortedB {
		b := pl.budgets[name]
		sp := cfg.Budgets[b]
		ms := members[b]
		slices.Sort(ms)
		maxMembers = max(maxMembers, len(ms))
		l["budget "+name] = specText(sp) + fmt.Sprintf(" members=%d", len(ms))
		if len(ms) == 0 {
			continue // nothing can use it: Redis need not know it
		}
		t, tau := usRate(sp.Rate, sp.Burst)
		v := fmt.Sprintf("%d %s %s %d %d", max(sp.Concurrency, 0), ff(t), ff(tau), bi, len(ms))
		if len(ms) == 1 {
			v += " " + ms[0] // its only member, which the scripts then keep out of pidx
		}
		budgetItems = append(budgetItems, setupItem{"b", name, v})
		for pi, p := range ms {
			l["proxy "+p] = "budget=" + name
			proxyItems = append(proxyItems, setupItem{"p", p, fmt.Sprintf("%s %d", name, pi)})
		}
	}
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%s\t%s\n", k, l[k])
		pl.items = append(pl.items, setupItem{"l", k, l[k]})
	}
	pl.sum = hex.EncodeToString(h.Sum(nil))
	pl.items = append(pl.items, budgetItems...)
	pl.items = append(pl.items, proxyItems...)
	pl.nfields = len(budgetItems) + len(proxyItems)
	pl.seq = max(maxMembers, nb) + 1
	return pl, nil
}

// header builds the arguments every script takes first (see common.lua).
func header(cfg limits.Config, ttl time.Duration, m int, channel string) []any {
	ht, htau := usRate(cfg.Host.Rate, cfg.Host.Burst)
	gt, gtau := usRate(cfg.Global, 1)
	maxTau := max(htau, gtau)
	for _, b := range cfg.Budgets {
		_, tau := usRate(b.Rate, b.Burst)
		maxTau = max(maxTau, tau)
	}
	// After a reset, refuse acquires for one lease TTL, and at least as long
	// as the widest burst tolerance, so that the lost TATs would have
	// allowed a full burst by then anyway.
	grace := max(float64(ttl.Microseconds()), maxTau)
	us := func(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }
	return []any{
		strconv.Itoa(int(cfg.Policy)), us(ttl), strconv.Itoa(m), strconv.Itoa(m),
		strconv.Itoa(max(cfg.Host.Concurrency, 0)), ff(ht), ff(htau), ff(gt), ff(gtau),
		strconv.Itoa(max(cfg.Health.MaxFailures, 0)), us(cfg.Health.Cooldown), us(cfg.Health.MaxCooldown),
		us(cfg.Pushback.Delay), us(cfg.Pushback.Max), channel, "0", ff(grace),
		us(cfg.Health.PoolWait), strconv.Itoa(limits.BanHosts), strconv.Itoa(limits.StreakToForgive), us(late),
		us(cfg.Pushback.RetryAfterMax), us(limits.RetryAfterWindow),
	}
}

const seedArg = 15 // index in header of the per-call random seed

// setup makes sure the namespace holds this process's limits: it claims an
// empty namespace and installs them, or checks that the live ones are the
// same. reset says Redis lost its data under a running namespace: the new
// epoch then refuses acquires for a grace period. within bounds each call.
func (s *Scheduler) setup(ctx context.Context, reset bool, within time.Duration) error {
	s.setupMu.Lock()
	defer s.setupMu.Unlock()
	for range 3 {
		v, err := s.runWithin(ctx, within, s.scripts.setup, "claim", s.plan.sum, s.id)
		if err != nil {
			return err
		}
		switch r := decodeSetup(v); r.step {
		case "match":
			s.setEpoch(r.epoch)
			return nil
		case "differ":
			return s.difference(ctx, within)
		}
		const chunk = 500
		items := s.plan.items
		for len(items) > 0 {
			n := min(chunk, len(items))
			args := []any{"install", s.plan.sum, strconv.Itoa(n)}
			for _, it := range items[:n] {
				args = append(args, it.kind, it.field, it.value)
			}
			v, err := s.runWithin(ctx, within, s.scripts.setup, args...)
			if err != nil {
				return err
			}
			if decodeSetup(v).step == "differ" {
				return s.difference(ctx, within)
			}
			items = items[n:]
		}
		flag := "0" // grace from Redis's start: see setup.lua
		switch {
		case reset:
			flag = "1"
		case s.trustEmpty:
			flag = "n"
		}
		v, err = s.runWithin(ctx, within, s.scripts.setup, "seal", s.plan.sum, strconv.Itoa(s.plan.nfields),
			strconv.Itoa(s.plan.seq), newID(), flag)
		if err != nil {
			return err
		}
		switch r := decodeSetup(v); r.step {
		case "ok":
			s.setEpoch(r.epoch)
			return nil
		case "differ":
			return s.difference(ctx, within)
		}
		// incomplete: Redis lost data while we installed; start over
	}
	return fmt.Errorf("%w: namespace %q: setup did not complete", limits.ErrCoordinator, s.ns)
}

// difference names the first line where the live limits and ours differ.
func (s *Scheduler) difference(ctx context.Context, within time.Duration) error {
	v, err := s.runWithin(ctx, within, s.scripts.setup, "dump", s.plan.sum)
	if err != nil {
		return err
	}
	live := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		k, _ := v[i].(string)
		val, _ := v[i+1].(string)
		if !strings.HasPrefix(k, "~") {
			live[k] = val
		}
	}
	keys := make([]string, 0, len(live)+len(s.plan.lines))
	for k := range live {
		keys = append(keys, k)
	}
	for k := range s.plan.lines {
		if _, ok := live[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	show := func(v string, ok bool) string {
		if !ok {
			return "(none)"
		}
		return strconv.Quote(v)
	}
	for _, k := range keys {
		lv, lok := live[k]
		hv, hok := s.plan.lines[k]
		if lok != hok || lv != hv {
			return fmt.Errorf("%w: namespace %q: %s: live %s, this process %s", ErrConflict, s.ns, k, show(lv, lok), show(hv, hok))
		}
	}
	return fmt.Errorf("%w: namespace %q: the limits' digests differ", ErrConflict, s.ns)
}
