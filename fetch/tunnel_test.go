package fetch_test

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// TestTargetCutShortInATunnel: through squid's CONNECT, an https target
// that closes after part of its head (at the end of a header line). That
// is the target's failure, seen inside the tunnel: each URL fails at once
// (kind reset, phase headers), and the proxy, which did its part, is
// never benched, so no URL waits behind it.
// Before, the failures counted against the proxy, benched it after
// --proxy-max-failures, and the run stalled on the one proxy (13 of 30
// records in 60 s).
func TestTargetCutShortInATunnel(t *testing.T) {
	sq, err := fetchtest.StartSquid(t.TempDir())
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs squid)", err)
	}
	t.Cleanup(sq.Close)
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(f.CertPEM)

	cfg := fetch.DefaultConfig()
	cfg.RootCAs = roots
	cfg.Proxies = []proxies.Proxy{proxyOf(t, sq.URL, nil)}
	cfg.Timeout = 20 * time.Second
	cfg.Retries = 0
	cfg.ProxyMaxFailures = 3
	const n = 30
	lines := make([]string, n)
	for i := range lines {
		lines[i] = f.TLSURL + "/cut?head=58"
	}
	start := time.Now()
	recs, rep := run(t, cfg, lines...)
	took := time.Since(start)
	if len(recs) != n {
		t.Fatalf("%d records of %d", len(recs), n)
	}
	for line, r := range recs {
		if r.OK || r.Error == nil || r.Error.Kind != results.KindReset {
			t.Errorf("line %d: %+v, want kind reset", line, r.Error)
		}
	}
	if took > 10*time.Second {
		t.Errorf("30 URLs took %s: they waited", took)
	}
	t.Logf("%d records in %s, by phase %v", len(recs), took.Round(time.Millisecond), rep.ByPhase)
}
