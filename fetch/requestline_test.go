package fetch_test

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// Markers in header values and bodies: no record may hold them.
const (
	hdrSecret  = "hDrSeCrEt"
	bodySecret = "bOdYsEcReT"
)

// seen is what the echo target got in one request.
type seen struct {
	Method string
	Header http.Header
	Sum    string // hex SHA-256 of the body
	Len    int
}

// echoTarget records every request it gets by its tag (the query's
// "tag"): /echo answers 200, /flaky 503 to its tag's first request and
// 200 after, /redir?code=N sends the request on to /echo with tag+"-to".
type echoTarget struct {
	plain, secure *httptest.Server
	mu            sync.Mutex
	by            map[string][]seen
}

func startEchoTarget(t *testing.T) *echoTarget {
	t.Helper()
	e := &echoTarget{by: map[string][]seen{}}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(b)
		tag := r.URL.Query().Get("tag")
		e.mu.Lock()
		e.by[tag] = append(e.by[tag], seen{r.Method, r.Header.Clone(), hex.EncodeToString(sum[:]), len(b)})
		n := len(e.by[tag])
		e.mu.Unlock()
		switch r.URL.Path {
		case "/flaky":
			if n == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
		case "/redir":
			code, _ := strconv.Atoi(r.URL.Query().Get("code"))
			http.Redirect(w, r, "/echo?tag="+tag+"-to", code)
			return
		}
		io.WriteString(w, "ok")
	})
	e.plain = httptest.NewServer(h)
	e.secure = httptest.NewUnstartedServer(h)
	// A client that tried a connection and left (a proxy's probe) is no
	// news.
	e.secure.Config.ErrorLog = log.New(io.Discard, "", 0)
	e.secure.StartTLS()
	t.Cleanup(e.plain.Close)
	t.Cleanup(e.secure.Close)
	return e
}

func (e *echoTarget) got(tag string) []seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.by[tag]
}

func sumOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// reqLine is one row of TestRequestLines: a JSON request line and what
// the target must get.
type reqLine struct {
	path   string // and query, before the tag
	method string // "" for a plain URL line
	header map[string]any
	body   []byte
	b64    bool
	id     any
	meta   any
	// What the target gets: for the tag, then, on a redirect, for tag-to.
	requests   int    // for the tag (2: a retry)
	toMethod   string // "": no redirect
	toWithBody bool
}

func (l reqLine) line(base, tag string) string {
	u := base + l.path + "tag=" + tag
	if l.method == "" && l.header == nil && l.body == nil {
		return u
	}
	m := map[string]any{"url": u}
	if l.method != "" {
		m["method"] = l.method
	}
	if l.header != nil {
		m["header"] = l.header
	}
	if l.body != nil {
		if l.b64 {
			m["body_base64"] = base64.StdEncoding.EncodeToString(l.body)
		} else {
			m["body"] = string(l.body)
		}
	}
	if l.id != nil {
		m["id"] = l.id
	}
	if l.meta != nil {
		m["meta"] = l.meta
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// TestRequestLines: JSON request lines with every method, text and base64
// bodies and header lists reach the target as written, directly and
// through every kind of proxy (tinyproxy and squid for http, an https
// proxy, microsocks for socks5; plain and https targets, the latter
// through CONNECT or SOCKS), on both transports, with the same records on
// both. A line's header replaces the run's of that name; id and meta are
// copied into the record; a retry (503, then 200) sends the body again, as
// do 307 and 308, while 302 and 303 make a POST a GET without it. No record
// holds a header value or a body.
func TestRequestLines(t *testing.T) {
	echo := startEchoTarget(t)
	tiny, err := fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs tinyproxy)", err)
	}
	t.Cleanup(tiny.Close)
	squid, err := fetchtest.StartSquid(t.TempDir())
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs squid)", err)
	}
	t.Cleanup(squid.Close)
	socks, err := fetchtest.StartSOCKS5(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs microsocks)", err)
	}
	t.Cleanup(socks.Close)
	tlsProxy := startProxy(t, "http", fetchtest.ProxyOptions{TLS: true})
	roots := x509.NewCertPool()
	roots.AddCert(echo.secure.Certificate())
	roots.AppendCertsFromPEM(tlsProxy.CertPEM)

	bin := make([]byte, 3000)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range bin {
		bin[i] = byte(rng.Uint32())
	}
	rows := []reqLine{
		{path: "/echo?", requests: 1},
		{path: "/echo?", method: "POST", header: map[string]any{"Content-Type": "application/json", "X-Tag": []string{"a", "b"}, "X-Over": "line " + hdrSecret},
			body: []byte(`{"q":1,"s":"` + bodySecret + `"}`), id: "item-17", meta: map[string]any{"batch": 3, "tags": []string{"x"}}, requests: 1},
		{path: "/echo?", method: "PUT", body: append([]byte(bodySecret), bin...), b64: true, id: 17, requests: 1},
		{path: "/echo?", method: "PATCH", body: []byte("é ✓ \x01 " + bodySecret), requests: 1},
		{path: "/echo?", method: "DELETE", header: map[string]any{"X-Tag": "d"}, requests: 1},
		{path: "/echo?", method: "OPTIONS", requests: 1},
		{path: "/echo?", method: "HEAD", header: map[string]any{"Accept": "text/plain"}, requests: 1},
		{path: "/flaky?", method: "POST", body: []byte("retry " + bodySecret), requests: 2},
		{path: "/redir?code=307&", method: "POST", body: []byte("307 " + bodySecret), requests: 1, toMethod: "POST", toWithBody: true},
		{path: "/redir?code=308&", method: "PUT", body: []byte("308 " + bodySecret), requests: 1, toMethod: "PUT", toWithBody: true},
		{path: "/redir?code=303&", method: "POST", body: []byte("303 " + bodySecret), requests: 1, toMethod: "GET"},
		{path: "/redir?code=302&", method: "POST", body: []byte("302 " + bodySecret), requests: 1, toMethod: "GET"},
	}
	// tinyproxy closes each connection after its answer without saying
	// so: a POST sent on it before the close is seen fails, and is not
	// sent again by the client (as net/http and curl do not); the route
	// takes a new connection for every request. It also passes on only
	// the first of a header's repeated values to a plain target.
	routes := []struct {
		name, proxy string
		rotate      bool
		firstOnly   bool
	}{
		{"direct", "", false, false},
		{"tinyproxy", tiny.URL, true, true},
		{"squid", squid.URL, false, false},
		{"https-proxy", tlsProxy.URL, false, false},
		{"socks5", socks.URL, false, false},
	}
	for _, route := range routes {
		t.Run(route.name, func(t *testing.T) {
			t.Parallel()
			records := map[fetch.Transport][]string{}
			for _, tp := range transports {
				cfg := fetch.DefaultConfig()
				cfg.Concurrency = 8
				cfg.Transport = tp
				cfg.RootCAs = roots
				cfg.Retries = 1
				cfg.RetryBackoff = time.Millisecond
				cfg.Timeout = 30 * time.Second
				cfg.Header = http.Header{"X-Over": {"run"}, "X-Run": {"run"}}
				if route.proxy != "" {
					cfg.Proxies = []proxies.Proxy{proxyOf(t, route.proxy, nil)}
					cfg.ProxyMaxFailures = 0
					if route.rotate {
						cfg.ProxyRotate = proxies.RotateRequest
					}
				}
				var lines []string
				type want struct {
					tag string
					row reqLine
				}
				var wants []want
				for _, base := range []string{echo.plain.URL, echo.secure.URL} {
					for i, row := range rows {
						tag := fmt.Sprintf("%s-%s-%s-%d", route.name, tp, base[:5], i)
						lines = append(lines, row.line(base, tag))
						wants = append(wants, want{tag, row})
					}
				}
				recs, _ := run(t, cfg, lines...)
				for i, w := range wants {
					r := recs[i+1]
					if r == nil {
						t.Fatalf("line %d: no record", i+1)
					}
					js, _ := json.Marshal(r)
					for _, m := range []string{hdrSecret, bodySecret} {
						if bytes.Contains(js, []byte(m)) {
							t.Errorf("line %d: record holds %s: %s", i+1, m, js)
						}
					}
					if !r.OK || r.Status != 200 || r.Attempts != w.row.requests {
						t.Errorf("%s: ok %v status %d attempts %d error %+v, want 200 after %d", lines[i], r.OK, r.Status, r.Attempts, r.Error, w.row.requests)
					}
					checkIDMeta(t, r, w.row)
					records[tp] = append(records[tp], sameFields(r)+" id="+string(r.ID)+" meta="+string(r.Meta))
					checkSeen(t, echo, w.tag, w.row, route.firstOnly && strings.Contains(w.tag, "-http:-"))
				}
			}
			for i := range records[fetch.TransportFast] {
				if fast, std := records[fetch.TransportFast][i], records[fetch.TransportStd][i]; fast != std {
					t.Errorf("line %d:\n  fast %s\n  std  %s", i+1, fast, std)
				}
			}
		})
	}
}

// checkIDMeta checks that r carries row's id and meta, as compact JSON.
func checkIDMeta(t *testing.T, r *results.Record, row reqLine) {
	t.Helper()
	for _, f := range []struct {
		name string
		got  json.RawMessage
		want any
	}{{"id", r.ID, row.id}, {"meta", r.Meta, row.meta}} {
		want := ""
		if f.want != nil {
			b, _ := json.Marshal(f.want)
			want = string(b)
		}
		if string(f.got) != want {
			t.Errorf("line %d: %s %s, want %s", r.Line, f.name, f.got, want)
		}
	}
}

// checkSeen checks what the echo target got for tag (and tag-to, after a
// redirect) against row.
func checkSeen(t *testing.T, echo *echoTarget, tag string, row reqLine, firstOnly bool) {
	t.Helper()
	method := row.method
	if method == "" {
		method = "GET"
	}
	got := echo.got(tag)
	if len(got) != row.requests {
		t.Errorf("%s: %d requests, want %d", tag, len(got), row.requests)
	}
	for _, s := range got {
		checkRequest(t, tag, s, method, row, row.body, firstOnly)
	}
	if row.toMethod == "" {
		return
	}
	to := echo.got(tag + "-to")
	if len(to) != 1 {
		t.Fatalf("%s-to: %d requests, want 1", tag, len(to))
	}
	var body []byte
	if row.toWithBody {
		body = row.body
	}
	checkRequest(t, tag+"-to", to[0], row.toMethod, row, body, firstOnly)
}

// checkRequest checks one request the target got: its method, body, and
// headers (with firstOnly, only the first of a list arrives).
func checkRequest(t *testing.T, tag string, s seen, method string, row reqLine, body []byte, firstOnly bool) {
	t.Helper()
	if s.Method != method || s.Len != len(body) || s.Sum != sumOf(body) {
		t.Errorf("%s: %s with a body of %d bytes (sha256 %.12s), want %s with %d (%.12s)", tag, s.Method, s.Len, s.Sum, method, len(body), sumOf(body))
	}
	header := map[string]string{"X-Run": "run", "X-Over": "run", "User-Agent": fetch.UserAgent}
	for k, v := range row.header {
		switch v := v.(type) {
		case string:
			header[k] = v
		case []string:
			header[k] = strings.Join(v, ", ")
			if firstOnly {
				header[k] = v[0]
			}
		}
	}
	for k, v := range header {
		// A proxy may join a list into one value.
		if got := strings.Join(s.Header.Values(k), ", "); got != v {
			t.Errorf("%s: header %s %q, want %q", tag, k, got, v)
		}
	}
}

// TestRequestLineInvalid: a JSON line that cannot be fetched is an input
// record naming the field at fault, with the line's id and meta when they
// are valid, its URL without user information, and neither a header value
// nor the body anywhere in it; nothing is sent.
func TestRequestLineInvalid(t *testing.T) {
	echo := startEchoTarget(t)
	u := `"url":"http://user:pw@` + strings.TrimPrefix(echo.plain.URL, "http://") + `/echo?tag=bad"`
	shown := echo.plain.URL + "/echo?tag=bad"
	rows := []struct{ line, says, shown string }{
		{`{` + u + `,"id":"a","body":"` + bodySecret + `","body_base64":"eA=="}`, `"body" and "body_base64"`, shown},
		{`{` + u + `,"id":"a","body":"` + bodySecret + strings.Repeat("x", 64) + `"}`, `"body" is longer than 64 bytes`, shown},
		{`{` + u + `,"id":"a","header":{"X-A":"` + hdrSecret + `\nX-B: 1"}}`, `"header" X-A`, shown},
		{`{` + u + `,"id":"a","header":{"X-A":[1,"` + hdrSecret + `"]}}`, `"header" X-A`, shown},
		{`{` + u + `,"id":"a","method":"P OST","body":"` + bodySecret + `"}`, `"method"`, shown},
		{`{"id":"a","body":"` + bodySecret + `"}`, `"url" is missing`, ""},
		{`{"url":"http://a/","body":"` + bodySecret + `"`, `not valid JSON`, ""},
	}
	var lines []string
	for _, r := range rows {
		lines = append(lines, r.line)
	}
	cfg := fetch.DefaultConfig()
	cfg.MaxRequestBody = 64
	recs, _ := run(t, cfg, lines...)
	for i, row := range rows {
		r := recs[i+1]
		if r == nil || r.OK || r.Error == nil || r.Error.Phase != results.PhaseInput || r.Error.Kind != results.KindInvalid {
			t.Fatalf("line %d: %+v, want an input/invalid record", i+1, r)
		}
		if !strings.Contains(r.Error.Message, row.says) || r.URL != row.shown {
			t.Errorf("line %d: url %q message %q, want %q and %q", i+1, r.URL, r.Error.Message, row.shown, row.says)
		}
		if row.shown != "" && string(r.ID) != `"a"` {
			t.Errorf("line %d: id %s", i+1, r.ID)
		}
		js, _ := json.Marshal(r)
		for _, m := range []string{hdrSecret, bodySecret, "pw"} {
			if bytes.Contains(js, []byte(m)) {
				t.Errorf("line %d: record holds %s: %s", i+1, m, js)
			}
		}
	}
	if n := len(echo.got("bad")); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

// TestRequestLinesResumeAndShards: a resumed run skips the JSON lines its
// results finished, by input, line and URL, and takes the rest; the shards
// of a list of JSON and plain lines take every line exactly once.
func TestRequestLinesResumeAndShards(t *testing.T) {
	echo := startEchoTarget(t)
	var lines []string
	for i := range 12 {
		row := reqLine{path: "/echo?", method: "POST", body: []byte("b" + strconv.Itoa(i)), id: i}
		if i%3 == 0 {
			row = reqLine{path: "/echo?"}
		}
		lines = append(lines, row.line(echo.plain.URL, "r"+strconv.Itoa(i)))
	}
	cfg := fetch.DefaultConfig()
	first, _ := run(t, cfg, lines[:7]...)
	var done bytes.Buffer
	for _, r := range first {
		b, _ := json.Marshal(r)
		done.Write(append(b, '\n'))
	}
	cfg.Done, _ = results.LoadDone(&done)
	if cfg.Done.Len() != 7 {
		t.Fatalf("done set of %d", cfg.Done.Len())
	}
	second, _ := run(t, cfg, lines...)
	for n := 1; n <= 12; n++ {
		if (second[n] != nil) != (n > 7) {
			t.Errorf("line %d: record %v in the resumed run", n, second[n] != nil)
		}
	}
	for n, r := range second {
		if !r.OK || (n-1)%3 != 0 && string(r.ID) != strconv.Itoa(n-1) {
			t.Errorf("line %d: %+v", n, r)
		}
	}

	cfg = fetch.DefaultConfig()
	taken := map[int]int{}
	for k := 1; k <= 3; k++ {
		cfg.Shard = input.Shard{K: k, N: 3}
		recs, _ := run(t, cfg, lines...)
		for n := range recs {
			taken[n]++
		}
	}
	for n := 1; n <= 12; n++ {
		if taken[n] != 1 {
			t.Errorf("line %d taken by %d shards", n, taken[n])
		}
	}
}
