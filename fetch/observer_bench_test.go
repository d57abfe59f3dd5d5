package fetch_test

import (
	"context"
	"io"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/metrics"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// BenchmarkPerURLMetrics is BenchmarkPerURL's direct and http-proxy cases
// with --metrics' observer (package metrics) told of every attempt and
// record: the difference between the two is what metrics cost a URL.
func BenchmarkPerURLMetrics(b *testing.B) {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer tg.Close()
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer px.Close()
	for _, bc := range []struct {
		name  string
		proxy *fetchtest.Proxy
	}{
		{"direct", nil},
		{"http-proxy", px},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 16
			if bc.proxy != nil {
				u, err := proxies.ParseURL(bc.proxy.URL)
				if err != nil {
					b.Fatal(err)
				}
				cfg.Proxies = []proxies.Proxy{{Scheme: u.Scheme, Host: u.Host, ID: proxies.Identity(u), Concurrency: 16}}
			}
			m := metrics.New(metrics.Options{Proxies: cfg.Proxies})
			cfg.Observer = m
			e, err := fetch.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			m.Watch(e)
			w := results.NewJSONLWriter(io.Discard)
			b.ReportAllocs()
			b.ResetTimer()
			rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: &urlLines{base: tg.URL, size: 512, n: b.N}}}, w)
			if err != nil {
				b.Fatal(err)
			}
			if rep.OK != b.N {
				b.Fatalf("%d of %d ok: %+v", rep.OK, b.N, rep.ByKind)
			}
		})
	}
}
