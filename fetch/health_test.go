package fetch_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/proxies"
)

// TestPoliciesHoldLimitsWhileProxiesFlap runs slow bodies through three
// proxies, one of which goes down and up every 60ms and one of which fails
// every third request, under each policy. No proxy may ever have more in
// flight at the target than its budget, every line gets one record, and the
// flapping proxy is benched and restored (the report lists its states).
func TestPoliciesHoldLimitsWhileProxiesFlap(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	caps := []int{2, 3, 2}
	for pi, policy := range []string{"least-inflight", "least-used", "round-robin", "random"} {
		t.Run(policy, func(t *testing.T) {
			tg.ResetStats()
			var down atomic.Bool
			stop := make(chan struct{})
			flapped := make(chan struct{})
			go func() {
				defer close(flapped)
				tk := time.NewTicker(60 * time.Millisecond)
				defer tk.Stop()
				for i := 0; i < 200; i++ { // bounded
					select {
					case <-stop:
						return
					case <-tk.C:
						down.Store(!down.Load())
					}
				}
			}()
			defer func() { close(stop); <-flapped }()
			cfg := fetch.DefaultConfig()
			cfg.Policy = policy
			cfg.Concurrency = 16
			cfg.ProxyMaxFailures = 2
			cfg.ProxyCooldown = 40 * time.Millisecond
			cfg.ProxyCooldownMax = 200 * time.Millisecond
			cfg.RetryBackoff = 5 * time.Millisecond
			cfg.Retries = 8
			var ips []string
			for i, c := range caps {
				ip := fetchtest.LoopbackIP(20 + 4*pi + i)
				ips = append(ips, ip)
				opts := fetchtest.ProxyOptions{BindIP: ip}
				switch i {
				case 0:
					opts.Down = down.Load
				case 1:
					opts.FailEvery = 3
				}
				px := startProxy(t, "http", opts)
				cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = c }))
			}
			var lines []string
			for i := range 120 {
				lines = append(lines, fmt.Sprintf("%s/%s/%d?chunks=2&drip=10ms&size=64", tg.URL, policy, i))
			}
			recs, rep := run(t, cfg, lines...)
			if len(recs) != len(lines) {
				t.Fatalf("%d records for %d lines", len(recs), len(lines))
			}
			for i, c := range caps {
				if got := tg.MaxInFlightFrom(ips[i]); got > c {
					t.Errorf("proxy %d (cap %d): %d in flight at the target", i, c, got)
				}
			}
			failed := 0
			for _, r := range recs {
				if !r.OK {
					failed++
				}
			}
			// Retries go around the sick proxies: nearly everything succeeds.
			if failed > len(lines)/10 {
				t.Errorf("%d of %d failed: %v", failed, len(lines), rep.ByKind)
			}
			flap := rep.Proxies[cfg.Proxies[0].ID]
			var benched, healthy bool
			for _, sc := range flap.Health {
				benched = benched || sc.State == "benched"
				healthy = healthy || sc.State == "healthy"
			}
			if !benched || !healthy {
				t.Errorf("flapping proxy's states %+v: want benched and healthy again", flap.Health)
			}
		})
	}
}
