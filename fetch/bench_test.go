package fetch_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// urlLines is an io.Reader of n URL lines, generated as read (one line at a
// time, a few tens of nanoseconds each) so that the input costs no memory
// that grows with b.N and is not built up front inside the timed region.
type urlLines struct {
	base string
	size int // the body size asked for; 0 is 512
	n, i int
	line []byte // the current line
	off  int    // how much of it was read
}

func (u *urlLines) Read(p []byte) (int, error) {
	for u.off == len(u.line) {
		if u.i == u.n {
			return 0, io.EOF
		}
		size := u.size
		if size == 0 {
			size = 512
		}
		u.line, u.off = fmt.Appendf(u.line[:0], "%s/b/%d?size=%d\n", u.base, u.i, size), 0
		u.i++
	}
	n := copy(p, u.line[u.off:])
	u.off += n
	return n, nil
}

// BenchmarkPerURL measures the engine's cost per URL on loopback: one
// op is one URL fetched, with records encoded as JSON. direct and
// http-proxy fetch 512-byte bodies at -c 16; direct-c64-1KiB is the
// comparison with hey (1 KiB bodies at -c 64). Profile it with
//
//	go test -run '^$' -bench 'PerURL/direct-c64' -benchtime 20000x -cpuprofile cpu.out ./fetch/
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
	// closing closes each connection after its answer, as tinyproxy does:
	// every URL through it dials.
	closing, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{CloseEach: true})
	if err != nil {
		b.Fatal(err)
	}
	defer closing.Close()
	// authed takes only requests with its credentials, as a rotating
	// provider's gateway does: each request carries them.
	authed, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{User: "user-session-1", Password: "pw"})
	if err != nil {
		b.Fatal(err)
	}
	defer authed.Close()
	for _, bc := range []struct {
		name              string
		proxy             *fetchtest.Proxy
		userinfo          string // "user:pass@" of the proxy's URL, or ""
		concurrency, size int
	}{
		{"direct", nil, "", 16, 512},
		{"http-proxy", px, "", 16, 512},
		{"http-proxy-credentials", authed, "user-session-1:pw@", 16, 512},
		{"http-proxy-closing", closing, "", 16, 512},
		{"direct-c64-1KiB", nil, "", 64, 1024},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = bc.concurrency
			if bc.proxy != nil {
				u, err := proxies.ParseURL(strings.Replace(bc.proxy.URL, "://", "://"+bc.userinfo, 1))
				if err != nil {
					b.Fatal(err)
				}
				cfg.Proxies = []proxies.Proxy{{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: proxies.Identity(u), Concurrency: bc.concurrency}}
			}
			e, err := fetch.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			w := results.NewJSONLWriter(io.Discard)
			b.ReportAllocs()
			b.ResetTimer()
			rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: &urlLines{base: tg.URL, size: bc.size, n: b.N}}}, w)
			if err != nil {
				b.Fatal(err)
			}
			if rep.OK != b.N {
				b.Fatalf("%d of %d ok: %+v", rep.OK, b.N, rep.ByKind)
			}
		})
	}
}
