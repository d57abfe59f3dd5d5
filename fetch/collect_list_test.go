package fetch_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"weak"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/proxies"
)

// TestNewCollectsALargeList: fetch.New, handed the only reference to a
// list of 10,000 identities, keeps nothing of the list itself and collects
// it before it returns, with collection otherwise off (as during the
// command's start), so that the scheduler it builds next reuses the list's
// memory: the list is gone when New returns, and the engine
// still fetches through its identities, with their credentials. A list of
// 100 is left to the next collection.
func TestNewCollectsALargeList(t *testing.T) {
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{User: "user-session-0", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for _, tc := range []struct {
		n         int
		collected bool
	}{{10_000, true}, {100, false}} {
		e, list := newEngineFromList(t, px.Addr, tc.n)
		if got := list.Value() == nil; got != tc.collected {
			t.Errorf("%d identities: the list collected by New: %v, want %v", tc.n, got, tc.collected)
		}
		// The proxy takes only the first identity's credentials: the
		// least-used policy gives the first URL to the first identity.
		w := &countWriter{}
		_, err := e.Run(context.Background(), []fetch.Input{{Name: "-", R: strings.NewReader(fmt.Sprintf("%s/a\n", tg.URL))}}, w)
		if err != nil || w.ok.Load() != 1 {
			t.Errorf("%d identities: %d of 1 URL ok through the first identity, %v", tc.n, w.ok.Load(), err)
		}
		e.Close()
	}
}

// newEngineFromList builds an engine from a list of n identities that
// only the engine is given, and returns a weak pointer to the list.
func newEngineFromList(t *testing.T, addr string, n int) (*fetch.Engine, weak.Pointer[proxies.Proxy]) {
	cfg := fetch.DefaultConfig()
	cfg.Proxies = identities(t, addr, n)
	cfg.Retries = 0
	list := weak.Make(&cfg.Proxies[0])
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, list
}

// TestNewRefusesProxiesWithoutScheme: a proxy made by hand without a
// scheme proxies.ParseURL takes, or without a host, is refused by New,
// named by its place in the list; one made by FromURL is taken.
func TestNewRefusesProxiesWithoutScheme(t *testing.T) {
	u, err := proxies.ParseURL("socks5://user:pw@127.0.0.1:1080")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		proxy proxies.Proxy
		want  string // in the error; "" for none
	}{
		{"zero", proxies.Proxy{}, `proxy 2 (): scheme ""`},
		{"ftp", proxies.Proxy{Scheme: "ftp", Host: "127.0.0.1:21", ID: "ftp://127.0.0.1:21"}, `proxy 2 (ftp://127.0.0.1:21): scheme "ftp"`},
		{"no host", proxies.Proxy{Scheme: "http", ID: "x"}, "proxy 2 (x): no host"},
		{"from a URL", proxies.FromURL(u), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Proxies = []proxies.Proxy{proxies.FromURL(u), tc.proxy}
			e, err := fetch.New(cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				e.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if e != nil {
					e.Close()
				}
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
