package fetch_test

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// Limits for the fault tests. Every fault that a limit ends is a server
// that never answers (a connect never accepted, a handshake, a head or the
// rest of a body never sent), which a limit of any length ends in the same
// phase. So each row sets short only the one limit it tests, and every
// other limit long (faultLong): load cannot end a row's well-behaved
// steps (a loopback connect, a TLS handshake) before its fault. Under
// -race with both cores busy, a loopback TLS handshake took 75 ms at the
// median and up to 0.94 s, more than the 300 ms that every limit had.
const (
	// faultLimit is the connect, header or idle limit a row tests.
	faultLimit = 300 * time.Millisecond
	// faultTotal is the total deadline of the row that tests it: the
	// connect, TLS handshake and head before its body must fit in it.
	faultTotal = 3 * time.Second
	// faultLong is every connect, header and idle limit a row does not
	// test, far beyond what a loaded machine takes (see TestFaultMix).
	faultLong = 5 * time.Second
	// faultLongTotal is the total deadline of a row that does not test
	// it: two attempts that each run into faultLong and the back-off
	// between them, with a limit to spare, and far below the 30 s
	// Retry-After that must not fit.
	faultLongTotal = 3 * faultLong
	faultBackoff   = 10 * time.Millisecond // first back-off: full jitter, so at most this with --retries 1

	// faultTolerance is how far past its length a limit's own time (the
	// phases it bounds, in each attempt) may run, or a wait between
	// attempts: a timer's firing and the goroutines it wakes, under -race
	// on a shared 2-core machine with several rows at once. It is checked
	// on the limit's phases, not on the record's elapsed time, which also
	// holds the handshakes and heads before them. With both cores busy
	// (TestTargetFaults and TestProxyFaults -race -count=5 beside two busy
	// loops and other engineers' tests, load average 6 to 9), a 300 ms
	// limit's phases took up to 694 ms and a back-off of at most 10 ms up
	// to 285 ms. A limit that does not hold is told from one that does
	// all the same: the next limit that would end the attempt is
	// faultLong or the total deadline, 5 s and more.
	faultTolerance = time.Second
	// faultEarly is how much sooner than its limit a timeout may be
	// recorded: the record's clock and the timer's start a few
	// microseconds apart.
	faultEarly = 5 * time.Millisecond

	faultProxyConcurrency = 4  // per proxy (target faults), or per host (direct)
	faultRowsAtOnce       = 10 // rows in flight together
)

// The limit a row tests: what ends each of its attempts.
const (
	limitNone    = ""
	limitConnect = "connect" // --connect-timeout: from the dial to the connection (see limitPhases)
	limitHeaders = "headers" // --header-timeout: the headers phase
	limitIdle    = "idle"    // --idle-timeout: here, the body phase
	limitTotal   = "total"   // --timeout: the record's elapsed time
)

// Limits for TestFaultMix, which checks each line's phase and kind, not
// its time: every limit long. A well-behaved server's connect, handshake
// or head has to fit in its limit, and on a loaded machine 300 ms did
// not: under -race with both cores busy (TestFaultMix -count=5 beside two
// busy loops and other packages' tests), the mix's 64 lines at once took
// 200 ms for a TLS handshake at the median and up to 0.9 s, up to 1.3 s
// for a loopback connect, and 41 to 50 of 276 lines ran out of the
// connect timeout (in phase tls or connect) before their fault. The time
// is the CPU's: 64 handshakes at once, each side under -race. So the mix
// sets every limit far beyond what a loaded machine takes, and load
// cannot change a line's outcome; the check logs the slowest such phase
// it saw. TestTargetFaults and TestProxyFaults check the limits' lengths.
const (
	mixLimit = faultLong      // connect (with the TLS handshake), headers, idle
	mixTotal = faultLongTotal // see faultLongTotal
)

// transports are the clients every fault row runs on: records are the
// same on both (net/http is the fast path's reference).
var transports = []fetch.Transport{fetch.TransportFast, fetch.TransportStd}

// faultConfig is the configuration every fault row starts from: every
// limit long.
func faultConfig(roots *x509.CertPool) fetch.Config {
	cfg := fetch.DefaultConfig()
	cfg.ConnectTimeout = faultLong
	cfg.HeaderTimeout = faultLong
	cfg.IdleTimeout = faultLong
	cfg.Timeout = faultLongTotal
	cfg.Retries = 1
	cfg.RetryBackoff = faultBackoff
	cfg.MaxBody = 1000
	cfg.MaxRedirects = 3
	cfg.ProxyConcurrency = faultProxyConcurrency
	cfg.RootCAs = roots
	// Each fault is classified on its own: a host that fails every
	// attempt on purpose is not skipped here (see TestHostDown).
	cfg.HostMaxFailures = 0
	return cfg
}

// faultConfigFor is faultConfig with the limit a row tests made short.
func faultConfigFor(roots *x509.CertPool, limit string) fetch.Config {
	cfg := faultConfig(roots)
	switch limit {
	case limitConnect:
		cfg.ConnectTimeout = faultLimit
	case limitHeaders:
		cfg.HeaderTimeout = faultLimit
	case limitIdle:
		cfg.IdleTimeout = faultLimit
	case limitTotal:
		cfg.Timeout = faultTotal
	}
	return cfg
}

// expect is what one row's record must show.
type expect struct {
	ok          bool
	status      int // 0: any
	phase, kind string
	attempts    int
	// limit is the limit that ended each attempt (limitNone: none did):
	// the row sets it short, and each attempt's time in the phases it
	// bounds must be its length, within faultEarly and faultTolerance.
	limit string
	// wait is the Retry-After wait between attempts, when there is one;
	// else a back-off of at most faultBackoff.
	wait time.Duration
	// rejects: the proxy refuses its credentials. Its only attempt fails,
	// the pool of that one proxy cannot serve, and the run stops: the URL
	// is cancelled in the queue, to be taken again by a resumed run.
	rejects bool
	// says: the error's message holds this, when it is not "".
	says string
}

// rejected is what a proxy that refuses its credentials leaves: one
// attempt that failed in phase proxy, then the URL cancelled in the queue
// with the pool's cause, and the run stopped.
func rejected() expect {
	return expect{phase: "queue", kind: "cancelled", attempts: 1, rejects: true}
}

// fails is a failure after n attempts, each of which ran into limit
// (limitNone for a failure that comes at once).
func fails(phase, kind string, n int, limit string) expect {
	return expect{phase: phase, kind: kind, attempts: n, limit: limit}
}

func (e expect) status_(s int) expect { e.status = s; return e }

func (e expect) says_(s string) expect { e.says = s; return e }

func succeeds(status, attempts int) expect {
	return expect{ok: true, status: status, attempts: attempts}
}

// faultEnv is what the rows share: well-behaved targets that misbehave on
// request, the fault servers, and one working proxy of each kind.
type faultEnv struct {
	plain, secure *fetchtest.Target
	f             *fetchtest.Faults
	roots         *x509.CertPool
	httpProxy     *fetchtest.Proxy
	socksProxy    *fetchtest.Proxy
}

func startFaultEnv(t *testing.T) *faultEnv {
	t.Helper()
	env := &faultEnv{
		plain:  startTarget(t, fetchtest.TargetOptions{}),
		secure: startTarget(t, fetchtest.TargetOptions{TLS: true}),
	}
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	env.f = f
	env.roots = x509.NewCertPool()
	env.roots.AppendCertsFromPEM(env.secure.CertPEM)
	env.roots.AppendCertsFromPEM(f.CertPEM)
	env.httpProxy = startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(200)})
	p, err := fetchtest.StartSOCKS5(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(201)})
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs microsocks)", err)
	}
	t.Cleanup(p.Close)
	env.socksProxy = p
	if !f.BlackholeHangs {
		t.Fatal("a connect to a full accept queue does not hang here: the connect-timeout rows cannot be run")
	}
	return env
}

// base is the well-behaved target for scheme.
func (env *faultEnv) base(scheme string) string {
	if scheme == "https" {
		return env.secure.URL
	}
	return env.plain.URL
}

// targetFault is a fault of the target, reached directly or through a
// working proxy.
type targetFault struct {
	name string
	// url returns the URL to fetch over scheme, "" when the fault does not
	// exist over it; path is unique to the row.
	url func(env *faultEnv, scheme, path string) string
	// want is the record expected over route ("direct", "http", "socks5").
	want func(route, scheme string) expect
}

func same(e expect) func(string, string) expect { return func(string, string) expect { return e } }

func targetFaults(env *faultEnv) []targetFault {
	retryAfterURL := func(status int, ra string) func(*faultEnv, string, string) string {
		return func(env *faultEnv, scheme, path string) string {
			return fmt.Sprintf("%s%s?fail=99&failstatus=%d&retry-after=%s", env.base(scheme), path, status, url.QueryEscape(ra))
		}
	}
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	future := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
	return []targetFault{
		{
			name: "connect hangs",
			url:  func(env *faultEnv, scheme, _ string) string { return scheme + "://" + env.f.Blackhole + "/x" },
			want: func(route, scheme string) expect {
				switch {
				case route == "direct":
					return fails("connect", "timeout", 2, limitConnect)
				case route == "http" && scheme == "http":
					// The request went to the proxy, which hangs dialing:
					// the client waits for headers.
					return fails("headers", "timeout", 2, limitHeaders)
				}
				// CONNECT or SOCKS connect unanswered.
				return fails("proxy", "timeout", 2, limitConnect)
			},
		},
		{
			name: "connect refused",
			url:  func(env *faultEnv, scheme, _ string) string { return scheme + "://" + env.f.Refused + "/x" },
			want: func(route, scheme string) expect {
				switch {
				case route == "direct":
					return fails("connect", "refused", 2, limitNone)
				case route == "http" && scheme == "http":
					// The proxy answers 502 Bad Gateway, a retried status.
					return fails("headers", "status", 2, limitNone).status_(502)
				}
				// CONNECT answered 502, or the SOCKS reply says refused.
				return fails("proxy", "proxy", 2, limitNone)
			},
		},
		{
			name: "silent server",
			url:  func(env *faultEnv, scheme, _ string) string { return scheme + "://" + env.f.Silent + "/x" },
			want: func(_, scheme string) expect {
				if scheme == "https" {
					return fails("tls", "timeout", 2, limitConnect) // TLS handshake never finishes
				}
				return fails("headers", "timeout", 2, limitHeaders)
			},
		},
		{
			name: "bad certificate",
			url: func(env *faultEnv, scheme, _ string) string {
				if scheme != "https" {
					return ""
				}
				return env.f.BadCertURL + "/x"
			},
			want: same(fails("tls", "tls", 2, limitNone)),
		},
		{
			name: "headers never come",
			url:  func(env *faultEnv, scheme, path string) string { return env.base(scheme) + path + "?hang=1" },
			want: same(fails("headers", "timeout", 2, limitHeaders)),
		},
		{
			name: "body stalls",
			url: func(env *faultEnv, scheme, path string) string {
				return env.base(scheme) + path + "?size=100&chunks=2&drip=1h"
			},
			want: same(fails("body", "timeout", 2, limitIdle)),
		},
		{
			name: "body drips forever",
			// One byte every 100 ms, far within the idle limit: never
			// idle, so only the total deadline ends it, on the first
			// attempt.
			url: func(env *faultEnv, scheme, path string) string {
				return env.base(scheme) + path + "?size=1000000&chunks=1000000&drip=100ms"
			},
			want: same(fails("body", "deadline", 1, limitTotal)),
		},
		{
			// Headers with a Content-Length and part of the body come at
			// once: the wait for the rest is the body phase's, bounded by
			// the idle limit, whoever reads the head.
			name: "body with its length stalls",
			url: func(env *faultEnv, scheme, _ string) string {
				if scheme == "https" {
					return env.f.TLSURL + "/stall?size=800"
				}
				return env.f.URL + "/stall?size=800"
			},
			want: same(fails("body", "timeout", 2, limitIdle).says_("--idle-timeout")),
		},
		{
			// Part of a head, up to the end of a header line, then a close
			// right behind it: the client sees the close at once, whoever
			// reads the head. Through the test's http proxy, the proxy
			// answers 502 for it.
			name: "head cut short",
			url: func(env *faultEnv, scheme, _ string) string {
				if scheme == "https" {
					return env.f.TLSURL + "/cut?head=58"
				}
				return env.f.URL + "/cut?head=58"
			},
			want: func(route, scheme string) expect {
				if route == "http" && scheme == "http" {
					return fails("headers", "status", 2, limitNone).status_(502)
				}
				return fails("headers", "reset", 2, limitNone)
			},
		},
		{
			// Cut in the middle of a header line: net/http reads the
			// piece as a malformed header line (kind other), and so does
			// the fast path, with the same words.
			name: "head cut mid-line",
			url: func(env *faultEnv, scheme, _ string) string {
				if scheme == "https" {
					return env.f.TLSURL + "/cut?head=20"
				}
				return env.f.URL + "/cut?head=20"
			},
			want: func(route, scheme string) expect {
				if route == "http" && scheme == "http" {
					return fails("headers", "status", 2, limitNone).status_(502)
				}
				return fails("headers", "other", 2, limitNone).says_("malformed MIME header")
			},
		},
		{
			name: "reset mid-body",
			url: func(env *faultEnv, scheme, _ string) string {
				if scheme == "https" {
					return env.f.TLSURL + "/reset?size=800"
				}
				return env.f.URL + "/reset?size=800"
			},
			want: same(fails("body", "reset", 2, limitNone)),
		},
		{
			name: "503",
			url:  func(env *faultEnv, scheme, path string) string { return env.base(scheme) + path + "?status=503" },
			want: same(fails("headers", "status", 2, limitNone).status_(503)),
		},
		{
			name: "429 Retry-After 1 (fits)",
			url:  retryAfterURL(429, "1"),
			want: same(func() expect {
				e := fails("headers", "status", 2, limitNone).status_(429)
				e.wait = time.Second
				return e
			}()),
		},
		{
			name: "503 Retry-After 30 (does not fit)",
			url:  retryAfterURL(503, "30"),
			want: same(fails("headers", "status", 1, limitNone).status_(503).says_("; not retried: its Retry-After of 30s does not fit in the ")),
		},
		{
			name: "503 Retry-After date past",
			url:  retryAfterURL(503, past),
			want: same(fails("headers", "status", 2, limitNone).status_(503)),
		},
		{
			name: "429 Retry-After date in an hour",
			url:  retryAfterURL(429, future),
			want: same(fails("headers", "status", 1, limitNone).status_(429).says_("; not retried: its Retry-After of ")),
		},
		{
			name: "429 once then ok",
			url: func(env *faultEnv, scheme, path string) string {
				return env.base(scheme) + path + "?fail=1&failstatus=429&size=10"
			},
			want: same(succeeds(200, 2)),
		},
		{
			name: "body over --max-body",
			url:  func(env *faultEnv, scheme, path string) string { return env.base(scheme) + path + "?size=5000" },
			want: same(fails("body", "too_large", 1, limitNone)),
		},
		{
			name: "chunked body over --max-body",
			url: func(env *faultEnv, scheme, path string) string {
				return env.base(scheme) + path + "?size=5000&chunks=5"
			},
			want: same(fails("body", "too_large", 1, limitNone)),
		},
		{
			name: "redirect loop",
			url:  func(env *faultEnv, scheme, _ string) string { return env.base(scheme) + "/loop" },
			want: same(fails("headers", "redirect", 1, limitNone)),
		},
		{
			name: "redirect to another scheme",
			url: func(env *faultEnv, scheme, _ string) string {
				return env.base(scheme) + "/redirect?to=" + url.QueryEscape("ftp://127.0.0.1/x")
			},
			want: same(fails("headers", "redirect", 1, limitNone)),
		},
		{
			name: "redirect to another host and scheme",
			url: func(env *faultEnv, scheme, path string) string {
				other := env.base("https")
				if scheme == "https" {
					other = env.base("http")
				}
				return env.base(scheme) + "/redirect?to=" + url.QueryEscape(other+path+"?size=10")
			},
			want: same(succeeds(200, 1)),
		},
	}
}

// proxyFault is a fault of the proxy itself.
type proxyFault struct {
	name string
	// proxy returns the proxy URL (with any credentials) and the pool that
	// trusts it; "" to skip.
	proxy func(t *testing.T, env *faultEnv) (string, *x509.CertPool)
	want  func(scheme string) expect
}

func proxyFaults() []proxyFault {
	plainProxy := func(scheme string, addr func(*faultEnv) string) func(*testing.T, *faultEnv) (string, *x509.CertPool) {
		return func(t *testing.T, env *faultEnv) (string, *x509.CertPool) {
			return scheme + "://" + addr(env), nil
		}
	}
	authProxy := func(user, pass string) func(*testing.T, *faultEnv) (string, *x509.CertPool) {
		return func(t *testing.T, env *faultEnv) (string, *x509.CertPool) {
			px := startProxy(t, "http", fetchtest.ProxyOptions{User: "alice", Password: "right-pw"})
			u, _ := url.Parse(px.URL)
			if user != "" {
				u.User = url.UserPassword(user, pass)
			}
			return u.String(), nil
		}
	}
	return []proxyFault{
		{
			name:  "http proxy refused",
			proxy: plainProxy("http", func(env *faultEnv) string { return env.f.Refused }),
			want:  func(string) expect { return fails("connect", "refused", 2, limitNone) },
		},
		{
			name:  "socks5 proxy refused",
			proxy: plainProxy("socks5", func(env *faultEnv) string { return env.f.Refused }),
			want:  func(string) expect { return fails("connect", "refused", 2, limitNone) },
		},
		{
			name:  "http proxy never answers",
			proxy: plainProxy("http", func(env *faultEnv) string { return env.f.Silent }),
			want: func(scheme string) expect {
				if scheme == "http" {
					return fails("headers", "timeout", 2, limitHeaders)
				}
				return fails("proxy", "timeout", 2, limitConnect)
			},
		},
		{
			name: "socks5 proxy never answers",
			proxy: func(t *testing.T, env *faultEnv) (string, *x509.CertPool) {
				return "socks5://" + env.f.Silent, nil
			},
			want: func(string) expect { return fails("proxy", "timeout", 2, limitConnect) },
		},
		{
			name:  "407 without credentials",
			proxy: authProxy("", ""),
			want:  func(string) expect { return rejected() },
		},
		{
			name:  "407 wrong password",
			proxy: authProxy("alice", "wrong-pw"),
			want:  func(string) expect { return rejected() },
		},
		{
			name:  "403",
			proxy: plainProxy("http", func(env *faultEnv) string { return env.f.Proxy403 }),
			want: func(scheme string) expect {
				if scheme == "http" {
					// An absolute-form request answered 403 cannot be told
					// from the target's own 403: a response, ok:true, as
					// curl reports it.
					return succeeds(403, 1)
				}
				return fails("proxy", "proxy", 2, limitNone)
			},
		},
		{
			name:  "closes after CONNECT",
			proxy: plainProxy("http", func(env *faultEnv) string { return env.f.ProxyClose }),
			want: func(scheme string) expect {
				if scheme == "http" {
					// No CONNECT for http: the proxy closes without an answer.
					return fails("headers", "reset", 2, limitNone)
				}
				// The tunnel closes in the TLS handshake with the target.
				return fails("tls", "tls", 2, limitNone)
			},
		},
		{
			name: "socks5 wrong password",
			proxy: func(t *testing.T, env *faultEnv) (string, *x509.CertPool) {
				px := startProxy(t, "socks5", fetchtest.ProxyOptions{User: "alice", Password: "right-pw"})
				return strings.Replace(px.URL, "socks5://", "socks5://alice:wrong-pw@", 1), nil
			},
			want: func(string) expect { return rejected() },
		},
		{
			name: "https proxy untrusted certificate",
			proxy: func(t *testing.T, env *faultEnv) (string, *x509.CertPool) {
				px := startProxy(t, "http", fetchtest.ProxyOptions{TLS: true})
				return px.URL, nil
			},
			want: func(string) expect { return fails("proxy", "tls", 2, limitNone) },
		},
	}
}

// checkRecord compares r with want.
func checkRecord(t *testing.T, r *results.Record, want expect) {
	t.Helper()
	if r == nil {
		t.Fatal("no record")
	}
	got := func() string {
		return fmt.Sprintf("ok=%v status=%d attempts=%d elapsed=%.0fms error=%+v", r.OK, r.Status, r.Attempts, r.ElapsedMS, r.Error)
	}
	if r.OK != want.ok || want.status != 0 && r.Status != want.status || r.Attempts != want.attempts {
		t.Errorf("got %s; want ok=%v status=%d attempts=%d", got(), want.ok, want.status, want.attempts)
	}
	if want.ok {
		if r.Error != nil {
			t.Errorf("got %s; want no error", got())
		}
	} else if r.Error == nil || r.Error.Phase != want.phase || r.Error.Kind != want.kind {
		t.Errorf("got %s; want %s/%s", got(), want.phase, want.kind)
	}
	if want.says != "" && (r.Error == nil || !strings.Contains(r.Error.Message, want.says)) {
		t.Errorf("got %s; want a message that says %q", got(), want.says)
	}
	checkTimes(t, r, want)
	// A URL that ends waiting in the queue after an attempt has that
	// attempt among its tries: its final "attempt" never started.
	if wantTries := r.Attempts - 1; want.phase == "queue" && !want.ok && len(r.Tries) != r.Attempts || want.phase != "queue" && len(r.Tries) != wantTries {
		t.Errorf("%d tries for %d attempts", len(r.Tries), r.Attempts)
	}
	if want.rejects {
		if len(r.Tries) != 1 || r.Tries[0].Error == nil || r.Tries[0].Error.Phase != "proxy" || r.Tries[0].Error.Kind != "proxy" {
			t.Errorf("tries %+v: want the one attempt failed proxy/proxy", r.Tries)
		}
		if !strings.HasPrefix(r.Error.Message, "no usable proxy: 1 of 1 rejected; last failure: ") {
			t.Errorf("message %q does not name the cause", r.Error.Message)
		}
	}
	t.Log(got())
}

// limitPhases are the phases each limit bounds in an attempt that ran
// into it: from the start of the wait for a connection, --connect-timeout
// bounds the dial, the proxy's handshake and the TLS handshake; --header-timeout the wait
// for the head once the request is written; --idle-timeout, in the rows
// that test it, the body, which starts at once and then stalls.
var limitPhases = map[string][]string{
	// Until it has its connection, an attempt is in phase request between
	// its dial and its TLS handshake (net/http, directly).
	limitConnect: {"dns", "connect", "proxy", "tls", "request"},
	limitHeaders: {"headers"},
	limitIdle:    {"body"},
}

// spent is the time p shows in phases.
func spent(p results.PhaseTimes, phases ...string) time.Duration {
	var ms float64
	for _, ph := range phases {
		v, _ := p.Get(ph)
		ms += v
	}
	return time.Duration(ms * float64(time.Millisecond))
}

// within reports whether d is length, at most faultEarly sooner and
// faultTolerance later.
func within(d, length time.Duration) bool {
	return d >= length-faultEarly && d <= length+faultTolerance
}

// checkTimes checks the limit want tests on its own time, in each attempt
// (every attempt must have ended on it), or on the elapsed time for the
// total deadline; and the wait between attempts.
func checkTimes(t *testing.T, r *results.Record, want expect) {
	t.Helper()
	type attempt struct {
		phases results.PhaseTimes
		err    *results.Error
	}
	var atts []attempt
	var tried time.Duration // the earlier attempts' time
	for _, tr := range r.Tries {
		atts = append(atts, attempt{tr.Phases, tr.Error})
		tried += time.Duration(tr.ElapsedMS * float64(time.Millisecond))
	}
	atts = append(atts, attempt{r.Phases, r.Error})
	el := time.Duration(r.ElapsedMS * float64(time.Millisecond))
	switch want.limit {
	case limitNone:
	case limitTotal:
		t.Logf("total deadline: elapsed %s", el.Round(time.Millisecond))
		if !within(el, faultTotal) {
			t.Errorf("elapsed %s, want the total deadline %s (-%s +%s)", el.Round(time.Millisecond), faultTotal, faultEarly, faultTolerance)
		}
	default:
		for i, a := range atts {
			if a.err == nil || a.err.Phase != want.phase || a.err.Kind != want.kind {
				t.Errorf("attempt %d ended %+v, want %s/%s", i+1, a.err, want.phase, want.kind)
			}
			d := spent(a.phases, limitPhases[want.limit]...)
			t.Logf("attempt %d: %s limit's phases %s", i+1, want.limit, d.Round(time.Millisecond))
			if !within(d, faultLimit) {
				t.Errorf("attempt %d spent %s in %v (phases %v), want the %s limit %s (-%s +%s)",
					i+1, d.Round(time.Millisecond), limitPhases[want.limit], a.phases, want.limit, faultLimit, faultEarly, faultTolerance)
			}
		}
	}
	// The wait between attempts: the record's time that no attempt spent.
	// A URL that ends waiting in the queue has no final attempt to count.
	if len(r.Tries) == 0 || want.rejects {
		return
	}
	wait := el - tried - spent(r.Phases, results.Phases...)
	t.Logf("waited %s between attempts", wait.Round(time.Millisecond))
	if want.wait > 0 && !within(wait, want.wait) || want.wait == 0 && wait > faultBackoff+faultTolerance {
		t.Errorf("waited %s between attempts, want %s (-%s +%s)", wait.Round(time.Millisecond), max(want.wait, faultBackoff), faultEarly, faultTolerance)
	}
}

// parallelRows runs each row as a subtest, faultRowsAtOnce at a time. The
// rows spend their time waiting on timers, so they are run together
// whatever -parallel says.
func parallelRows(t *testing.T, names []string, row func(t *testing.T, i int)) {
	sem := make(chan struct{}, faultRowsAtOnce)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			t.Run(name, func(t *testing.T) { row(t, i) })
		}()
	}
	wg.Wait()
}

// TestTargetFaults runs every target fault directly, through an HTTP proxy
// and through SOCKS5, over http and https, and checks phase, kind, attempts
// and time. After each row the same engine fetches slow pages through the
// same route, and the target must see the full per-proxy (direct: per-host)
// concurrency: no permit leaked.
func TestTargetFaults(t *testing.T) {
	env := startFaultEnv(t)
	type row struct {
		name, route, scheme string
		transport           fetch.Transport
		fault               targetFault
	}
	var rows []row
	var names []string
	for _, tp := range transports {
		for _, f := range targetFaults(env) {
			for _, route := range []string{"direct", "http", "socks5"} {
				for _, scheme := range []string{"http", "https"} {
					if f.url(env, scheme, "/") == "" {
						continue // this fault has no form over this scheme
					}
					rows = append(rows, row{tp.String() + "/" + f.name + "/" + route + "/" + scheme, route, scheme, tp, f})
					names = append(names, rows[len(rows)-1].name)
				}
			}
		}
	}
	parallelRows(t, names, func(t *testing.T, i int) {
		rw := rows[i]
		path := "/" + strings.NewReplacer(" ", "-", "/", "-", "(", "", ")", "").Replace(rw.name)
		u := rw.fault.url(env, rw.scheme, path)
		want := rw.fault.want(rw.route, rw.scheme)
		cfg := faultConfigFor(env.roots, want.limit)
		cfg.Transport = rw.transport
		switch rw.route {
		case "direct":
			cfg.HostConcurrency = faultProxyConcurrency
		case "http":
			cfg.Proxies = []proxies.Proxy{proxyOf(t, env.httpProxy.URL, nil)}
		case "socks5":
			cfg.Proxies = []proxies.Proxy{proxyOf(t, env.socksProxy.URL, nil)}
		}
		// The row's two failed attempts, and a page of checkWhole's that
		// ran out of the row's short limit on a loaded machine, must not
		// bench the proxy (seen: 5 in a row, and checkWhole's pages
		// waited out their deadline in the queue).
		cfg.ProxyMaxFailures = 0
		e, err := fetch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		recs, rep := runEngine(t, e, u)
		checkRecord(t, recs[1], want)
		if rep.Jobs != 1 {
			t.Errorf("report counts %d jobs", rep.Jobs)
		}
		checkWhole(t, e, rw.route, want.limit)
	})
}

// checkWhole fetches pages from a fresh plain-http target through e and
// checks that the target saw faultProxyConcurrency of them at once. The
// target holds each page until that many wait (hold=N), so that they
// overlap however busy the machine is; where it holds them is bounded by a
// limit other than the one the row made short (limit).
func checkWhole(t *testing.T, e *fetch.Engine, route, limit string) {
	t.Helper()
	tg := startTarget(t, fetchtest.TargetOptions{})
	hold := fmt.Sprintf("hold=%d", faultProxyConcurrency) // before the head: --header-timeout
	if limit == limitHeaders {
		hold += "&holdat=body" // --idle-timeout
	}
	var lines []string
	for i := range 2 * faultProxyConcurrency {
		lines = append(lines, fmt.Sprintf("%s/whole/%d?size=100&chunks=2&%s", tg.URL, i, hold))
	}
	recs, _ := runEngine(t, e, lines...)
	var slowest [3]time.Duration // by limitPhases: what the row's short limit bounds
	retried := 0
	for line, r := range recs {
		if !r.OK {
			t.Errorf("after the fault, line %d via %s: %+v", line, route, r.Error)
		}
		if r.Attempts > 1 {
			retried++
		}
		for i, l := range []string{limitConnect, limitHeaders, limitIdle} {
			slowest[i] = max(slowest[i], spent(r.Phases, limitPhases[l]...))
		}
	}
	// The row's short limit bounds a step of these pages too (a connect, a
	// head, a gap in a body): on a loaded machine one may run out of it,
	// and its retry then fetches the page.
	t.Logf("after the fault, %d of %d pages retried; slowest dns to request written %s, headers %s, body %s",
		retried, len(lines), slowest[0].Round(time.Millisecond), slowest[1].Round(time.Millisecond), slowest[2].Round(time.Millisecond))
	if got := tg.MaxInFlight(); got != faultProxyConcurrency {
		t.Errorf("after the fault, %s reached %d in flight, want %d: limits not whole", route, got, faultProxyConcurrency)
	}
}

// TestProxyFaults runs every fault of a proxy with http and https targets.
// Each engine allows one attempt at a time through its proxy, and runs the
// fault again afterwards: a permit lost by the first run would leave the
// second waiting in the queue until its deadline.
func TestProxyFaults(t *testing.T) {
	env := startFaultEnv(t)
	type row struct {
		name, scheme string
		transport    fetch.Transport
		fault        proxyFault
	}
	var rows []row
	var names []string
	for _, tp := range transports {
		for _, f := range proxyFaults() {
			for _, scheme := range []string{"http", "https"} {
				rows = append(rows, row{tp.String() + "/" + f.name + "/" + scheme, scheme, tp, f})
				names = append(names, rows[len(rows)-1].name)
			}
		}
	}
	parallelRows(t, names, func(t *testing.T, i int) {
		rw := rows[i]
		pu, pool := rw.fault.proxy(t, env)
		want := rw.fault.want(rw.scheme)
		cfg := faultConfigFor(env.roots, want.limit)
		cfg.Transport = rw.transport
		if pool != nil {
			cfg.RootCAs = pool
		}
		cfg.ProxyConcurrency = 1
		cfg.Proxies = []proxies.Proxy{proxyOf(t, pu, nil)}
		e, err := fetch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		u := env.base(rw.scheme) + "/p?size=10"
		if want.rejects {
			recs, err := runEngineErr(t, e, u)
			if !errors.Is(err, limits.ErrNoUsableProxy) {
				t.Fatalf("run: %v, want ErrNoUsableProxy", err)
			}
			checkRecord(t, recs[1], want)
			// The proxy stays rejected: the next run stops before any
			// attempt.
			recs, err = runEngineErr(t, e, u)
			if r := recs[1]; !errors.Is(err, limits.ErrNoUsableProxy) || r == nil || r.Attempts != 0 || r.Error == nil || r.Error.Kind != "cancelled" {
				t.Errorf("again: %v, record %+v", err, r)
			}
			return
		}
		recs, _ := runEngine(t, e, u)
		checkRecord(t, recs[1], want)
		recs, _ = runEngine(t, e, u)
		t.Run("again", func(t *testing.T) { checkRecord(t, recs[1], want) })
	})
}

// TestFaultMix runs 300 lines mixing every fault, invalid lines, blanks and
// comments at -c 64, directly and through a mix of good and broken proxies,
// and checks that every line taken gets exactly one record and that the
// report's counts are the records' counts.
func TestFaultMix(t *testing.T) {
	env := startFaultEnv(t)
	// 429 and 503 make the scheduler space out attempts to their host:
	// they get a host of their own, so as not to slow the other lines.
	pushy := startTarget(t, fetchtest.TargetOptions{})
	faults := targetFaults(env)
	type planned struct {
		fault  string
		phase  string // "": ok
		kind   string
		pushed bool // on the host that pushes back: may also end queued
	}
	const n = 300
	var lines []string
	plan := map[int]planned{}
	for i := 0; len(lines) < n; i++ {
		switch i % 25 {
		case 5:
			lines = append(lines, "")
			continue
		case 11:
			lines = append(lines, "# comment "+fmt.Sprint(i))
			continue
		case 17:
			lines = append(lines, fmt.Sprintf("ftp://127.0.0.1/%d", i))
			plan[len(lines)] = planned{fault: "invalid", phase: "input", kind: "invalid"}
			continue
		}
		f := faults[i%len(faults)]
		scheme := []string{"http", "https"}[(i/len(faults))%2]
		u := f.url(env, scheme, fmt.Sprintf("/mix/%d", i))
		if u == "" {
			scheme = "https"
			u = f.url(env, scheme, fmt.Sprintf("/mix/%d", i))
		}
		if f.name == "connect hangs" && !env.f.BlackholeHangs {
			continue
		}
		want := f.want("direct", scheme)
		p := planned{fault: f.name + "/" + scheme}
		if !want.ok {
			p.phase, p.kind = want.phase, want.kind
		}
		if want.status == 429 || want.status == 503 || strings.Contains(f.name, "429") {
			u = strings.Replace(u, env.base(scheme), pushy.URL, 1)
			p.pushed = true
		}
		lines = append(lines, u)
		plan[len(lines)] = p
	}

	config := func() fetch.Config {
		cfg := faultConfig(env.roots) // every limit mixLimit, the total mixTotal
		cfg.Concurrency = 64
		return cfg
	}
	check := func(t *testing.T, e *fetch.Engine, strict bool) {
		start := time.Now()
		recs, rep := runEngine(t, e, lines...)
		t.Logf("%d lines, %d records in %s", len(lines), len(recs), time.Since(start).Round(time.Millisecond))
		if len(recs) != len(plan) {
			t.Errorf("%d records, want %d (one per line taken)", len(recs), len(plan))
		}
		ok, failed := 0, 0
		byKind, byPhase := map[string]int{}, map[string]int{}
		slowest := map[string]float64{} // ms, by phase
		for line, r := range recs {
			p, taken := plan[line]
			if !taken {
				t.Errorf("record for line %d, which is blank or a comment", line)
				continue
			}
			for phase, ms := range r.Phases.All() {
				if phase != "queue" && (r.Error == nil || r.Error.Phase != phase) {
					slowest[phase] = max(slowest[phase], ms)
				}
			}
			if r.OK {
				ok++
			} else {
				failed++
				if r.Error == nil {
					t.Errorf("line %d: failed without an error", line)
					continue
				}
				byKind[r.Error.Kind]++
				byPhase[r.Error.Phase]++
			}
			if !strict {
				continue
			}
			gotPhase, gotKind := "", ""
			if r.Error != nil {
				gotPhase, gotKind = r.Error.Phase, r.Error.Kind
			}
			// A line on the host that pushes back may wait out its deadline
			// in the queue, or get its turn with too little time left: to
			// finish, or, after a 429 or 503, to wait before its retry
			// (on a loaded machine; seen under -race with two packages'
			// tests at once), which its message then says.
			late := gotKind == "deadline" ||
				gotKind == "status" && strings.Contains(r.Error.Message, "; not retried: ") && r.Attempts == 1
			if (gotPhase != p.phase || gotKind != p.kind) && !(p.pushed && late) {
				t.Errorf("line %d (%s): %s/%s, want %s/%s", line, p.fault, gotPhase, gotKind, p.phase, p.kind)
			}
		}
		t.Logf("slowest connect %.0f ms, tls %.0f ms, headers %.0f ms of a final attempt that got past it (limit %v)",
			slowest["connect"], slowest["tls"], slowest["headers"], mixLimit)
		if rep.Jobs != len(recs) || rep.OK != ok || rep.Failed != failed {
			t.Errorf("report jobs=%d ok=%d failed=%d; records %d, ok %d, failed %d", rep.Jobs, rep.OK, rep.Failed, len(recs), ok, failed)
		}
		if !maps.Equal(rep.ByKind, byKind) {
			t.Errorf("report by_kind %v; records %v", rep.ByKind, byKind)
		}
		if !maps.Equal(rep.ByPhase, byPhase) {
			t.Errorf("report by_phase %v; records %v", rep.ByPhase, byPhase)
		}
		if st := e.Stats(); st.InFlight != 0 || st.Done != int64(len(recs)) {
			t.Errorf("engine stats after the run: %+v", st)
		}
	}

	t.Run("direct", func(t *testing.T) {
		e, err := fetch.New(config())
		if err != nil {
			t.Fatal(err)
		}
		check(t, e, true)
	})
	t.Run("proxies", func(t *testing.T) {
		cfg := config()
		cfg.ProxyConcurrency = 16
		good := []string{env.httpProxy.URL, env.socksProxy.URL}
		auth := startProxy(t, "http", fetchtest.ProxyOptions{User: "alice", Password: "right-pw"})
		bad := []string{"http://" + env.f.Refused, "http://" + env.f.Silent, "http://" + env.f.Proxy403,
			"http://" + env.f.ProxyClose, strings.Replace(auth.URL, "://", "://alice:wrong-pw@", 1)}
		for _, u := range append(good, bad...) {
			cfg.Proxies = append(cfg.Proxies, proxyOf(t, u, nil))
		}
		e, err := fetch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		check(t, e, false)
	})
}
