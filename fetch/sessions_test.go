package fetch_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// perKey counts requests in flight at a handler by a key of the request.
type perKey struct {
	mu       sync.Mutex
	inFlight map[string]int
	most     map[string]int
	total    map[string]int
}

func newPerKey() *perKey {
	return &perKey{inFlight: map[string]int{}, most: map[string]int{}, total: map[string]int{}}
}

func (c *perKey) enter(k string) func() {
	c.mu.Lock()
	c.inFlight[k]++
	c.total[k]++
	c.most[k] = max(c.most[k], c.inFlight[k])
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.inFlight[k]--
		c.mu.Unlock()
	}
}

// startServer starts an HTTP server on loopback with h, closed when t ends.
func startServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

func loadProxies(t *testing.T, list string) []proxies.Proxy {
	t.Helper()
	ps, err := proxies.Parse("list.txt", strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestSessionsAreIdentities: 1,000 sessions of one line on one tinyproxy are
// 1,000 proxies: each carries attempts under its own identity, within its
// own concurrency limit, counted at the target by the credentials
// tinyproxy passes on.
func TestSessionsAreIdentities(t *testing.T) {
	tp, err := fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.Close)
	seen := newPerKey()
	target := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		defer seen.enter(r.Header.Get("Proxy-Authorization"))()
		time.Sleep(5 * time.Millisecond) // long enough for attempts to overlap
		io.WriteString(w, "ok")
	})
	const sessions, urls = 1000, 3000
	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 128
	cfg.ProxyConcurrency = 1
	// rotate=request: tinyproxy serves at most 512 connections, and 1,000
	// sessions would each keep one alive.
	cfg.Proxies = loadProxies(t, strings.Replace(tp.URL, "://", "://cust-{session}:pw@", 1)+fmt.Sprintf(" sessions=%d session-prefix=s rotate=request\n", sessions))
	var lines []string
	for i := range urls {
		lines = append(lines, fmt.Sprintf("%s/%d", target.URL, i))
	}
	recs, rep := run(t, cfg, lines...)
	ids := map[string]int{}
	for line, r := range recs {
		if !r.OK {
			t.Fatalf("line %d: %+v", line, r.Error)
		}
		ids[r.Proxy]++
	}
	if len(ids) != sessions || len(rep.Proxies) != sessions {
		t.Errorf("%d identities in records, %d in the report, want %d", len(ids), len(rep.Proxies), sessions)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.total) != sessions {
		t.Errorf("the target saw %d sets of credentials, want %d", len(seen.total), sessions)
	}
	for cred, most := range seen.most {
		if most > 1 {
			t.Errorf("credentials %s: %d in flight at once, over the limit of 1", cred, most)
		}
	}
	for id, p := range rep.Proxies {
		if p.MaxInFlight > 1 {
			t.Errorf("proxy %s: max_in_flight %d, over its limit of 1", id, p.MaxInFlight)
		}
	}
}

// connCounter is a TCP forwarder in front of a proxy that counts the
// connections made to it.
type connCounter struct {
	ln    net.Listener
	conns atomic.Int64
	wg    sync.WaitGroup
}

func startConnCounter(t *testing.T, to string) *connCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &connCounter{ln: ln}
	var open sync.Map
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns.Add(1)
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			open.Store(in, out)
			c.wg.Add(2)
			pipe := func(a, b net.Conn) {
				defer c.wg.Done()
				io.Copy(a, b)
				a.Close()
				b.Close()
			}
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		open.Range(func(k, v any) bool { k.(net.Conn).Close(); v.(net.Conn).Close(); return true })
		c.wg.Wait()
	})
	return c
}

// TestRotateRequest: rotate=request makes one TCP connection to the proxy
// per attempt (and one CONNECT per https attempt); keep-alive makes far
// fewer. Records name the proxy identity either way.
func TestRotateRequest(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	const urls = 40
	for _, tt := range []struct {
		name   string
		rotate string // the line's key, or "" for --proxy-rotate
		flag   proxies.Rotation
		fresh  bool
	}{
		{"rotate=request", " rotate=request", proxies.RotateNever, true},
		{"--proxy-rotate request", "", proxies.RotateRequest, true},
		{"default keeps alive", "", proxies.RotateNever, false},
		{"rotate=never over the flag", " rotate=never", proxies.RotateRequest, false},
	} {
		for _, target := range []*fetchtest.Target{plain, secure} {
			t.Run(tt.name+"/"+target.URL[:strings.Index(target.URL, ":")], func(t *testing.T) {
				px := startProxy(t, "http", fetchtest.ProxyOptions{})
				front := startConnCounter(t, px.Addr)
				cfg := fetch.DefaultConfig()
				cfg.Concurrency = 4
				cfg.RootCAs = secure.CertPool
				cfg.ProxyRotate = tt.flag
				cfg.Proxies = loadProxies(t, "http://u:pw@"+front.ln.Addr().String()+tt.rotate+"\n")
				var lines []string
				for i := range urls {
					lines = append(lines, fmt.Sprintf("%s/r%d?size=100", target.URL, i))
				}
				recs, _ := run(t, cfg, lines...)
				for line, r := range recs {
					if !r.OK || r.Proxy != cfg.Proxies[0].ID {
						t.Fatalf("line %d: ok %v proxy %s error %+v", line, r.OK, r.Proxy, r.Error)
					}
				}
				conns := front.conns.Load()
				st := px.Stats()
				t.Logf("%d attempts: %d connections to the proxy, %d CONNECTs", urls, conns, st.Connects)
				if tt.fresh {
					if conns != urls {
						t.Errorf("%d connections to the proxy for %d attempts, want one each", conns, urls)
					}
					if target == secure && st.Connects != urls {
						t.Errorf("%d CONNECTs for %d attempts, want one each", st.Connects, urls)
					}
				} else if conns > urls/3 {
					// c=4 needs 4; a dial that loses the race for an idle
					// connection makes one more now and then.
					t.Errorf("%d connections to the proxy for %d attempts with keep-alive, want at most %d", conns, urls, urls/3)
				}
			})
		}
	}
}

// banTarget answers 403 with a captcha page to requests from banned, and
// 200 to any other.
func banTarget(t *testing.T, banned string) *httptest.Server {
	return startServer(t, func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		switch {
		case host != banned:
			io.WriteString(w, "fine")
		case r.URL.Query().Get("ban") == "header":
			w.Header().Set("X-Block", "captcha")
			w.WriteHeader(http.StatusOK)
		case r.URL.Query().Get("ban") == "body":
			io.WriteString(w, strings.Repeat("x", 1000)+"please solve the captcha")
		default:
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "captcha")
		}
	})
}

// TestBanRetriesOnAnotherProxy: a target bans one of two proxies (told
// apart by their source address): every URL ends ok through the other, and
// none is recorded ok through the banned one, which the report counts.
func TestBanRetriesOnAnotherProxy(t *testing.T) {
	bad := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(20)})
	good := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(21)})
	target := banTarget(t, fetchtest.LoopbackIP(20))
	for _, tt := range []struct {
		name string
		set  func(*fetch.Config)
	}{
		{"--ban-status", func(c *fetch.Config) { c.BanStatus = []int{403} }},
		{"--ban-match", func(c *fetch.Config) { c.BanMatch = regexp.MustCompile("captcha") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = 8
			cfg.ProxyConcurrency = 8 // a retry always finds room on the good proxy
			cfg.RetryBackoff = time.Millisecond
			tt.set(&cfg)
			cfg.Proxies = []proxies.Proxy{proxyOf(t, bad.URL, nil), proxyOf(t, good.URL, nil)}
			badID, goodID := cfg.Proxies[0].ID, cfg.Proxies[1].ID
			var lines []string
			for i := range 60 {
				lines = append(lines, fmt.Sprintf("%s/b%d", target.URL, i))
			}
			recs, rep := run(t, cfg, lines...)
			for line, r := range recs {
				if !r.OK || r.Proxy != goodID {
					t.Errorf("line %d: ok %v through %s, error %+v; want ok through %s", line, r.OK, r.Proxy, r.Error, goodID)
				}
				for _, try := range r.Tries {
					if try.Proxy == badID && (try.Error == nil || try.Error.Kind != results.KindBanned) {
						t.Errorf("line %d: a try through the banned proxy: %+v", line, try)
					}
				}
			}
			if p := rep.Proxies[badID]; p.OK != 0 || p.Banned == 0 || p.Banned != p.Attempts {
				t.Errorf("banned proxy in the report: %+v", p)
			}
			if p := rep.Proxies[goodID]; p.Banned != 0 {
				t.Errorf("good proxy in the report: %+v", p)
			}
			h := rep.Hosts[strings.TrimPrefix(target.URL, "http://")]
			if h == nil || h.Banned != rep.Proxies[badID].Banned {
				t.Errorf("host in the report: %+v, want banned %d", h, rep.Proxies[badID].Banned)
			}
		})
	}
}

// TestBannedKind: with a single proxy that is banned, each URL fails with
// kind banned and is never ok: an attempt's ban in phase headers (status,
// headers) or body; then, the host having banned every proxy, its retry
// (or a URL that came after) in phase queue at once.
func TestBannedKind(t *testing.T) {
	bad := startProxy(t, "http", fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(22)})
	target := banTarget(t, fetchtest.LoopbackIP(22))
	for _, tt := range []struct {
		name, query, phase string
		set                func(*fetch.Config)
	}{
		{"status", "", "headers", func(c *fetch.Config) { c.BanStatus = []int{403} }},
		{"match in headers", "?ban=header", "headers", func(c *fetch.Config) { c.BanMatch = regexp.MustCompile("(?i)x-block: captcha") }},
		{"match in body", "?ban=body", "body", func(c *fetch.Config) { c.BanMatch = regexp.MustCompile("captcha") }},
		{"match past --ban-scan is no ban", "?ban=body", "", func(c *fetch.Config) { c.BanMatch = regexp.MustCompile("captcha"); c.BanScan = 1000 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Retries = 2
			cfg.RetryBackoff = time.Millisecond
			cfg.PushbackDelay = 5 * time.Millisecond // a ban slows the pair: keep the retries quick
			tt.set(&cfg)
			cfg.Proxies = []proxies.Proxy{proxyOf(t, bad.URL, nil)}
			recs, rep := run(t, cfg, target.URL+"/k"+tt.query, target.URL+"/l"+tt.query)
			seen := 0 // bans by an attempt
			for line, r := range recs {
				if tt.phase == "" {
					if !r.OK || r.Bytes != 1024 { // the start read for bans and the rest
						t.Errorf("line %d: %+v, want ok with the whole body", line, r.Error)
					}
					continue
				}
				if r.OK || r.Error == nil || r.Error.Kind != results.KindBanned || r.Attempts > 1 {
					t.Fatalf("line %d: ok %v attempts %d error %+v, want banned after at most 1 attempt", line, r.OK, r.Attempts, r.Error)
				}
				ban := r.Error
				if ban.Phase == results.PhaseQueue && len(r.Tries) > 0 {
					ban = r.Tries[len(r.Tries)-1].Error
				}
				if ban.Phase != results.PhaseQueue {
					seen++
					if ban.Kind != results.KindBanned || ban.Phase != tt.phase {
						t.Errorf("line %d: the attempt's error %+v, want banned in %s", line, ban, tt.phase)
					}
				}
			}
			if tt.phase != "" && seen == 0 {
				t.Error("no attempt was banned")
			}
			if tt.phase != "" && rep.ByKind[results.KindBanned] != 2 {
				t.Errorf("by_kind %v", rep.ByKind)
			}
		})
	}
}

// TestHostDown: a dead host among live ones, with --host-max-failures 5:
// about 5 attempts (plus those in flight) reach for it, its other URLs are
// skipped at once, and the live hosts are untouched. Directly (connection
// refused) and through a proxy (CONNECT answered 502).
func TestHostDown(t *testing.T) {
	live := startTarget(t, fetchtest.TargetOptions{TLS: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String() // nothing listens there once closed
	ln.Close()
	const c, maxFail, deadURLs = 4, 5, 40
	for _, via := range []string{"direct", "proxy"} {
		t.Run(via, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Concurrency = c
			cfg.ProxyConcurrency = c
			cfg.HostMaxFailures = maxFail
			cfg.RetryBackoff = time.Millisecond
			cfg.RootCAs = live.CertPool
			if via == "proxy" {
				px := startProxy(t, "http", fetchtest.ProxyOptions{})
				cfg.Proxies = []proxies.Proxy{proxyOf(t, px.URL, nil)}
			}
			var lines []string
			for i := range deadURLs {
				lines = append(lines, fmt.Sprintf("%s/d%d", dead, i), fmt.Sprintf("%s/a%d", live.URL, i))
			}
			recs, rep := run(t, cfg, lines...)
			attempts, skipped := 0, 0
			for line, r := range recs {
				if strings.HasPrefix(r.URL, live.URL) {
					if !r.OK {
						t.Errorf("line %d, a live host: %+v", line, r.Error)
					}
					continue
				}
				attempts += r.Attempts
				switch {
				case r.OK || r.Error == nil:
					t.Errorf("line %d, the dead host: ok", line)
				case r.Error.Kind == results.KindSkipped:
					skipped++
					if r.Error.Phase != results.PhaseQueue || !strings.Contains(r.Error.Message, fmt.Sprintf("attempts in a row to %s failed before any response (--host-max-failures %d)", strings.TrimPrefix(dead, "https://"), maxFail)) {
						t.Errorf("line %d: %+v", line, r.Error)
					}
				}
			}
			t.Logf("%s: %d attempts to the dead host, %d of its %d URLs skipped", via, attempts, skipped, deadURLs)
			if attempts > maxFail+c {
				t.Errorf("%d attempts to the dead host, want at most %d (+%d in flight)", attempts, maxFail, c)
			}
			if skipped < deadURLs-maxFail-c {
				t.Errorf("%d of %d URLs of the dead host skipped", skipped, deadURLs)
			}
			if rep.ByKind[results.KindSkipped] != skipped {
				t.Errorf("by_kind %v", rep.ByKind)
			}
			for id, p := range rep.Proxies {
				if p.State != "" {
					t.Errorf("proxy %s benched for the target's failures: %+v", id, p.Health)
				}
			}
		})
	}
}

// TestSessionsStartUp measures what an engine for one line with
// sessions=100000 costs to build and to start a run with: it must stay
// small.
func TestSessionsStartUp(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory")
	}
	target := startTarget(t, fetchtest.TargetOptions{})
	px := startProxy(t, "http", fetchtest.ProxyOptions{})
	runtime.GC()
	var before, built, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	cfg := fetch.DefaultConfig()
	cfg.Proxies = loadProxies(t, strings.Replace(px.URL, "://", "://cust-{session}:pw@", 1)+" sessions=100000\n")
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tookNew := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&built)
	start = time.Now()
	w := &statsWriter{stats: &after} // measures while the run is under way
	if _, err := e.Run(context.Background(), []input.Source{{Name: "u", R: strings.NewReader(target.URL + "/one")}}, w); err != nil {
		t.Fatal(err)
	}
	tookRun := time.Since(start)
	if w.rec == nil || !w.rec.OK {
		t.Fatalf("record %+v", w.rec)
	}
	mb := func(a, b runtime.MemStats) float64 { return float64(int64(b.HeapAlloc)-int64(a.HeapAlloc)) / 1e6 }
	t.Logf("sessions=100000: parse+New %v, %.1f MB held; a run of one URL %v, %.1f MB more held during it",
		tookNew.Round(time.Millisecond), mb(before, built), tookRun.Round(time.Millisecond), mb(built, after))
	if mb(before, built) > 128 {
		t.Errorf("%.1f MB held by an engine of 100000 sessions, want under 128", mb(before, built))
	}
	runtime.KeepAlive(e)
}

// statsWriter keeps the record and the memory in use when it came.
type statsWriter struct {
	rec   *results.Record
	stats *runtime.MemStats
}

func (w *statsWriter) Write(r *results.Record) error {
	w.rec = r
	runtime.GC()
	runtime.ReadMemStats(w.stats)
	return nil
}
