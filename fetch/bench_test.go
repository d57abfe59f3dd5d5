package fetch_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/proxies"
)

// urlLines is an io.Reader of n URL lines, generated as read so that the
// benchmark measures the engine and not the building of its input.
func urlLines(base string, n int) io.Reader {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s/b/%d?size=512\n", base, i)
	}
	return strings.NewReader(b.String())
}

// BenchmarkPerURL measures the engine's cost per URL on loopback: one
// op is one URL fetched with a 512-byte body, with records encoded as JSON.
func BenchmarkPerURL(b *testing.B) {
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
	for _, via := range []string{"direct", "http-proxy"} {
		b.Run(via, func(b *testing.B) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 16
			if via != "direct" {
				u, _ := proxies.ParseURL(px.URL)
				cfg.Proxies = []proxies.Proxy{{URL: u, ID: proxies.Identity(u), Concurrency: 16}}
			}
			e, err := fetch.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			w := fetch.NewJSONLWriter(io.Discard)
			b.ReportAllocs()
			b.ResetTimer()
			rep, err := e.Run(context.Background(), []fetch.Input{{Name: "-", R: urlLines(tg.URL, b.N)}}, w)
			if err != nil {
				b.Fatal(err)
			}
			if rep.OK != b.N {
				b.Fatalf("%d of %d ok: %+v", rep.OK, b.N, rep.ByKind)
			}
		})
	}
}
