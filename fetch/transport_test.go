package fetch_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// identities returns n proxies that are one gateway under n user names, as
// rotating-proxy providers sell sessions.
func identities(t testing.TB, addr string, n int) []proxies.Proxy {
	t.Helper()
	ps := make([]proxies.Proxy, n)
	for i := range ps {
		u, err := proxies.ParseURL(fmt.Sprintf("http://user-session-%d:pw@%s", i, addr))
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = proxies.FromURL(u)
	}
	return ps
}

// countWriter counts records, those that are ok, and those that dialled a
// new connection (a reused one has no connect phase).
type countWriter struct{ n, ok, dialled atomic.Int64 }

func (w *countWriter) Write(r *results.Record) error {
	w.n.Add(1)
	if r.OK {
		w.ok.Add(1)
	}
	if _, ok := r.Phases.Get("connect"); ok {
		w.dialled.Add(1)
	}
	return nil
}

// TestIdleConnectionsBoundedInTotal: 2,000 identities on one gateway hold no
// more connections to it, during the run and after it, than the workers in
// flight (and being dialled) and the transports' idle budget: not a set per
// identity. Through
// the fetchtest proxy (which takes any credentials) with plain requests,
// and through tinyproxy (without BasicAuth, so it ignores the user names)
// with CONNECT tunnels to an https target. Before, each identity kept its
// own idle connections, and they piled up at the gateway.
func TestIdleConnectionsBoundedInTotal(t *testing.T) {
	for _, tc := range []string{"fetchtest/http", "tinyproxy/https"} {
		t.Run(tc, func(t *testing.T) {
			var px *fetchtest.Proxy
			var err error
			tls := tc == "tinyproxy/https"
			if tls {
				px, err = fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{})
			} else {
				px, err = fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer px.Close()
			port, _ := strconv.Atoi(px.Addr[strings.LastIndexByte(px.Addr, ':')+1:])
			tg := startTarget(t, fetchtest.TargetOptions{TLS: tls})

			const ids, workers = 2000, 32
			urls := 2 * ids
			if tls {
				urls = ids + 500 // every new connection is a TLS handshake
			}
			cfg := fetch.DefaultConfig()
			cfg.Proxies = identities(t, px.Addr, ids)
			cfg.Concurrency = workers
			cfg.RootCAs = tg.CertPool
			e, err := fetch.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var sb strings.Builder
			for i := range urls {
				fmt.Fprintf(&sb, "%s/c/%d?size=64\n", tg.URL, i)
			}

			// Sample the connections while the run goes.
			stop := make(chan struct{})
			var most atomic.Int64
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if n := int64(openConns(t, port)); n > most.Load() {
							most.Store(n)
						}
					}
				}
			}()
			w := &countWriter{}
			rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(sb.String())}}, w)
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if w.ok.Load() != int64(urls) || rep.Failed != 0 {
				t.Fatalf("%d of %d ok, %d failed", w.ok.Load(), urls, rep.Failed)
			}
			// In use at most -c; being dialled at most -c more (net/http
			// finishes a dial even when its request got another connection
			// first); idle at most max(-c, 16): 3·c in all, whatever the
			// number of identities.
			bound := int64(3 * workers)
			if m := most.Load(); m > bound {
				t.Errorf("up to %d connections open to the gateway during the run, want at most %d (for %d identities)", m, bound, ids)
			}
			t.Logf("at most %d connections open to the gateway during the run (bound %d, %d identities)", most.Load(), bound, ids)
			// Run closes the idle connections at its end.
			if n := openConns(t, port); n > 0 {
				t.Errorf("%d connections still open to the gateway after the run", n)
			}
		})
	}
}

// TestConnectionsKeptAlivePerProxy: in the steady state through a few
// proxies each keeps its connections alive: many requests, few dials.
func TestConnectionsKeptAlivePerProxy(t *testing.T) {
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	tg := startTarget(t, fetchtest.TargetOptions{})
	cfg := fetch.DefaultConfig()
	cfg.Proxies = identities(t, px.Addr, 4)
	cfg.Concurrency = 8
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "%s/k/%d?size=64\n", tg.URL, i)
	}
	w := &countWriter{}
	if _, err := e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(sb.String())}}, w); err != nil {
		t.Fatal(err)
	}
	if w.ok.Load() != 400 {
		t.Fatalf("%d of 400 ok", w.ok.Load())
	}
	if d := w.dialled.Load(); d > 40 {
		t.Errorf("%d of 400 requests through 4 proxies at -c 8 dialled: connections not kept alive", d)
	}
}

// TestEachIdentityItsCredentials: three identities on one gateway that
// takes only one's credentials (another has wrong ones, the third none).
// Whichever way a request goes (a plain one on a connection the identities
// share, carrying its own Proxy-Authorization or none; a CONNECT tunnel,
// bound to the credentials it was opened with; through an http, https or
// SOCKS5 proxy), the good identity's attempts are served and the others'
// refused, also when the good one's connection is idle and ready: no
// identity rides another's tunnel or credentials. And the same with
// --proxy-rotate request, whose plain requests net/http writes (they
// close their connection), not h1.
func TestEachIdentityItsCredentials(t *testing.T) {
	for _, rotate := range []proxies.Rotation{proxies.RotateDefault, proxies.RotateRequest} {
		for _, kind := range []string{"http", "https", "socks5"} {
			for _, target := range []string{"http", "https"} {
				t.Run(fmt.Sprintf("%s/%s/rotate=%v", kind, target, rotate == proxies.RotateRequest), func(t *testing.T) {
					px := startProxy(t, kind, fetchtest.ProxyOptions{User: "good", Password: "pw", TLS: kind == "https"})
					tg := startTarget(t, fetchtest.TargetOptions{TLS: target == "https"})
					withUser := func(user string) proxies.Proxy {
						return proxyOf(t, strings.Replace(px.URL, "://", "://"+user+":pw@", 1), nil)
					}
					good, bad, none := withUser("good"), withUser("bad"), proxyOf(t, px.URL, nil)
					cfg := fetch.DefaultConfig()
					cfg.Proxies = []proxies.Proxy{good, bad, none}
					cfg.Retries = 0
					cfg.Concurrency = 1 // one at a time: the good identity's connection is idle when the other's turn comes
					cfg.ProxyRotate = rotate
					cfg.Policy = limits.RoundRobin
					roots := x509.NewCertPool()
					roots.AppendCertsFromPEM(tg.CertPEM)
					roots.AppendCertsFromPEM(px.CertPEM)
					cfg.RootCAs = roots
					var lines []string
					for i := range 9 {
						lines = append(lines, fmt.Sprintf("%s/c/%d?size=16", tg.URL, i))
					}
					recs, _ := run(t, cfg, lines...)
					through := map[string]int{}
					for _, r := range recs {
						through[r.Proxy]++
						switch {
						case r.Proxy == good.ID && !r.OK:
							t.Errorf("through the good identity: %+v", r.Error)
						case (r.Proxy == bad.ID || r.Proxy == none.ID) && r.OK:
							t.Errorf("through %s, which the proxy refuses: ok (%s)", r.Proxy, r.URL)
						}
					}
					if through[good.ID] == 0 || through[bad.ID] == 0 || through[none.ID] == 0 {
						t.Fatalf("attempts by identity: %v; want some through each", through)
					}
				})
			}
		}
	}
}
