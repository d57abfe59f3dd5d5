package fetch_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// TestPoliciesHoldLimitsWhileProxiesFlap runs slow bodies through three
// proxies, one of which goes down twice and one of which fails every third
// request, under each policy. No proxy may ever have more in
// flight at the target than its budget, every line gets one record, and the
// flapping proxy is benched and restored (the report lists its states).
func TestPoliciesHoldLimitsWhileProxiesFlap(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	caps := []int{2, 3, 2}
	for pi, policy := range []limits.Policy{limits.LeastInFlight, limits.LeastUsed, limits.RoundRobin, limits.Random} {
		t.Run(policy.String(), func(t *testing.T) {
			tg.ResetStats()
			// The flapping proxy is down from 50ms to 200ms and from 350ms
			// to 450ms into the run, and up otherwise.
			begin := time.Now()
			down := func() bool {
				t := time.Since(begin)
				return t >= 50*time.Millisecond && t < 200*time.Millisecond ||
					t >= 350*time.Millisecond && t < 450*time.Millisecond
			}
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
					opts.Down = down
				case 1:
					opts.FailEvery = 3
				}
				px := startProxy(t, "http", opts)
				cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = c }))
			}
			var lines []string
			for i := range 300 { // about 800ms: past both outages
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

// TestPushbackSlowsTheRun: a target that answers 503 to everything through
// one proxy narrows that proxy's window to it, then spaces its attempts:
// the retries cannot all go at once.
func TestPushbackSlowsTheRun(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(60)})
	cfg := fetch.DefaultConfig()
	cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, func(p *proxies.Proxy) { p.Concurrency = 4 })}
	cfg.Retries = 2
	cfg.RetryBackoff = time.Millisecond
	cfg.PushbackDelay = 50 * time.Millisecond
	cfg.PushbackMax = 100 * time.Millisecond
	var lines []string
	for i := range 4 {
		lines = append(lines, fmt.Sprintf("%s/busy/%d?status=503", tg.URL, i))
	}
	start := time.Now()
	recs, _ := run(t, cfg, lines...)
	// Without pushback the 12 attempts take milliseconds. With it: 4 in
	// flight, then 2, then 1, then starts spaced 50ms, then 100ms (the
	// most): at least 300ms in all.
	if el := time.Since(start); el < 300*time.Millisecond {
		t.Errorf("12 attempts answered 503 took %s: pushback did not slow the pair", el)
	}
	for _, r := range recs {
		if r.Error == nil || r.Error.Kind != results.KindStatus || r.Attempts != 3 {
			t.Errorf("record %+v error %+v", r, r.Error)
		}
	}
	cfg.PushbackDelay = 0 // off: nothing slows the retries
	start = time.Now()
	run(t, cfg, lines...)
	if el := time.Since(start); el > 300*time.Millisecond {
		t.Errorf("with --pushback-delay 0 the run took %s", el)
	}
}

// TestDeadTargetDoesNotBenchProxy: a proxy that answers that it cannot
// reach the target (CONNECT 502, SOCKS "connection refused") did its job:
// however often it happens, the proxy stays in service for other URLs.
func TestDeadTargetDoesNotBenchProxy(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	for _, kind := range []string{"http", "socks5"} {
		t.Run(kind, func(t *testing.T) {
			px := startProxy(t, kind, fetchtest.ProxyOptions{})
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 1
			cfg.Retries = 0
			cfg.ProxyMaxFailures = 2
			cfg.ProxyCooldown = time.Minute
			cfg.Timeout = 2 * time.Second
			cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
			var lines []string
			for i := range 5 {
				lines = append(lines, fmt.Sprintf("https://127.0.0.1:1/dead/%d", i))
			}
			for i := range 3 {
				lines = append(lines, fmt.Sprintf("%s/alive/%d", tg.URL, i))
			}
			recs, rep := run(t, cfg, lines...)
			for line := 1; line <= 5; line++ {
				if e := recs[line].Error; e == nil || e.Phase != results.PhaseProxy {
					t.Errorf("dead target line %d: %+v, want a proxy-phase failure", line, e)
				}
			}
			for line := 6; line <= 8; line++ {
				if !recs[line].OK {
					t.Errorf("line %d after the dead target: %+v", line, recs[line].Error)
				}
			}
			if h := rep.Proxies[cfg.Proxies[0].ID].Health; len(h) != 0 {
				t.Errorf("proxy changed state %+v because a target was down", h)
			}
		})
	}
}
