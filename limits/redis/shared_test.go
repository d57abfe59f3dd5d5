package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// counter counts attempts in flight per proxy and per budget, as the test
// sees them, and remembers the most seen at once.
type counter struct {
	mu      sync.Mutex
	cur     map[string]int
	peak    map[string]int
	grants  atomic.Int64
	attempt atomic.Int64
}

func newCounter() *counter { return &counter{cur: map[string]int{}, peak: map[string]int{}} }

func (c *counter) add(key string, d int) {
	c.mu.Lock()
	c.cur[key] += d
	c.peak[key] = max(c.peak[key], c.cur[key])
	c.mu.Unlock()
}

// hammer runs workers goroutines per scheduler, each acquiring for a
// random one of hosts and holding the lease for up to hold, until ctx ends.
// The hold is the attempt's own time, which makes the contention the
// tests are about (a timer that is the behaviour, not a wait for it): the
// tests that use hammer check caps and bounds that hold whatever it
// lasts. An attempt whose lease is lost ends then, as fetch's does: once
// a lease is lost, Redis may give its permit to another.
func hammer(ctx context.Context, t *testing.T, ss []*Scheduler, cfg limits.Config, workers int, hosts []string, hold time.Duration, cnt *counter) {
	var wg sync.WaitGroup
	for si, s := range ss {
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(si), uint64(w)))
				for ctx.Err() == nil {
					host := hosts[rng.IntN(len(hosts))]
					cnt.attempt.Add(1)
					l, err := s.Acquire(ctx, limits.Request{Host: host})
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("acquire: %v", err)
						}
						return
					}
					cnt.grants.Add(1)
					p := fmt.Sprint("p", l.Proxy)
					b := fmt.Sprint("b", cfg.BudgetOf[l.Proxy])
					cnt.add(p, 1)
					cnt.add(b, 1)
					cnt.add("h"+host, 1)
					select { // the attempt: cancelled if its lease is lost, as fetch's are
					case <-time.After(time.Duration(rng.Int64N(int64(hold) + 1))):
					case <-l.Lost:
					}
					cnt.add(p, -1)
					cnt.add(b, -1)
					cnt.add("h"+host, -1)
					l.Finish(limits.Outcome(rng.IntN(2))) // neutral or success
				}
			})
		}
	}
	wg.Wait()
}

// poolConfig: proxies 0..2 with their own caps 1, 2, 3; proxies 3..6 in
// one pool "resi" of cap 3.
func poolConfig() limits.Config {
	cfg := limits.Config{
		Budgets:     []limits.Spec{{Concurrency: 1}, {Concurrency: 2}, {Concurrency: 3}, {Concurrency: 3}},
		BudgetOf:    []int{0, 1, 2, 3, 3, 3, 3},
		BudgetNames: []string{"http://a:1", "http://b:1", "http://c:1", "resi"},
		ProxyIDs:    []string{"http://a:1", "http://b:1", "http://c:1", "http://d:1", "http://e:1", "http://f:1", "http://g:1"},
		Host:        limits.Spec{Concurrency: 4},
	}
	return cfg
}

func checkCaps(t *testing.T, cfg limits.Config, cnt *counter, hostCap int) {
	t.Helper()
	cnt.mu.Lock()
	defer cnt.mu.Unlock()
	for b, sp := range cfg.Budgets {
		if got := cnt.peak[fmt.Sprint("b", b)]; got > sp.Concurrency {
			t.Errorf("budget %d: %d in flight at once, cap %d", b, got, sp.Concurrency)
		}
	}
	for k, v := range cnt.peak {
		if k[0] == 'h' && hostCap > 0 && v > hostCap {
			t.Errorf("host %s: %d in flight at once, cap %d", k[1:], v, hostCap)
		}
	}
}

// TestCapsAcrossSchedulers: four schedulers (standing in for processes)
// sharing one namespace never exceed a proxy's, a pool's or a host's cap,
// and use the capacity they have.
func TestCapsAcrossSchedulers(t *testing.T) {
	for _, pol := range []limits.Policy{limits.LeastInFlight, limits.LeastUsed, limits.RoundRobin, limits.Random} {
		t.Run(policyName(pol), func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := poolConfig()
			cfg.Policy = pol
			var ss []*Scheduler
			for range 4 {
				ss = append(ss, newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			cnt := newCounter()
			hammer(ctx, t, ss, cfg, 6, []string{"x:80", "y:80", "z:80"}, 3*time.Millisecond, cnt)
			checkCaps(t, cfg, cnt, 4)
			cnt.mu.Lock()
			for b, sp := range cfg.Budgets {
				if cnt.peak[fmt.Sprint("b", b)] < sp.Concurrency {
					t.Errorf("budget %d never full: peak %d of %d", b, cnt.peak[fmt.Sprint("b", b)], sp.Concurrency)
				}
			}
			cnt.mu.Unlock()
			t.Logf("%d grants", cnt.grants.Load())
			checkIdle(t, srv, ss...)
		})
	}
}

// TestRateAcrossSchedulers: the admissions of four schedulers, on the
// Redis clock, meet the GCRA bound for a proxy's rate, a host's rate and
// the global rate, and reach the rate: at least 90% of the tokens the
// machine left them (checkRate). Before, the test wanted 75% of 1.5s's
// tokens, lower than the brief's 90% for a shared machine's late timers,
// and failed at 109 of 112 under load.
func TestRateAcrossSchedulers(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*limits.Config)
		per  time.Duration // one admission per
		b    int
	}{
		{"proxy 100/s burst 3", func(c *limits.Config) {
			c.Budgets[0] = limits.Spec{Rate: limits.Rate{N: 100, Per: time.Second}, Burst: 3}
		}, 10 * time.Millisecond, 3},
		{"host 3/30ms burst 1", func(c *limits.Config) {
			c.Host = limits.Spec{Rate: limits.Rate{N: 3, Per: 30 * time.Millisecond}, Burst: 1}
		}, 10 * time.Millisecond, 1},
		{"global 50/s", func(c *limits.Config) { c.Global = limits.Rate{N: 50, Per: time.Second} }, 20 * time.Millisecond, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := proxies(1, limits.Spec{})
			tc.set(&cfg)
			// The run lasts until the rate has made 1.5s's admissions; the
			// deadline only bounds a run that goes wrong.
			want := int(1500 * time.Millisecond / tc.per)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			var gs []grantTrace
			var ss []*Scheduler
			for range 4 {
				s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
				s.onGrant = func(g grantTrace) {
					mu.Lock()
					if gs = append(gs, g); len(gs) == want {
						cancel()
					}
					mu.Unlock()
				}
				ss = append(ss, s)
			}
			cnt := newCounter()
			hammer(ctx, t, ss, cfg, 4, []string{"x:80"}, 0, cnt)
			mu.Lock() // not held over checkIdle: a late grant's onGrant must not block its give-back
			got := slices.Clone(gs)
			mu.Unlock()
			if len(got) < want {
				t.Fatalf("%d admissions in a minute, want %d", len(got), want)
			}
			checkBound(t, tc.name, chargedAt(got), float64(tc.per.Microseconds()), tc.b)
			checkRate(t, tc.name, got, tc.per.Microseconds(), tc.b, 0.9)
			checkIdle(t, srv, ss...)
		})
	}
}

// checkRate checks that the grants of a rate of period T (µs) and burst
// b, asked for all along, use at least frac of the tokens of their span
// (on the Redis clock) that the machine did not take: a grant whose ask
// reached Redis more than LATE after the limiter would have let it start
// (replayed by gcraModel) is charged when it arrived, by design, and the
// time it came late is not counted.
func checkRate(t *testing.T, name string, gs []grantTrace, T int64, b int, frac float64) {
	t.Helper()
	slices.SortFunc(gs, func(x, y grantTrace) int { return cmp.Compare(x.charged, y.charged) })
	g := gcraModel{t: float64(T), tau: float64(T) * float64(max(b, 1))}
	L := float64(late.Microseconds())
	var held int
	var heldUs float64
	for i, x := range gs {
		allow := g.tat + g.t - g.tau // when the limiter would have let it start
		if i > 0 && float64(x.ran)-allow > L {
			held++
			heldUs += float64(x.charged) - allow
		}
		g.tat = math.Max(g.tat, float64(x.charged)) + g.t
	}
	span := float64(gs[len(gs)-1].charged - gs[0].charged)
	tokens := (span-heldUs)/float64(T) + 1
	if float64(len(gs)) < frac*tokens {
		t.Errorf("%s: %d grants, want at least %.2f of the %.0f tokens of their %.0fms less %.0fms of asks held back",
			name, len(gs), frac, tokens, span/1000, heldUs/1000)
	}
	t.Logf("%s: %d grants, %.2f of %.0f tokens; %d asks held back %.0fms in all", name, len(gs), float64(len(gs))/tokens, tokens, held, heldUs/1000)
}

// TestRateKeepsItsSchedule: waiters of one process, for a global, a
// proxy's and a host's rate, are charged their tokens one interval apart,
// at the times the tokens came due, not at the later times their asks
// reached Redis. Charged at those, every timed wait lost the dispatcher's
// timer lateness and a round trip: --rate 50/s gave 47.5/s.
//
// The slow cases send every command 3.5 ms late, as a far Redis would, at
// 200/s: the ask for the waiter after a grant arrives after that waiter's
// token came due, and it must be charged at the time its token came due,
// not when its ask arrived (--rate 1000/s gave 895/s so).
//
// The last case polls every 37.5 to 112.5 ms, where a token's wait is just
// under 80 ms: the dispatcher must still wake when the token comes due,
// not up to 33 ms later with its poll (and be charged then: about a third
// of the intervals were off so). TestPollWait checks that choice itself.
//
// The host cases rate four hosts at once: each host keeps its own
// schedule. With one logical time for the whole process, a host's wait
// overwrote another's, and each host lost its timer's lateness at every
// token (--host-rate 25/s on four hosts gave 24.6/s each).
//
// What a loaded machine does is taken from the grants themselves, on the
// Redis clock (Scheduler.onGrant), not guessed: an ask that reaches Redis
// more than LATE (10 ms) after the process's logical time is charged when
// it arrives, by design (a stalled process catches up by at most LATE),
// and the lateness of such an ask is the machine's, not lost by the
// scheduler. Every other grant of a rate's schedule is checked exactly
// (see checkSchedule), and the run lasts until each rate has had as many
// grants as a second (two when polled) has tokens, however long that
// takes. Before, the test counted the grants of one second of the wall
// clock, and a loaded machine's stalls took it from 0.8 of the tokens
// to 0.6 and then 0.3.
func TestRateKeepsItsSchedule(t *testing.T) {
	slow, fast := limits.Rate{N: 50, Per: time.Second}, limits.Rate{N: 200, Per: time.Second}
	for _, tc := range []struct {
		name  string
		rate  limits.Rate
		delay time.Duration // of every command sent to Redis
		poll  time.Duration // Options.Poll; 0 for the default
		set   func(*limits.Config, limits.Rate)
		// by "host" or "proxy": that many (n) hosts or proxies, each rated
		// on its own and checked on its own, with 16 workers for each host
		// (for each proxy, 16 workers of one host); "": one of each
		by string
		n  int
		// perCall: the fewest grants one acquire call must make on
		// average, 0 for no check
		perCall float64
	}{
		{"global", slow, 0, 0, func(c *limits.Config, r limits.Rate) { c.Global = r }, "", 0, 0},
		{"proxy", slow, 0, 0, proxyRate, "", 0, 0},
		{"host", slow, 0, 0, hostRate, "", 0, 0},
		{"global, slow Redis", fast, 3500 * time.Microsecond, 0, func(c *limits.Config, r limits.Rate) { c.Global = r }, "", 0, 0},
		{"proxy, slow Redis", fast, 3500 * time.Microsecond, 0, proxyRate, "", 0, 0},
		// A round trip longer than a token's period: one call must start
		// every waiter whose token has come due, or the rate falls to one
		// start a round trip (286/s here). Such a call makes about 3.5
		// grants, and more when the machine delays it; one at a time
		// would come late by more than LATE after a few tokens, and its
		// lateness look like the machine's, so the calls are counted.
		{"global, Redis slower than the rate", limits.Rate{N: 1000, Per: time.Second}, 3500 * time.Microsecond, 0,
			func(c *limits.Config, r limits.Rate) { c.Global = r }, "", 0, 2},
		{"global, polled", limits.Rate{N: 1, Per: 80 * time.Millisecond}, 0, 75 * time.Millisecond,
			func(c *limits.Config, r limits.Rate) { c.Global = r }, "", 0, 0},
		{"four hosts", slow, 0, 0, hostRate, "host", 4, 0},
		{"four hosts, slow Redis", fast, 3500 * time.Microsecond, 0, hostRate, "host", 4, 0},
		{"four proxies", slow, 0, 0, proxyRate, "proxy", 4, 0},
		{"four proxies, slow Redis", fast, 3500 * time.Microsecond, 0, proxyRate, "proxy", 4, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			np := 1
			if tc.by == "proxy" {
				np = tc.n
			}
			cfg := proxies(np, limits.Spec{})
			tc.set(&cfg, tc.rate)
			acquires := &countHook{hash: newScripts().acquire.Hash()}
			hooks := []goredis.Hook{acquires}
			if tc.delay > 0 {
				hooks = append(hooks, lateHook(tc.delay))
			}
			s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second, Poll: tc.poll}, cfg, hooks...)
			hosts := []string{"x:80"}
			if tc.by == "host" {
				hosts = hosts[:0]
				for i := range tc.n {
					hosts = append(hosts, fmt.Sprintf("h%d:80", i))
				}
			}
			T := tc.rate.Per.Microseconds() / int64(tc.rate.N)
			want := int(time.Second.Microseconds() / T) // grants of each rate: a second's tokens
			if tc.poll > 0 {
				want *= 2 // 24 intervals
			}
			// The run ends once every rate has had want grants; the
			// deadline only bounds a run that goes wrong.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// The grants of the calls sent once every worker has had a
			// lease (before, some Acquires find the queue empty and are
			// charged when they reach Redis) and before the run ended.
			var mu sync.Mutex
			at := map[string][]grantTrace{} // by what is rated on its own
			var settled, ended time.Time
			all := 0 // every grant, for perCall
			s.onGrant = func(g grantTrace) {
				var k string
				switch tc.by {
				case "host":
					k = g.host
				case "proxy":
					k = cfg.ProxyIDs[g.proxy]
				}
				mu.Lock()
				defer mu.Unlock()
				all++
				if settled.IsZero() || g.sent.Before(settled) || !ended.IsZero() {
					return
				}
				at[k] = append(at[k], g)
				if len(at) < max(tc.n, 1) {
					return
				}
				for _, gs := range at {
					if len(gs) < want {
						return
					}
				}
				ended = time.Now()
				cancel()
			}
			keepAsking(ctx, t, s, hosts, 16*max(tc.n, 1), func() { mu.Lock(); settled = time.Now(); mu.Unlock() })
			mu.Lock()
			defer mu.Unlock()
			if ended.IsZero() {
				n := map[string]int{}
				for k, gs := range at {
					n[k] = len(gs)
				}
				t.Fatalf("the run did not end in a minute: grants %v, want %d of each", n, want)
			}
			for k, gs := range at {
				name := strings.TrimSpace(tc.name + " " + k)
				checkBound(t, name, chargedAt(gs), float64(T), 1)
				checkSchedule(t, name, gs, T, tc.by != "proxy", tc.by == "host" || strings.HasPrefix(tc.name, "host"))
			}
			if calls := acquires.n.Load(); tc.perCall > 0 && float64(all) < tc.perCall*float64(calls) {
				t.Errorf("%d grants in %d acquire calls, want at least %.1f a call", all, calls, tc.perCall)
			}
		})
	}
}

// keepAsking runs n workers, for hosts in turn, until ctx ends. Each asks
// again as soon as it has a lease, which another goroutine gives back, so
// that the scheduler's queue does not run dry while the run lasts: an
// Acquire that finds it empty is charged when it reaches Redis, and until
// the queue has formed, some do. settled is called once every worker has
// had a lease: from then on, all wait in the queue but those on their way
// back to it.
func keepAsking(ctx context.Context, t *testing.T, s *Scheduler, hosts []string, n int, settled func()) {
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(n)
	for i := range n {
		wg.Go(func() {
			first := true
			for {
				l, err := s.Acquire(ctx, limits.Request{Host: hosts[i%len(hosts)]})
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("acquire: %v", err)
					}
					if first {
						started.Done()
					}
					return
				}
				wg.Go(l.Release)
				if first {
					first = false
					started.Done()
				}
			}
		})
	}
	started.Wait()
	settled()
	wg.Wait()
}

// checkSchedule checks the grants of one rate of period T (µs), burst 1,
// as TestRateKeepsItsSchedule sees them (of calls sent while the waiters
// kept a schedule). host says that the rate's logical time is its host's,
// not the process's; own, that the logical time is this rate's alone
// (false for one proxy's rate of several, which share the process's).
//
// Every grant is charged as acquire.lua says: when its ask reached Redis
// at most LATE after the logical time its process sent with it, at the
// later of that time and when its token came due; otherwise at the later
// of its arrival and that. With its own logical time, a grant whose ask
// reached Redis at most LATE after its token came due is charged exactly
// then: the process's time was right. An ask that reached Redis later
// than that was held back by the machine (a stalled process or Redis): it
// is charged when it arrives, by design, and its lateness is not the
// scheduler's. Of the tokens of the grants' span less that lateness, at
// least 0.6 are charged; with its own logical time, the checks above let
// none be lost, with a shared one a grant may be charged at another
// proxy's time.
func checkSchedule(t *testing.T, name string, gs []grantTrace, T int64, own, host bool) {
	t.Helper()
	if len(gs) < 2 {
		t.Errorf("%s: %d grants", name, len(gs))
		return
	}
	slices.SortFunc(gs, func(a, b grantTrace) int { return cmp.Compare(a.charged, b.charged) })
	L := late.Microseconds()
	var held int
	var heldUs int64
	for i := 1; i < len(gs); i++ {
		g, tok := gs[i], gs[i-1].charged+T
		due := g.due
		if host {
			due = g.hostDue
		}
		want := due
		if due == 0 || g.ran < due || g.ran-due > L {
			want = g.ran
		}
		want = max(want, tok)
		switch {
		case g.charged != want:
			t.Errorf("%s: grant %d of %d charged %+dµs from when its token came due, want %+dµs as its ask reached Redis at %+dµs with the logical time %+dµs",
				name, i, len(gs), g.charged-tok, want-tok, g.ran-tok, due-tok)
		case g.ran-tok > L:
			held++
			heldUs += g.charged - tok
		case own && g.charged != tok:
			t.Errorf("%s: grant %d of %d reached Redis %dµs after its token came due, with the logical time %+dµs: charged %dµs late",
				name, i, len(gs), g.ran-tok, due-tok, g.charged-tok)
		}
	}
	span := gs[len(gs)-1].charged - gs[0].charged
	tokens := (span-heldUs)/T + 1
	if int64(len(gs)) < tokens*6/10 {
		t.Errorf("%s: %d grants, want at least 0.6 of the %d tokens of their %dms less %dms of asks held back",
			name, len(gs), tokens, span/1000, heldUs/1000)
	}
	t.Logf("%s: %d grants for %d tokens; %d asks held back %dms in all", name, len(gs), tokens, held, heldUs/1000)
}

// chargedAt is when gs were charged.
func chargedAt(gs []grantTrace) []int64 {
	at := make([]int64, len(gs))
	for i, g := range gs {
		at[i] = g.charged
	}
	return at
}

func hostRate(c *limits.Config, r limits.Rate) { c.Host = limits.Spec{Rate: r, Burst: 1} }

func proxyRate(c *limits.Config, r limits.Rate) {
	for i := range c.Budgets {
		c.Budgets[i] = limits.Spec{Rate: r, Burst: 1}
	}
}

// TestGlobalRateAsksOncePerStart: while a global rate holds every waiter
// back, a process asks Redis about once per start. A grant's reply tells
// when the global rate's next token comes due, and the dispatcher neither
// asks for the next waiter before then nor when a release wakes it: each
// such ask could only be told to wait (--rate 1000/s made 1.7 of them per
// start).
//
// Checked call by call on the process's own clock (Scheduler.onGrant and
// onWait tell when each call was sent and what its replies said): no call
// is sent before the time the replies before it told of the global
// rate's next token. Such a time is reckoned from when the call that told
// it was sent, so an ask sent at it may still reach Redis a little before
// the token, when its way there is shorter, and be told to wait: the
// machine's doing, for which the test allowed one ask in four (1.25 a
// start), a bound a loaded machine can pass. The run lasts 200 starts.
func TestGlobalRateAsksOncePerStart(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{})
	cfg.Global = limits.Rate{N: 200, Per: time.Second}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A reply taken in: when its call was sent and, on the process's
	// clock, when it says the global rate's next token comes due (zero:
	// it says nothing of that), in the order the process took them in.
	type reply struct{ sent, next time.Time }
	var mu sync.Mutex
	var replies []reply
	var settled time.Time
	starts := 0
	s.onGrant = func(g grantTrace) {
		r := reply{sent: g.sent}
		if g.global > g.ran {
			r.next = g.sent.Add(time.Duration(g.global-g.ran) * time.Microsecond)
		}
		mu.Lock()
		defer mu.Unlock()
		replies = append(replies, r)
		if !settled.IsZero() && !g.sent.Before(settled) {
			if starts++; starts == 200 {
				cancel()
			}
		}
	}
	s.onWait = func(w waitTrace) {
		r := reply{sent: w.sent}
		if w.hard && w.waitUs >= 0 {
			r.next = w.sent.Add(time.Duration(w.waitUs) * time.Microsecond)
		}
		mu.Lock()
		replies = append(replies, r)
		mu.Unlock()
	}
	// Once every worker has had a lease, only the dispatcher asks, one
	// call after another, each once the one before is taken in.
	keepAsking(ctx, t, s, []string{"x:80", "y:80"}, 16, func() { mu.Lock(); settled = time.Now(); mu.Unlock() })
	mu.Lock()
	defer mu.Unlock()
	if starts < 200 {
		t.Fatalf("%d starts in a minute at 200/s", starts)
	}
	var next time.Time // the global rate's next token, as the process was last told
	calls, early := 0, 0
	for i, r := range replies {
		if first := i == 0 || !r.sent.Equal(replies[i-1].sent); first && r.sent.After(settled) {
			calls++
			if r.sent.Before(next) {
				early++
				t.Errorf("a call sent %v before the global rate's next token, as the replies before it told", next.Sub(r.sent))
			}
		}
		if !r.next.IsZero() {
			next = r.next
		}
	}
	t.Logf("%d acquire calls for %d starts, %d sent early", calls, starts, early)
}

// TestNoTokensFromALull: after a lull shorter than LATE, attempts that
// arrive at once are charged from the moment they arrive, not from the
// last grant's schedule: a process's schedule, and for the host rate the
// host's, goes on only while some of its attempts wait. Carried over a
// lull, 7 of 20 such attempts at 1000/s were charged in the past and
// started within 0.34 ms of each other. The charges alone cannot show a
// schedule kept too long (the first ask after the lull finds none waiting
// and is charged on arrival, which moves the limiter past any stale time),
// so the test also looks at the process's times once none waits.
func TestNoTokensFromALull(t *testing.T) {
	r := limits.Rate{N: 1000, Per: time.Second}
	for _, tc := range []struct {
		name string
		set  func(*limits.Config)
	}{
		{"global", func(c *limits.Config) { c.Global = r }},
		{"host", func(c *limits.Config) { c.Host = limits.Spec{Rate: r, Burst: 1} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			cfg := proxies(1, limits.Spec{})
			tc.set(&cfg)
			s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
			var mu sync.Mutex
			var at []int64
			s.onGrant = func(g grantTrace) { mu.Lock(); at = append(at, g.charged); mu.Unlock() }
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// Five at once: some are told to wait for their tokens and are
			// granted from the queue, where the schedule is kept.
			const pre = 5
			acquireAtOnce(ctx, t, s, pre)
			// None waits: no schedule is left to charge a later ask from.
			s.mu.Lock()
			due, hosts, waits := s.dueUs, len(s.hostNext), len(s.hostWait)
			s.mu.Unlock()
			if due != 0 || hosts != 0 || waits != 0 {
				t.Errorf("with none waiting, the process keeps due %d and %d host times (%d hosts counted)", due, hosts, waits)
			}
			// The lull: 3 tokens, well within LATE. The sleep is what is
			// tested; a loaded machine that makes it longer makes it a
			// lull past LATE, which the checks below allow as well.
			time.Sleep(3 * time.Millisecond)
			c := srv.Client()
			defer c.Close()
			lull, err := c.Time(ctx).Result()
			if err != nil {
				t.Fatal(err)
			}
			acquireAtOnce(ctx, t, s, 20)
			mu.Lock()
			defer mu.Unlock()
			for _, us := range at[pre:] {
				if us < lull.UnixMicro() {
					t.Errorf("charged %dµs before the lull ended: %v", lull.UnixMicro()-us, at)
					break
				}
			}
			checkBound(t, "after a lull", slices.Clone(at), 1000, 1)
		})
	}
}

// acquireAtOnce takes n leases for host x:80 at once from s and gives each
// back when it has it.
func acquireAtOnce(ctx context.Context, t *testing.T, s *Scheduler, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			l, err := s.Acquire(ctx, limits.Request{Host: "x:80"})
			if err != nil {
				t.Error(err)
				return
			}
			l.Release()
		})
	}
	wg.Wait()
}

// countHook counts the commands that run the script of hash (see runs).
type countHook struct {
	hash string
	n    atomic.Int64
}

func (*countHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *countHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if runs(cmd, h.hash) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (*countHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// lateHook sends every command d late, as a Redis far away would answer:
// its sleep is the slowness the tests are about.
type lateHook time.Duration

func (lateHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (d lateHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmd)
	}
}

func (d lateHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmds)
	}
}

// TestHostAtCapDoesNotBlockOthers: a request for a host at its limit does
// not hold up requests for other hosts behind it in the queue.
func TestHostAtCapDoesNotBlockOthers(t *testing.T) {
	srv := redistest.Start(t)
	cfg := proxies(2, limits.Spec{Concurrency: 4})
	cfg.Host = limits.Spec{Concurrency: 1}
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, cfg)
	ctx := context.Background()
	a, err := s.Acquire(ctx, limits.Request{Host: "busy:80"})
	if err != nil {
		t.Fatal(err)
	}
	// Two waiters for the busy host ahead of the free one, so that one
	// acquire call has a host told to wait before its second request for
	// it (acquire.lua answers that one without trying it; this test sees
	// only that the free host's waiter is not held up and the busy ones
	// end cleanly).
	blocked := make(chan error, 2)
	waits := queued(s, 2)
	bctx, cancel := context.WithCancel(ctx)
	for range 2 {
		go func() {
			l, err := s.Acquire(bctx, limits.Request{Host: "busy:80"})
			if err == nil {
				l.Release()
			}
			blocked <- err
		}()
	}
	<-waits // both wait in the queue, ahead of the free host's
	<-waits
	tctx, tcancel := context.WithTimeout(ctx, time.Second)
	defer tcancel()
	b, err := s.Acquire(tctx, limits.Request{Host: "free:80"})
	if err != nil {
		t.Fatalf("other host held up: %v", err)
	}
	b.Release()
	cancel()
	for range 2 {
		if err := <-blocked; !errors.Is(err, context.Canceled) {
			t.Fatalf("busy host's waiter: %v", err)
		}
	}
	a.Release()
	checkIdle(t, srv, s)
}

// TestAvoid: a proxy in Avoid is taken only when no other can start.
func TestAvoid(t *testing.T) {
	srv := redistest.Start(t)
	s := newSched(t, srv, Options{Namespace: "t", LeaseTTL: time.Second}, proxies(3, limits.Spec{Concurrency: 1}))
	ctx := context.Background()
	var ls []*limits.Lease
	for i := range 3 {
		l, err := s.Acquire(ctx, limits.Request{Host: "h:1", Avoid: []int{0, 1}})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && l.Proxy != 2 {
			t.Fatalf("first lease on proxy %d, want 2 (0 and 1 avoided)", l.Proxy)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		l.Release()
	}
	checkIdle(t, srv, s)
}

// TestHostBatch: a call asks for one more of a host's waiters than the
// host's limits may let start, at most batchMax. (The scripts take late,
// from which the tokens of a late ask are counted, in the header.)
func TestHostBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		host limits.Spec
		want int
	}{
		{"no host limits", limits.Spec{}, batchMax},
		{"50/s: a token and none more in 10ms", limits.Spec{Rate: limits.Rate{N: 50, Per: time.Second}, Burst: 1}, 3},
		{"200/s burst 2: 2 and 2 more in 10ms", limits.Spec{Rate: limits.Rate{N: 200, Per: time.Second}, Burst: 2}, 5},
		{"1000/s: a token and 10 more", limits.Spec{Rate: limits.Rate{N: 1000, Per: time.Second}}, 12},
		{"2000/s: more than a call holds", limits.Spec{Rate: limits.Rate{N: 2000, Per: time.Second}}, batchMax},
		{"concurrency 2", limits.Spec{Concurrency: 2}, 3},
		{"concurrency 2 and 1000/s", limits.Spec{Concurrency: 2, Rate: limits.Rate{N: 1000, Per: time.Second}}, 3},
		{"concurrency 40", limits.Spec{Concurrency: 40}, batchMax},
	} {
		cfg := proxies(1, limits.Spec{})
		cfg.Host = tc.host
		if got := hostBatch(cfg); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestPollWait: the dispatcher, waiting longer than a poll, sleeps for a
// poll drawn within [poll/2, 3poll/2), to ask again for other processes'
// releases, but never past the time a rate's token comes due. Sleeping a
// whole poll, it woke up to 33 ms after an 80 ms token with a 75 ms poll
// (TestRateKeepsItsSchedule's polled case) and about a third of the
// intervals were off.
func TestPollWait(t *testing.T) {
	const poll = 75 * time.Millisecond
	for _, tc := range []struct {
		name string
		wait time.Duration // until the next is due; -1: a wake-up
		draw time.Duration // r: the poll's draw past poll/2
		want time.Duration
	}{
		{"until a wake-up: the shortest poll", -1, 0, poll / 2},
		{"until a wake-up: the longest poll", -1, poll - 1, 3*poll/2 - 1},
		{"a token in 80ms, a poll before it", 80 * time.Millisecond, 0, poll / 2},
		{"a token in 80ms, a poll at it", 80 * time.Millisecond, 80*time.Millisecond - poll/2, 80 * time.Millisecond},
		{"a token in 80ms, a poll after it: the token", 80 * time.Millisecond, poll - 1, 80 * time.Millisecond},
		{"a token in a second: the longest poll", time.Second, poll - 1, 3*poll/2 - 1},
	} {
		if got := pollWait(tc.wait, poll, uint64(tc.draw)); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
