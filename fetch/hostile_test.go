package fetch_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// maxMessage is the bound on a record's error message, as the engine
// promises it; cutMark ends a message that was cut.
const (
	maxMessage = 200
	cutMark    = "…(cut)"
)

// hostile answers, shared by the rows: built once, sent by fetchtest.Raw
// byte for byte.
var (
	fiveMB       = strings.Repeat("x", 5<<20)
	tenMBHeaders = "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("h", 10<<20) + "\r\nContent-Length: 0\r\n\r\n"
	longLocation = "http://127.0.0.1:1/%zz" + strings.Repeat("L", 50<<10) // url.Parse rejects it: invalid escape
)

func startRaw(t *testing.T, answers map[string]string) *fetchtest.Raw {
	t.Helper()
	bs := map[string][]byte{}
	for p, a := range answers {
		bs[p] = []byte(a)
	}
	r, err := fetchtest.StartRaw(bs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// checkMessage fails unless msg is fit for a record: valid UTF-8, within
// the bound, and marked cut exactly when cut says.
func checkMessage(t *testing.T, msg string, cut bool) {
	t.Helper()
	if len(msg) > maxMessage || !utf8.ValidString(msg) {
		t.Errorf("message of %d bytes (valid UTF-8 %v): %.300q", len(msg), utf8.ValidString(msg), msg)
	}
	if got := strings.HasSuffix(msg, cutMark); got != cut {
		t.Errorf("message marked cut %v, want %v: %q", got, cut, msg)
	}
}

// TestHostileServers: whatever a target or a proxy sends, what it can put
// into a record is bounded: a message of at most maxMessage bytes, marked
// when cut, quoting a value once; response headers over --max-header fail
// with too_large in phase headers.
func TestHostileServers(t *testing.T) {
	raw := startRaw(t, map[string]string{
		"/status5mb":    "HTTP/1.1 503 " + fiveMB + "\r\nContent-Length: 0\r\n\r\n",
		"/garbage5mb":   fiveMB + "\r\n\r\n",
		"/headers10mb":  tenMBHeaders,
		"/badlocation":  "HTTP/1.1 302 Found\r\nLocation: " + longLocation + "\r\nContent-Length: 0\r\n\r\n",
		"/badlocation1": "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/%zz\r\nContent-Length: 0\r\n\r\n",
		"/longlocation": "HTTP/1.1 302 Found\r\nLocation: /ok?pad=" + strings.Repeat("p", 50<<10) + "\r\nContent-Length: 0\r\n\r\n",
		"/ok":           "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		// As a proxy: CONNECT comes with no path, a plain request with
		// the target's.
		"":      "HTTP/1.1 502 " + strings.Repeat("y", 50<<10) + "\r\n\r\n",
		"/auth": "HTTP/1.1 407 " + strings.Repeat("z", 50<<10) + "\r\nContent-Length: 0\r\n\r\n",
	})
	const headerLimit = "response headers larger than --max-header (100KiB)"
	for _, tc := range []struct {
		name      string
		url       string
		viaProxy  bool
		maxHeader int64 // 0: the default
		ok        bool
		status    int
		phase     string
		kind      string
		message   string // what the message holds (first)
		cut       bool
	}{
		{name: "5 MB status line", url: raw.URL + "/status5mb", maxHeader: 8 << 20,
			status: 503, phase: results.PhaseHeaders, kind: results.KindStatus, message: "503 xxxx", cut: true},
		{name: "5 MB status line over --max-header", url: raw.URL + "/status5mb",
			phase: results.PhaseHeaders, kind: results.KindTooLarge, message: headerLimit},
		{name: "5 MB of garbage", url: raw.URL + "/garbage5mb", maxHeader: 8 << 20,
			phase: results.PhaseHeaders, kind: results.KindOther, message: `net/http: HTTP/1.x transport connection broken: malformed HTTP response "xxxx`, cut: true},
		{name: "10 MB headers", url: raw.URL + "/headers10mb",
			phase: results.PhaseHeaders, kind: results.KindTooLarge, message: headerLimit},
		{name: "a long Location that does not parse is quoted once", url: raw.URL + "/badlocation",
			status: 0, phase: results.PhaseHeaders, kind: results.KindOther, message: `bad Location header "http://127.0.0.1:1/%zzLLLL`, cut: true},
		{name: "a Location that does not parse is quoted once", url: raw.URL + "/badlocation1",
			phase: results.PhaseHeaders, kind: results.KindOther, message: `bad Location header "http://127.0.0.1:1/%zz": invalid URL escape "%zz"`},
		{name: "a long Location is followed", url: raw.URL + "/longlocation", ok: true, status: 200},
		{name: "a proxy's long answer to CONNECT", url: "https://127.0.0.1:1/x", viaProxy: true,
			phase: results.PhaseProxy, kind: results.KindProxy, message: "proxy refused CONNECT: 502 yyyy", cut: true},
		{name: "a proxy's long 407", url: "http://127.0.0.1:1/auth", viaProxy: true,
			status: 407, phase: results.PhaseProxy, kind: results.KindProxy, message: "proxy answered 407 zzzz", cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Retries = 0
			if tc.maxHeader != 0 {
				cfg.MaxHeader = tc.maxHeader
			}
			if tc.viaProxy {
				u, err := proxies.ParseURL(raw.URL)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Proxies = []proxies.Proxy{{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: proxies.Identity(u), From: "test"}}
			}
			recs, _ := runLines(t, cfg, tc.url)
			r := recs[0]
			if r.OK != tc.ok || r.Status != tc.status {
				t.Fatalf("ok %v status %d, want %v %d; error %+v", r.OK, r.Status, tc.ok, tc.status, r.Error)
			}
			if tc.ok {
				if r.Error != nil {
					t.Errorf("error %+v", r.Error)
				}
				return
			}
			if r.Error == nil {
				t.Fatal("no error")
			}
			if r.Error.Phase != tc.phase || r.Error.Kind != tc.kind {
				t.Errorf("error %s/%s, want %s/%s: %q", r.Error.Phase, r.Error.Kind, tc.phase, tc.kind, r.Error.Message)
			}
			if !strings.HasPrefix(r.Error.Message, tc.message) {
				t.Errorf("message %q, want it to start %q", r.Error.Message, tc.message)
			}
			checkMessage(t, r.Error.Message, tc.cut)
			if strings.Count(r.Error.Message, "127.0.0.1:1/") > 1 || strings.Contains(r.Error.Message, `: parse "`) {
				t.Errorf("the Location is quoted more than once: %q", r.Error.Message)
			}
		})
	}
}

// runLines runs lines through a new Engine made from cfg and returns the
// records in line order and the report.
func runLines(t *testing.T, cfg fetch.Config, lines ...string) ([]*results.Record, *report.Report) {
	t.Helper()
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &memWriter{}
	rep, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(strings.Join(lines, "\n"))}}, w)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.recs) != len(lines) {
		t.Fatalf("%d records for %d lines", len(w.recs), len(lines))
	}
	recs := make([]*results.Record, len(lines))
	for _, r := range w.recs {
		recs[r.Line-1] = r
	}
	return recs, rep
}

// TestHostileRetriesStayBounded: the tries of a record, each with a 5 MB
// status line, hold bounded messages too.
func TestHostileRetriesStayBounded(t *testing.T) {
	raw := startRaw(t, map[string]string{"/s": "HTTP/1.1 503 " + fiveMB + "\r\nContent-Length: 0\r\n\r\n"})
	cfg := fetch.DefaultConfig()
	cfg.MaxHeader = 8 << 20
	cfg.Retries = 2
	cfg.RetryBackoff = 0
	cfg.PushbackDelay = 0 // a 503 is pushback: no spacing of the retries
	recs, _ := runLines(t, cfg, raw.URL+"/s")
	r := recs[0]
	if r.Attempts != 3 || len(r.Tries) != 2 {
		t.Fatalf("attempts %d, tries %d; want 3 and 2", r.Attempts, len(r.Tries))
	}
	checkMessage(t, r.Error.Message, true)
	for _, try := range r.Tries {
		checkMessage(t, try.Error.Message, true)
	}
}

// TestHostileHeadersMemory: 64 URLs in flight at once, each answered with
// 10 MB of headers, cost memory near 64 times the per-attempt buffers (the
// headers read up to --max-header), not 64 times what the server sends.
func TestHostileHeadersMemory(t *testing.T) {
	raw := startRaw(t, map[string]string{"/h": tenMBHeaders})
	const urls = 64
	var lines []string
	for i := range urls {
		lines = append(lines, fmt.Sprintf("%s/h?i=%d", raw.URL, i))
	}
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = urls
	cfg.Retries = 0
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	recs, _ := runLines(t, cfg, lines...)
	runtime.ReadMemStats(&after)
	for _, r := range recs {
		if r.Error == nil || r.Error.Kind != results.KindTooLarge || r.Error.Phase != results.PhaseHeaders {
			t.Fatalf("record %+v error %+v, want too_large in headers", r, r.Error)
		}
	}
	// Reading headers up to 100 KiB costs a few times that in buffers
	// (the line grows by doubling, then is copied into the header map),
	// and each URL needs its connection, request and record: well under
	// 1 MiB per URL. The tolerance is 1 MiB per URL, 64 MiB in all;
	// reading the 10 MB headers whole would allocate over 640 MB.
	const most = urls << 20
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("allocated %d MiB for %d URLs", got>>20, urls)
	if got > most {
		t.Errorf("allocated %d MiB, want at most %d MiB", got>>20, most>>20)
	}
}

// TestNoBodyWithBody: a 204 that comes with a body anyway is an ok record
// of status 204 and 0 bytes. (net/http notes the stray bytes through the
// log package; the command line sends that output where -q says.)
func TestNoBodyWithBody(t *testing.T) {
	raw := startRaw(t, map[string]string{"/n": "HTTP/1.1 204 No Content\r\n\r\nstray bytes"})
	logged := &lockedBuffer{}
	prev := log.Writer()
	log.SetOutput(logged)
	t.Cleanup(func() { log.SetOutput(prev) })
	recs, _ := runLines(t, fetch.DefaultConfig(), raw.URL+"/n", raw.URL+"/n?again")
	for _, r := range recs {
		if !r.OK || r.Status != 204 || r.Bytes != 0 || r.Error != nil {
			t.Errorf("record %+v error %+v, want ok 204 of 0 bytes", r, r.Error)
		}
	}
	if s := logged.String(); s != "" {
		t.Logf("net/http logged: %.200q", s)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
