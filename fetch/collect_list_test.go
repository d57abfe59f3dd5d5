package fetch_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"weak"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/proxies"
)

// TestNewDropsTheList: fetch.New, handed the only reference to a list of
// identities, keeps nothing of the list itself and calls ListDropped once
// it holds none, before it builds the scheduler: a caller that collects
// garbage there (the command, for a large list) has the list gone, so that
// the scheduler reuses its memory. New itself never collects: with
// collection off (as during the command's start) and no ListDropped, the
// list is still there when New returns. Either way the engine fetches
// through its identities, with their credentials.
func TestNewDropsTheList(t *testing.T) {
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
	for _, collect := range []bool{true, false} {
		var list weak.Pointer[proxies.Proxy]
		goneInHook := false
		cfg := fetch.DefaultConfig()
		cfg.Proxies = identities(t, px.Addr, 10_000)
		cfg.Retries = 0
		list = weak.Make(&cfg.Proxies[0])
		if collect {
			cfg.ListDropped = func() {
				runtime.GC()
				goneInHook = list.Value() == nil
			}
		}
		e, err := fetch.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if collect && !goneInHook {
			t.Error("the list was still live when New called ListDropped: New kept a reference")
		}
		if !collect && list.Value() == nil {
			t.Error("the list was collected by New without ListDropped: New collected garbage")
		}
		// The proxy takes only the first identity's credentials: the
		// least-used policy gives the first URL to the first identity.
		w := &countWriter{}
		_, err = e.Run(context.Background(), []input.Source{{Name: "-", R: strings.NewReader(fmt.Sprintf("%s/a\n", tg.URL))}}, w)
		if err != nil || w.ok.Load() != 1 {
			t.Errorf("collect %v: %d of 1 URL ok through the first identity, %v", collect, w.ok.Load(), err)
		}
		e.Close()
	}
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
