package fetch_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/proxies"
)

// urlLines is an io.Reader of n URL lines, generated as read (one line at a
// time, a few tens of nanoseconds each) so that the input costs no memory
// that grows with b.N and is not built up front inside the timed region.
type urlLines struct {
	base string
	n, i int
	line []byte // the current line
	off  int    // how much of it was read
}

func (u *urlLines) Read(p []byte) (int, error) {
	for u.off == len(u.line) {
		if u.i == u.n {
			return 0, io.EOF
		}
		u.line, u.off = fmt.Appendf(u.line[:0], "%s/b/%d?size=512\n", u.base, u.i), 0
		u.i++
	}
	n := copy(p, u.line[u.off:])
	u.off += n
	return n, nil
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
			rep, err := e.Run(context.Background(), []fetch.Input{{Name: "-", R: &urlLines{base: tg.URL, n: b.N}}}, w)
			if err != nil {
				b.Fatal(err)
			}
			if rep.OK != b.N {
				b.Fatalf("%d of %d ok: %+v", rep.OK, b.N, rep.ByKind)
			}
		})
	}
}
