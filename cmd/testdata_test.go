package cmd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// TestTestdataProxies loads the sample proxy list of the README with the
// real loader: every line is a proxy on loopback, the pool holds its three
// lines, and no identity shows a credential.
func TestTestdataProxies(t *testing.T) {
	var warnings []string
	ps, err := proxies.Load([]string{"../testdata/proxies.txt"}, nil, func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %q", warnings)
	}
	userHash := sha256.Sum256([]byte("user:secret"))
	want := []string{
		"http://127.0.0.1:3128",
		"http://127.0.0.1:3129",
		"https://127.0.0.1:8443",
		"socks5://127.0.0.1:1080#" + hex.EncodeToString(userHash[:4]),
		"socks5h://127.0.0.1:1081",
		"http://127.0.0.2:8080",
		"http://127.0.0.3:8080",
		"http://127.0.0.4:8080",
	}
	var ids []string
	pool := 0
	for _, p := range ps {
		ids = append(ids, p.ID)
		if a, err := netip.ParseAddr(p.URL().Hostname()); err != nil || !a.IsLoopback() {
			t.Errorf("%s: host %q is not a loopback address", p.Source(), p.URL().Hostname())
		}
		if strings.Contains(p.ID, "secret") || strings.Contains(p.ID, "user") {
			t.Errorf("%s: identity %q shows a credential", p.Source(), p.ID)
		}
		if p.Pool == "resi" {
			pool++
		}
	}
	if !slices.Equal(ids, want) {
		t.Errorf("identities:\n got %q\nwant %q", ids, want)
	}
	if pool != 3 {
		t.Errorf("pool resi has %d proxies, want 3", pool)
	}
}

// TestTestdataURLs runs the sample URL lists of the README, two inputs,
// through a loopback proxy to a loopback target put in the place of
// 127.0.0.1:8080, and checks the record of every line.
func TestTestdataURLs(t *testing.T) {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Close)
	proxy, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)

	dir := t.TempDir()
	names := []string{"urls.txt", "more-urls.txt"}
	lines := map[string][]string{} // by input: the sample file's lines, as given to fetch
	var inputs []string
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "127.0.0.1:8080", target.Addr)
		path := writeFile(t, dir, name, s)
		inputs = append(inputs, path)
		lines[path] = strings.Split(s, "\n")
	}

	// On each transport, through the same proxy to the same target: the
	// same records but for timings.
	var byTransport [2][]results.Record
	for i, tp := range transports {
		t.Run(tp, func(t *testing.T) {
			target.ResetStats() // /retried fails its first request again
			byTransport[i] = testdataURLs(t, tp, inputs, lines, proxy)
		})
	}
	if byTransport[0] != nil && byTransport[1] != nil {
		sameRecords(t, byTransport[0], byTransport[1], sameRoute)
	}
}

// testdataURLs runs the sample lists on transport tp and checks the
// records of TestTestdataURLs; it returns them, or nil when a check failed.
func testdataURLs(t *testing.T, tp string, inputs []string, lines map[string][]string, proxy *fetchtest.Proxy) []results.Record {
	out := filepath.Join(t.TempDir(), "out.jsonl")
	ios, _, _, stderr := Test()
	args := append([]string{"--transport", tp, "-q", "-o", out, "--proxy", proxy.URL, "--retry-backoff", "1ms"}, inputs...)
	if code := Run(context.Background(), ios, args); code != ExitNotAllOK {
		t.Errorf("exit code %d, want %d (the invalid lines); stderr:\n%s", code, ExitNotAllOK, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}

	type want struct {
		ok       bool
		status   int
		bytes    int64
		attempts int
	}
	byPath := map[string]want{
		"/small":     {true, 200, 512, 1},
		"/large":     {true, 200, 131072, 1},
		"/slow":      {true, 200, 4096, 1},
		"/late":      {true, 200, 1024, 1},
		"/retried":   {true, 200, 1024, 2},
		"/missing":   {true, 404, 0, 1},
		"/trimmed":   {true, 200, 10, 1},
		"/more/1":    {true, 200, 2048, 1},
		"/more/2":    {true, 200, 2048, 1},
		"/not-http":  {ok: false},
		"/no-scheme": {ok: false},
	}
	seen := map[string]bool{}
	recs := readRecords(t, data)
	for _, r := range recs {
		// The record's line is the physical line of its URL in its input.
		ls := lines[r.Input]
		if r.Line < 1 || r.Line > len(ls) || strings.TrimSpace(ls[r.Line-1]) != r.URL {
			t.Errorf("%s line %d: no such line holds %q", r.Input, r.Line, r.URL)
		}
		path := r.URL
		if u, err := url.Parse(r.URL); err == nil && u.Scheme != "" {
			path = u.Path
		} else {
			path = path[strings.Index(path, "/"):]
		}
		w, ok := byPath[path]
		if !ok {
			t.Errorf("record for an unexpected URL %q", r.URL)
			continue
		}
		seen[path] = true
		if !w.ok {
			if r.OK || r.Error == nil || r.Error.Phase != results.PhaseInput || r.Error.Kind != results.KindInvalid || r.Attempts != 0 {
				t.Errorf("%s: %+v, want an invalid input record", r.URL, r)
			}
			continue
		}
		if r.OK != w.ok || r.Status != w.status || r.Bytes != w.bytes || r.Attempts != w.attempts || r.Proxy != proxy.URL {
			t.Errorf("%s: ok %v status %d bytes %d attempts %d proxy %q; want %+v through %s",
				r.URL, r.OK, r.Status, r.Bytes, r.Attempts, r.Proxy, w, proxy.URL)
		}
	}
	for path := range byPath {
		if !seen[path] {
			t.Errorf("no record for %s", path)
		}
	}
	if t.Failed() {
		return nil
	}
	return recs
}
