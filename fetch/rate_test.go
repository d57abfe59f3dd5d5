package fetch_test

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// TestRateLongRun: with --rate or --proxy-rate 50/s, the target sees
// requests arrive at 50/s over three seconds within 0.5% (on the real
// clock, through the whole engine): a late timer wake-up does not push back
// the starts after it, so lateness never adds up.
func TestRateLongRun(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 3s")
	}
	for _, viaProxy := range []bool{false, true} {
		name := map[bool]string{false: "--rate", true: "--proxy-rate"}[viaProxy]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var arrivals []time.Time
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				arrivals = append(arrivals, time.Now())
				mu.Unlock()
			}))
			defer srv.Close()
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 16
			fifty := limits.Rate{N: 50, Per: time.Second}
			if viaProxy {
				p := startProxy(t, "http", fetchtest.ProxyOptions{})
				u, _ := url.Parse(p.URL)
				cfg.Proxies = []proxies.Proxy{{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: proxies.Identity(u), From: "test"}}
				cfg.ProxyRate, cfg.ProxyConcurrency = fifty, 16
			} else {
				cfg.Rate = fifty
			}
			const n = 151 // 150 intervals of 20ms: 3s
			lines := make([]string, n)
			for i := range lines {
				lines[i] = fmt.Sprintf("%s/%d", srv.URL, i)
			}
			recs, _ := run(t, cfg, lines...)
			if len(recs) != n {
				t.Fatalf("%d records, want %d", len(recs), n)
			}
			mu.Lock()
			defer mu.Unlock()
			// Each arrival trails its schedule start+k·T by its own timer's
			// lateness (and the request's way there), which on a loaded
			// machine may be tens of milliseconds now and then. What must
			// not happen is that it adds up: the least lag of the last
			// arrivals is that of the first ones, within 0.5% of the span.
			const T = 20 * time.Millisecond
			least := func(from, to int) time.Duration {
				m := time.Duration(math.MaxInt64)
				for k := from; k < to; k++ {
					m = min(m, arrivals[k].Sub(arrivals[0])-time.Duration(k)*T)
				}
				return m
			}
			span := time.Duration(n-1) * T
			drift := least(n-25, n) - least(0, 25)
			got := 50 * float64(span) / float64(span+drift)
			if math.Abs(got-50)/50 > 0.005 {
				t.Fatalf("%.3f requests/s in the long run (drift %s over %s), want 50 within 0.5%%", got, drift, span)
			}
			// And never faster than the bucket allows: 50/s, burst 1.
			for k := 1; k < n; k++ {
				if need := time.Duration(k-1) * T; arrivals[k].Sub(arrivals[0]) < need-2*time.Millisecond {
					t.Fatalf("arrival %d after %s: faster than 50/s allows", k, arrivals[k].Sub(arrivals[0]))
				}
			}
			t.Logf("%.3f requests/s in the long run (drift %s); first to last %.3f/s", got, drift, float64(n-1)/arrivals[n-1].Sub(arrivals[0]).Seconds())
		})
	}
}
