package fetch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
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
			w := fetch.NewJSONLWriter(io.Discard)
			b.ReportAllocs()
			b.ResetTimer()
			rep, err := e.Run(context.Background(), []fetch.Input{{Name: "-", R: &urlLines{base: tg.URL, size: bc.size, n: b.N}}}, w)
			if err != nil {
				b.Fatal(err)
			}
			if rep.OK != b.N {
				b.Fatalf("%d of %d ok: %+v", rep.OK, b.N, rep.ByKind)
			}
		})
	}
}

// phaseTimes are the phases of m, whose keys must be phases.
func phaseTimes(m map[string]float64) fetch.PhaseTimes {
	var p fetch.PhaseTimes
	for k, ms := range m {
		if !p.Set(k, ms) {
			panic("not a phase: " + k)
		}
	}
	return p
}

// benchRecords are records like a run's: a plain success, one through a
// pool after a retry, and an invalid line.
var benchRecords = []*fetch.Record{
	{URL: "https://a.example/products/item/123?ref=feed", Input: "urls.txt", Line: 12, OK: true, Status: 200,
		Proxy: "http://127.0.0.1:8081", Attempts: 1, Bytes: 18324, ElapsedMS: 532.1,
		Phases: phaseTimes(map[string]float64{"queue": 1.2, "dns": 0.3, "connect": 1.1, "tls": 10.2, "request": 0.1, "headers": 50.3, "body": 3.4}),
		Tries:  []fetch.Try{}},
	{URL: "http://b.example/x", Input: "-", Line: 7, OK: false, Status: 503,
		Proxy: "http://127.0.0.1:8082", Pool: "shared", Attempts: 2, ElapsedMS: 40.25,
		Phases: phaseTimes(map[string]float64{"queue": 0.1, "headers": 20}),
		Error:  &fetch.Error{Phase: "headers", Kind: "status", Message: "503 Service Unavailable"},
		Tries: []fetch.Try{{Proxy: "http://127.0.0.1:8081", Pool: "shared", Status: 503, ElapsedMS: 20.4,
			Phases: phaseTimes(map[string]float64{"queue": 0.1, "headers": 20.0}),
			Error:  &fetch.Error{Phase: "headers", Kind: "status", Message: "503 Service Unavailable"}}}},
	{URL: "ftp://c.example/<a>", Input: "urls.txt", Line: 3, Tries: []fetch.Try{},
		Error: &fetch.Error{Phase: "input", Kind: "invalid", Message: `unsupported scheme "ftp" (want http or https)`}},
}

// BenchmarkRecordWrite measures encoding a record as a JSON line and
// buffering it: one op is one record.
func BenchmarkRecordWrite(b *testing.B) {
	w := fetch.NewJSONLWriter(io.Discard)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := w.Write(benchRecords[i%len(benchRecords)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRecordRead measures reading back a record line as `fetch
// summarize` does (encoding/json into a Record, its phases included): one
// op is one of benchRecords' lines.
func BenchmarkRecordRead(b *testing.B) {
	var lines [][]byte
	for _, r := range benchRecords {
		line, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, line)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var rec fetch.Record
		if err := json.Unmarshal(lines[i%len(lines)], &rec); err != nil {
			b.Fatal(err)
		}
	}
}
