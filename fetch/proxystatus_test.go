package fetch_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// providerCase is a target a provider says it cannot serve, and the
// record fetch should make of it.
type providerCase struct {
	host        string // under .invalid: nothing but the provider answers for it
	answer      fetchtest.ProviderAnswer
	kind, phase string
	// proxyKind and proxyPhase, when set, are the record's through a
	// CONNECT, where they differ (an error fetch does not know).
	proxyKind, proxyPhase string
}

// providerCases are answers as providers give them: each of fetch's
// classes of Proxy-Status error, one fetch does not know, and squid's own
// header without Proxy-Status.
var providerCases = []providerCase{
	{host: "dns-timeout.invalid", answer: fetchtest.ProviderAnswer{Status: 504, Error: "dns_timeout", Details: "no answer from 10.0.0.53"},
		kind: results.KindDNS, phase: results.PhaseDNS},
	{host: "dns-error.invalid", answer: fetchtest.ProviderAnswer{Status: 502, Error: "dns_error"},
		kind: results.KindDNS, phase: results.PhaseDNS},
	{host: "refused.invalid", answer: fetchtest.ProviderAnswer{Status: 502, Error: "connection_refused"},
		kind: results.KindRefused, phase: results.PhaseConnect},
	{host: "connect-timeout.invalid", answer: fetchtest.ProviderAnswer{Status: 504, Error: "connection_timeout"},
		kind: results.KindTimeout, phase: results.PhaseConnect},
	{host: "unavailable.invalid", answer: fetchtest.ProviderAnswer{Status: 503, Error: "destination_unavailable"},
		kind: results.KindRefused, phase: results.PhaseConnect},
	{host: "cert.invalid", answer: fetchtest.ProviderAnswer{Status: 502, Error: "tls_certificate_error"},
		kind: results.KindTLS, phase: results.PhaseTLS},
	{host: "terminated.invalid", answer: fetchtest.ProviderAnswer{Status: 502, Error: "connection_terminated"},
		kind: results.KindReset, phase: results.PhaseHeaders},
	{host: "slow.invalid", answer: fetchtest.ProviderAnswer{Status: 504, Error: "http_response_timeout"},
		kind: results.KindTimeout, phase: results.PhaseHeaders},
	{host: "denied.invalid", answer: fetchtest.ProviderAnswer{Status: 403, Error: "http_request_denied"},
		kind: results.KindProxy, phase: results.PhaseProxy},
	{host: "unknown.invalid", answer: fetchtest.ProviderAnswer{Status: 502, Error: "quantum_flux"},
		kind: results.KindStatus, phase: results.PhaseHeaders, proxyKind: results.KindProxy, proxyPhase: results.PhaseProxy},
	{host: "squid.invalid", answer: fetchtest.ProviderAnswer{Status: 503, NoProxyStatus: true,
		Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}}},
		kind: results.KindRefused, phase: results.PhaseConnect},
}

// TestProviderProxyStatus: through a provider that answers for dead
// targets with Proxy-Status (RFC 9209), each record has the kind and phase
// of the target's failure and the provider's member in proxy_status, for
// plain http (the proxy's absolute-form answer) and https (its answer to
// CONNECT) targets, on both transports. The proxy did its job: after more
// than --proxy-max-failures such answers it is not benched, and the good
// URLs after them go through it. Nothing of its credentials shows, though
// the provider quotes them.
func TestProviderProxyStatus(t *testing.T) {
	const user, pass = "alice", "s3cr3t-pw"
	answers := map[string]fetchtest.ProviderAnswer{}
	for _, c := range providerCases {
		answers[c.host] = c.answer
	}
	answers["leaky.invalid"] = fetchtest.ProviderAnswer{Status: 502, Error: "dns_error",
		Details: fmt.Sprintf("lookup for http://%s:%s@gw failed; session %s", user, pass, pass)}
	p, err := fetchtest.StartProvider(fetchtest.ProviderOptions{Answers: answers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	pu, _ := url.Parse(p.URL)
	pu.User = url.UserPassword(user, pass)

	for _, tr := range []fetch.Transport{fetch.TransportFast, fetch.TransportStd} {
		for _, scheme := range []string{"http", "https"} {
			t.Run(tr.String()+"/"+scheme, func(t *testing.T) {
				cfg := fetch.DefaultConfig()
				cfg.Transport = tr
				cfg.Concurrency = 1 // the good URLs come after every failure
				cfg.Retries = 0
				cfg.ProxyMaxFailures = 2
				cfg.ProxyCooldown = time.Hour
				cfg.HostMaxFailures = 1 // one host per line: none is skipped
				cfg.Timeout = 10 * time.Second
				cfg.RootCAs = secure.CertPool
				cfg.Proxies = []proxies.Proxy{proxyOf(t, pu.String(), nil)}
				var lines []string
				for _, c := range providerCases {
					lines = append(lines, scheme+"://"+c.host+"/x")
				}
				lines = append(lines, scheme+"://leaky.invalid/x", plain.URL+"/ok?size=3", secure.URL+"/ok?size=4")
				recs, rep := run(t, cfg, lines...)
				for i, c := range providerCases {
					r := recs[i+1]
					kind, phase, status := c.kind, c.phase, c.answer.Status
					if scheme == "https" {
						status = 0 // the CONNECT failed: no response
						if c.proxyKind != "" {
							kind, phase = c.proxyKind, c.proxyPhase
						}
					}
					if r.OK || r.Error == nil || r.Error.Kind != kind || r.Error.Phase != phase || r.Status != status {
						t.Errorf("%s: ok %v status %d error %+v, want %s/%s status %d", c.host, r.OK, r.Status, r.Error, phase, kind, status)
						continue
					}
					var want *results.ProxyStatus
					if !c.answer.NoProxyStatus {
						want = &results.ProxyStatus{Proxy: "fetchtest", Error: c.answer.Error, Details: c.answer.Details}
					}
					if !sameProxyStatus(r.ProxyStatus, want) {
						t.Errorf("%s: proxy_status %+v, want %+v", c.host, r.ProxyStatus, want)
					}
				}
				leak := recs[len(providerCases)+1]
				if leak.ProxyStatus == nil || leak.Error == nil || leak.Error.Kind != results.KindDNS {
					t.Errorf("leaky.invalid: %+v %+v", leak.Error, leak.ProxyStatus)
				} else if s := leak.ProxyStatus.Details + leak.Error.Message; strings.Contains(s, pass) || !strings.Contains(s, "session ***") {
					t.Errorf("the provider's details were copied with the credentials: %q", s)
				}
				for _, line := range []int{len(lines) - 1, len(lines)} {
					r := recs[line]
					if !r.OK {
						t.Errorf("line %d after the dead targets: %+v", line, r.Error)
					}
					want := &results.ProxyStatus{Proxy: "fetchtest"}
					if line == len(lines) {
						want = nil // the target's answer in the tunnel: no word of the proxy's
					}
					if !sameProxyStatus(r.ProxyStatus, want) {
						t.Errorf("line %d: proxy_status %+v, want %+v", line, r.ProxyStatus, want)
					}
				}
				if h := rep.Proxies[cfg.Proxies[0].ID].Health; len(h) != 0 {
					t.Errorf("the proxy changed state %+v because targets were dead", h)
				}
			})
		}
	}
}

func sameProxyStatus(a, b *results.ProxyStatus) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}

// TestProviderOwnFailureBenches: a proxy that answers that it failed
// itself (proxy_internal_error) is benched after --proxy-max-failures such
// answers, as a proxy that drops connections is; a target it cannot reach
// is the target's, and counts towards --host-max-failures, where the
// proxy's own failures do not.
func TestProviderOwnFailureBenches(t *testing.T) {
	p, err := fetchtest.StartProvider(fetchtest.ProviderOptions{Answers: map[string]fetchtest.ProviderAnswer{
		"broken.invalid": {Status: 500, Error: "proxy_internal_error"},
		"dead.invalid":   {Status: 502, Error: "dns_error"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 1
			cfg.Retries = 0
			cfg.ProxyMaxFailures = 2
			cfg.ProxyCooldown = time.Millisecond // back soon: the run goes on
			cfg.HostMaxFailures = 2
			cfg.Timeout = 10 * time.Second
			cfg.Proxies = []proxies.Proxy{proxyOf(t, p.URL, nil)}
			var lines []string
			for i := range 3 {
				lines = append(lines, fmt.Sprintf("%s://dead.invalid/%d", scheme, i))
			}
			for i := range 3 {
				lines = append(lines, fmt.Sprintf("%s://broken.invalid/%d", scheme, i))
			}
			recs, rep := run(t, cfg, lines...)
			for line := 1; line <= 2; line++ {
				if e := recs[line].Error; e == nil || e.Kind != results.KindDNS {
					t.Errorf("line %d: %+v, want kind dns", line, e)
				}
			}
			if e := recs[3].Error; e == nil || e.Kind != results.KindSkipped {
				t.Errorf("line 3, the third to a host the provider could not reach: %+v, want skipped", e)
			}
			for line := 4; line <= 6; line++ {
				if e := recs[line].Error; e == nil || e.Kind != results.KindProxy || e.Phase != results.PhaseProxy {
					t.Errorf("line %d: %+v, want the proxy's failure", line, e)
				}
			}
			benched := false
			for _, h := range rep.Proxies[cfg.Proxies[0].ID].Health {
				benched = benched || h.State == "benched"
			}
			if !benched {
				t.Errorf("the proxy that failed 3 times itself was not benched: %+v", rep.Proxies[cfg.Proxies[0].ID].Health)
			}
		})
	}
}

// TestSquidTargetFailures: squid's own answers for a target that refuses
// connections and a name that does not resolve, which carry X-Squid-Error
// and no Proxy-Status (squid 5), are the target's failures, and squid,
// told so more than --proxy-max-failures times, stays in service.
func TestSquidTargetFailures(t *testing.T) {
	sq, err := fetchtest.StartSquid(t.TempDir())
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs squid)", err)
	}
	t.Cleanup(sq.Close)
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	cfg := fetch.DefaultConfig()
	cfg.Retries = 0
	cfg.ProxyMaxFailures = 1
	cfg.ProxyCooldown = time.Hour
	cfg.HostMaxFailures = 0
	cfg.Timeout = 20 * time.Second
	cfg.RootCAs = secure.CertPool
	cfg.Proxies = []proxies.Proxy{proxyOf(t, sq.URL, nil)}
	lines := []string{
		"http://127.0.0.1:1/refused", "https://127.0.0.1:1/refused",
		"http://nothing-here.invalid/", "https://nothing-here.invalid/",
		plain.URL + "/ok?size=3", secure.URL + "/ok?size=4",
	}
	recs, rep := run(t, cfg, lines...)
	for line, want := range map[int]string{1: results.KindRefused, 2: results.KindRefused, 3: results.KindDNS, 4: results.KindDNS} {
		e := recs[line].Error
		if e == nil {
			t.Errorf("line %d: no error", line)
			continue
		}
		// Squid 5 answers a plain request for a name that does not
		// resolve with ERR_READ_ERROR (it finds no path, then reports
		// that as a read error): the target's failure too.
		if line == 3 && e.Kind == results.KindReset && strings.Contains(e.Message, "ERR_READ_ERROR") {
			t.Logf("line 3: squid says %q", e.Message)
			continue
		}
		if e.Kind != want || !strings.Contains(e.Message, "X-Squid-Error") {
			t.Errorf("line %d: %+v, want kind %s from squid's answer", line, e, want)
		}
	}
	for line := 5; line <= 6; line++ {
		if !recs[line].OK {
			t.Errorf("line %d after the dead targets: %+v", line, recs[line].Error)
		}
	}
	if h := rep.Proxies[cfg.Proxies[0].ID].Health; len(h) != 0 {
		t.Errorf("squid changed state %+v because targets were dead", h)
	}
}
