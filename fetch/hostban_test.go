package fetch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// banTolerance is how long the runs of a host that bans every proxy may
// take on a busy machine: every URL is decided by the first answers, in
// milliseconds on loopback, so this is only the slack of a loaded 2-core
// machine, far below the 1m deadline the URLs would otherwise wait out.
const banTolerance = 10 * time.Second

// TestHostBannedByTheOneProxy is the user's case: 20 URLs of one host
// through one proxy that the host bans (--ban-status 403), -t 1m. Before,
// it took 4 minutes: 5 URLs banned, 15 waited out their deadline with no
// attempt. Now all 20 fail as banned within seconds, their message naming
// the host.
func TestHostBannedByTheOneProxy(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, nil))
	cfg.BanStatus = []int{403}
	cfg.Timeout = time.Minute
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("%s/u%d?status=403", tg.URL, i))
	}
	t0 := time.Now()
	recs, rep := run(t, cfg, lines...)
	took := time.Since(t0)
	if took > banTolerance {
		t.Errorf("took %s, want under %s", took, banTolerance)
	}
	queued := 0
	for n := 1; n <= 20; n++ {
		r := recs[n]
		if r == nil || r.OK || r.Error == nil || r.Error.Kind != results.KindBanned {
			t.Fatalf("line %d: %+v, want kind banned", n, r)
		}
		if r.Error.Phase == results.PhaseQueue {
			queued++
			if !strings.Contains(r.Error.Message, tg.Addr) || !strings.Contains(r.Error.Message, "the one proxy") {
				t.Errorf("line %d: message %q does not name the host %s and the one proxy", n, r.Error.Message, tg.Addr)
			}
		}
	}
	if queued == 0 {
		t.Error("no URL failed in phase queue: each was tried")
	}
	if rep.ByKind[results.KindBanned] != 20 {
		t.Errorf("report by kind %v, want 20 banned", rep.ByKind)
	}
	t.Logf("20 URLs banned in %s, %d of them in phase queue", took.Round(time.Millisecond), queued)
}

// TestHostBannedOthersGoOn: two hosts through one proxy, one of which bans
// it: the other host's URLs are all fetched.
func TestHostBannedOthersGoOn(t *testing.T) {
	banning := startTarget(t, fetchtest.TargetOptions{})
	fine := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, nil))
	cfg.BanStatus = []int{403}
	cfg.Timeout = time.Minute
	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf("%s/b%d?status=403", banning.URL, i), fmt.Sprintf("%s/f%d", fine.URL, i))
	}
	t0 := time.Now()
	recs, _ := run(t, cfg, lines...)
	if took := time.Since(t0); took > banTolerance {
		t.Errorf("took %s, want under %s", took, banTolerance)
	}
	for n := 1; n <= 20; n++ {
		r := recs[n]
		if n%2 == 0 {
			if !r.OK {
				t.Errorf("line %d of the host that does not ban: %+v", n, r.Error)
			}
		} else if r.Error == nil || r.Error.Kind != results.KindBanned {
			t.Errorf("line %d of the banning host: %+v, want banned", n, r.Error)
		}
	}
}

// TestRetryAfterHoldsTheHostForEveryProxy: a host that answers 503 with
// Retry-After through two proxies holds every proxy's next attempts to it
// until the time given, capped by --retry-after-max.
func TestRetryAfterHoldsTheHostForEveryProxy(t *testing.T) {
	for _, tc := range []struct {
		name       string
		retryAfter string
		max        time.Duration
		want       time.Duration
	}{
		{"Retry-After", "2", 5 * time.Minute, 2 * time.Second},
		{"capped", "30", time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := startTarget(t, fetchtest.TargetOptions{})
			cfg := fetch.DefaultConfig()
			for i := range 2 {
				px := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
				cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, nil))
			}
			cfg.Concurrency = 2
			cfg.ProxyConcurrency = 1
			cfg.Retries = 0
			cfg.PushbackDelay = 0 // only the host-wide hold
			cfg.RetryAfterMax = tc.max
			fail := "fail=1&failstatus=503&retry-after=" + tc.retryAfter
			// a and b go through the two proxies at once (each is in flight
			// for a second, so b starts before a is done, however loaded the
			// machine); b's answer comes 300ms after a's, the second
			// Retry-After. c, taken when a is done, starts before it; d,
			// taken when b is done, after it: d waits.
			recs, _ := run(t, cfg, tg.URL+"/a?delay=1s&"+fail, tg.URL+"/b?delay=1300ms&"+fail, tg.URL+"/c?delay=1s", tg.URL+"/d")
			if recs[1].Status != 503 || recs[2].Status != 503 || recs[1].Proxy == recs[2].Proxy {
				t.Fatalf("a: %d via %s, b: %d via %s; want 503 through both proxies", recs[1].Status, recs[1].Proxy, recs[2].Status, recs[2].Proxy)
			}
			if !recs[3].OK || !recs[4].OK {
				t.Fatalf("c %+v, d %+v", recs[3].Error, recs[4].Error)
			}
			if q, _ := recs[3].Phases.Get(results.PhaseQueue); q > 500 {
				t.Errorf("c waited %.0f ms: held by one proxy's Retry-After", q)
			}
			// The hold runs from b's answer; d asks just after it. Tolerance:
			// 100ms below (d asks after the answer is read), 3s above (a busy machine).
			ms, _ := recs[4].Phases.Get(results.PhaseQueue)
			q := time.Duration(ms * float64(time.Millisecond))
			if q < tc.want-100*time.Millisecond || q > tc.want+3*time.Second {
				t.Errorf("d waited %s for a proxy, want %s", q, tc.want)
			}
		})
	}
}

// TestDeadlineSaysWhatItWaitedFor: a URL whose total deadline runs out
// while it waits for a permit names the limit it waited for. (Every cause
// has its row in limits' TestWaitErrorSaysWhatItWaitedFor; here the rates,
// which hold the second URL whatever the timing.)
func TestDeadlineSaysWhatItWaitedFor(t *testing.T) {
	tg := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	perMinute := limits.Rate{N: 1, Per: time.Minute}
	for _, tc := range []struct {
		name string
		set  func(*fetch.Config)
		want string
	}{
		{"--host-rate", func(c *fetch.Config) { c.HostRate = perMinute }, "for the host's rate (" + tg.Addr + ")"},
		{"--rate", func(c *fetch.Config) { c.Rate = perMinute }, "for the global rate"},
		{"--proxy-rate", func(c *fetch.Config) { c.ProxyRate = perMinute }, "for a proxy's or pool's rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Proxies = append(cfg.Proxies, proxyOf(t, px.URL, nil))
			cfg.Concurrency = 1 // the second URL starts once the first is done
			cfg.Timeout = 300 * time.Millisecond
			tc.set(&cfg)
			recs, _ := run(t, cfg, tg.URL+"/a", tg.URL+"/b")
			if !recs[1].OK {
				t.Fatalf("the first URL: %+v", recs[1].Error)
			}
			e := recs[2].Error
			if e == nil || e.Kind != results.KindDeadline || e.Phase != results.PhaseQueue || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("the second URL: %+v, want a deadline in queue %q", e, tc.want)
			}
			t.Log(e.Message)
		})
	}
}
