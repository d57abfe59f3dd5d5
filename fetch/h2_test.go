package fetch_test

import (
	"fmt"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/proxies"
)

// TestHTTP2ProxyConcurrency: with --proxy-concurrency 2, an HTTP/2 target
// reached through two proxies never has more than 2 requests in flight on
// one connection, nor more than 4 in all, though each proxy's tunnel could
// carry many streams; and each record's remote_addr is its own proxy's:
// no request rides another route's tunnel.
func TestHTTP2ProxyConcurrency(t *testing.T) {
	cert, pool := factsCert(t)
	for _, tr := range []fetch.Transport{fetch.TransportFast, fetch.TransportStd} {
		t.Run(tr.String(), func(t *testing.T) {
			s := &streams{hold: 4}
			srv := startTLSTarget(t, cert, true, s)
			a := startProxy(t, "http", fetchtest.ProxyOptions{})
			b := startProxy(t, "http", fetchtest.ProxyOptions{})
			cfg := fetch.DefaultConfig()
			cfg.RootCAs, cfg.Transport = pool, tr
			cfg.Concurrency, cfg.ProxyConcurrency = 16, 2
			cfg.Proxies = []proxies.Proxy{proxyOf(t, a.URL, nil), proxyOf(t, b.URL, nil)}
			const n = 40
			lines := make([]string, n)
			for i := range lines {
				lines[i] = fmt.Sprintf("%s/%d", srv.URL, i)
			}
			recs, rep := run(t, cfg, lines...)
			addr := map[string]string{}
			for _, p := range cfg.Proxies {
				addr[p.ID] = p.Host
			}
			for line, r := range recs {
				if !r.OK || r.Proto != "HTTP/2.0" {
					t.Fatalf("line %d: proto %q, %+v", line, r.Proto, r.Error)
				}
				if r.RemoteAddr != addr[r.Proxy] {
					t.Errorf("line %d through %s: remote_addr %s", line, r.Proxy, r.RemoteAddr)
				}
			}
			s.mu.Lock()
			most, mostOne := s.most, s.mostOne
			s.mu.Unlock()
			if mostOne > 2 || most > 4 {
				t.Errorf("most in flight at the target: %d on one connection, %d in all; want 2 and 4", mostOne, most)
			}
			for id, p := range rep.Proxies {
				if p.MaxInFlight > 2 {
					t.Errorf("proxy %s: %d in flight", id, p.MaxInFlight)
				}
			}
			if a.Stats().Connects == 0 || b.Stats().Connects == 0 {
				t.Errorf("tunnels: %d through a, %d through b", a.Stats().Connects, b.Stats().Connects)
			}
			t.Logf("most in flight: %d on one connection, %d in all", mostOne, most)
		})
	}
}
