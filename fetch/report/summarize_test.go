package report_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
)

// sources makes a ResultsSource of each text, named r0.jsonl, r1.jsonl ...
func sources(texts ...string) []report.Source {
	var srcs []report.Source
	for i, text := range texts {
		srcs = append(srcs, report.Source{
			Name: fmt.Sprintf("r%d.jsonl", i),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(text)), nil },
		})
	}
	return srcs
}

// Records for the tests: line 1 of u.txt, in the states a line goes through.
const (
	cancelledRec   = `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":false,"status":0,"proxy":"http://127.0.0.1:8081","attempts":1,"phases":{"queue":0.1,"headers":900},"error":{"phase":"headers","kind":"cancelled","message":"interrupted"},"tries":[]}` + "\n"
	coordinatorRec = `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":false,"status":0,"proxy":"http://127.0.0.1:8081","attempts":1,"phases":{"queue":0.1,"headers":900},"error":{"phase":"headers","kind":"coordinator","message":"lease lost"},"tries":[]}` + "\n"
	hostBannedRec  = `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":false,"status":0,"proxy":"http://127.0.0.1:8081","attempts":1,"phases":{"queue":0.1,"headers":900},"error":{"phase":"queue","kind":"banned","message":"banned: a.example banned all 2 proxies"},"tries":[]}` + "\n"
	okRec          = `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":true,"status":200,"proxy":"http://127.0.0.1:8082","pool":"p","attempts":2,"phases":{"queue":0.2,"connect":1,"headers":20,"body":3},"error":null,"tries":[{"proxy":"http://127.0.0.1:8081","status":503,"phases":{"queue":0.1,"headers":10},"error":{"phase":"headers","kind":"status","message":"503 Service Unavailable"}}]}` + "\n"
	failedRec      = `{"url":"http://a.example/1","input":"u.txt","line":1,"ok":false,"status":0,"proxy":"http://127.0.0.1:8081","attempts":1,"phases":{"queue":0.1,"connect":2},"error":{"phase":"connect","kind":"refused","message":"connection refused"},"tries":[]}` + "\n"
	line2Rec       = `{"url":"https://b.example/2","input":"u.txt","line":2,"ok":true,"status":404,"proxy":"http://127.0.0.1:8081","attempts":1,"phases":{"headers":5},"error":null,"tries":[]}` + "\n"
	invalidRec     = `{"url":"nope","input":"u.txt","line":3,"ok":false,"status":0,"attempts":0,"phases":{},"error":{"phase":"input","kind":"invalid","message":"not an absolute URL"},"tries":[]}` + "\n"
)

// TestSummarize_finalRecord: each line counts once, by its last record that
// ends it (not cancelled, coordinator or banned in phase queue), else its
// last that is not cancelled, else its last; files add up as one run.
func TestSummarize_finalRecord(t *testing.T) {
	tests := []struct {
		name               string
		files              []string
		jobs, ok, failed   int
		byKind             map[string]int
		attempts81, fail81 int // through http://127.0.0.1:8081
		attempts82         int
		hostA, hostAFailed int // a.example:80
		records            int
	}{
		{"cancelled then ok", []string{cancelledRec + okRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 2},
		{"ok then cancelled", []string{okRec + cancelledRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 2},
		{"only cancelled: the last", []string{cancelledRec + cancelledRec}, 1, 0, 1, map[string]int{"cancelled": 1}, 1, 1, 0, 1, 1, 2},
		{"failed then ok: the later", []string{failedRec + okRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 2},
		{"ok then failed: the later", []string{okRec + failedRec}, 1, 0, 1, map[string]int{"refused": 1}, 1, 1, 0, 1, 1, 2},
		{"shards in two files", []string{cancelledRec + line2Rec, invalidRec + okRec}, 3, 2, 1, map[string]int{"invalid": 1}, 2, 1, 1, 2, 1, 4},
		{"resumed across files", []string{cancelledRec, okRec, cancelledRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 3},
		// Two workers of a queue: one took the line over from the other,
		// whose lease was lost; the order of the files must not decide.
		{"ok, then coordinator in another file", []string{okRec, coordinatorRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 2},
		{"ok, then a host's ban in phase queue", []string{okRec, hostBannedRec}, 1, 1, 0, map[string]int{}, 1, 1, 1, 2, 1, 2},
		{"coordinator, then cancelled: the coordinator", []string{coordinatorRec, cancelledRec}, 1, 0, 1, map[string]int{"coordinator": 1}, 1, 1, 0, 1, 1, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sum, err := report.Summarize(context.Background(), sources(tt.files...))
			if err != nil {
				t.Fatal(err)
			}
			r := sum.Report
			if r.Jobs != tt.jobs || r.OK != tt.ok || r.Failed != tt.failed {
				t.Errorf("jobs/ok/failed = %d/%d/%d, want %d/%d/%d", r.Jobs, r.OK, r.Failed, tt.jobs, tt.ok, tt.failed)
			}
			if fmt.Sprint(r.ByKind) != fmt.Sprint(tt.byKind) {
				t.Errorf("by_kind = %v, want %v", r.ByKind, tt.byKind)
			}
			if sum.Records != tt.records {
				t.Errorf("Records = %d, want %d", sum.Records, tt.records)
			}
			p81 := r.Proxies["http://127.0.0.1:8081"]
			if p81 == nil || p81.Attempts != tt.attempts81 || p81.Failed != tt.fail81 {
				t.Errorf("proxy 8081 = %+v, want %d attempts, %d failed", p81, tt.attempts81, tt.fail81)
			}
			got82 := 0
			if p := r.Proxies["http://127.0.0.1:8082"]; p != nil {
				got82 = p.Attempts
				if p.Pool != "p" || p.OK != p.Attempts || p.MaxInFlight != 0 {
					t.Errorf("proxy 8082 = %+v, want pool p, every attempt ok, max_in_flight 0", p)
				}
				if q := p.PhasesMS["headers"]; q.P50 < 19.5 || q.P50 > 20.5 {
					t.Errorf("proxy 8082 headers p50 %v, want about 20", q.P50)
				}
			}
			if got82 != tt.attempts82 {
				t.Errorf("proxy 8082: %d attempts, want %d", got82, tt.attempts82)
			}
			h := r.Hosts["a.example:80"]
			if h == nil || h.Attempts != tt.hostA || h.Failed != tt.hostAFailed {
				t.Errorf("host a.example:80 = %+v, want %d attempts, %d failed", h, tt.hostA, tt.hostAFailed)
			}
			if r.ElapsedMS != 0 || r.Interrupted {
				t.Errorf("elapsed %v, interrupted %v: records do not say", r.ElapsedMS, r.Interrupted)
			}
		})
	}
}

func TestSummarize_tornAndNotResults(t *testing.T) {
	sum, err := report.Summarize(context.Background(), sources(okRec+line2Rec[:40], line2Rec))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Report.Jobs != 2 || sum.Records != 2 || fmt.Sprint(sum.Torn) != "[r0.jsonl]" {
		t.Errorf("jobs %d, records %d, torn %v; want 2, 2, [r0.jsonl]", sum.Report.Jobs, sum.Records, sum.Torn)
	}

	for _, text := range []string{"hello\n", okRec + "[1,2]\n", `{"url":"x"}` + "\n", okRec[:50] + "\n" + line2Rec} {
		_, err := report.Summarize(context.Background(), sources(okRec, text))
		if !errors.Is(err, results.ErrNotResults) {
			t.Errorf("%.30q: err = %v, want ErrNotResults", text, err)
		} else if !strings.HasPrefix(err.Error(), "fetch: r1.jsonl: line ") || strings.Contains(err.Error(), "hello") {
			t.Errorf("message %q: want the file and line, never its text", err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := report.Summarize(ctx, sources(okRec)); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: err = %v", err)
	}
}

// generated streams n records without holding them (a file of them would
// take about 330 bytes a record): every tenth one is cancelled, and in each
// block of 1000 the lines of 10 cancelled ones are taken again, ok, by
// records near the block's end, as a resumed run would.
type generated struct {
	n, i    int
	pending []byte
	peak    *uint64 // the most heap seen live while reading
}

// liveHeap is the heap found live by the last garbage collection: unlike
// HeapInuse, it leaves out the garbage not collected yet.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func (g *generated) Read(p []byte) (int, error) {
	for len(g.pending) == 0 {
		if g.i >= g.n {
			return 0, io.EOF
		}
		i := g.i
		g.i++
		if i%4096 == 0 && g.peak != nil {
			*g.peak = max(*g.peak, liveHeap())
		}
		line, ok := i, `"ok":true,"status":200,"error":null`
		if i%10 == 9 {
			ok = `"ok":false,"status":0,"error":{"phase":"headers","kind":"cancelled","message":"interrupted"}`
		} else if i%1000 >= 900 && i%10 == 0 {
			line = i - 900 + 9 // the retaken line of a cancelled one
		}
		g.pending = fmt.Appendf(g.pending[:0], `{"url":"https://site-%d.example.com/products/item/%d?ref=feed","input":"urls.txt","line":%d,%s,"proxy":"http://127.0.0.1:%d","attempts":1,"bytes":18324,"elapsed_ms":532.1,"phases":{"queue":1.2,"connect":1.1,"proxy":0.5,"headers":50.3,"body":3.4},"tries":[]}`+"\n",
			line%977, line, line+1, ok, 8000+line%50)
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

// TestSummarize_memory streams a million records (fewer with -race) through Summarize: the
// heap grows by its 16 bytes per line (a few times that for a moment, as
// the first pass makes room), never with the bytes read.
func TestSummarize_memory(t *testing.T) {
	n := memoryRecords
	if testing.Short() {
		n = 100_000
	}
	// The live heap is known only as of the last collection. A pass that
	// allocates little may see none when the heap left by the package's
	// other tests is large, and its growth then reads as 0 (seen once,
	// running the whole package): collect often enough that every pass is
	// seen.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	// measure summarizes n generated records and returns how much the
	// live heap grew at most in each pass, and the lines counted.
	measure := func(n int) (grown1, grown2 float64, lines int) {
		runtime.GC()
		before := liveHeap()
		var peaks []*uint64 // of each pass
		src := report.Source{Name: "generated", Open: func() (io.ReadCloser, error) {
			peak := before
			peaks = append(peaks, &peak)
			return io.NopCloser(&generated{n: n, peak: &peak}), nil
		}}
		sum, err := report.Summarize(context.Background(), []report.Source{src})
		if err != nil {
			t.Fatal(err)
		}
		// In each block of 1000 records, 100 are cancelled and 10 of their
		// lines are retaken (ok) by 10 of the block's last 100 records.
		lines = n - n/100
		if r := sum.Report; sum.Records != n || r.Jobs != lines || r.Failed != 9*n/100 {
			t.Fatalf("records %d, jobs %d, failed %d; want %d, %d, %d", sum.Records, r.Jobs, r.Failed, n, lines, 9*n/100)
		}
		if len(peaks) != 2 {
			t.Fatalf("%d passes, want 2", len(peaks))
		}
		grown1 = float64(*peaks[0]) - float64(before)
		grown2 = float64(*peaks[1]) - float64(before)
		t.Logf("%d records (~%d MB of results): live heap grew by at most %.1f MiB (%.1f bytes a line) in the first pass, %.1f MiB (%.1f bytes a line) in the second",
			n, n*330/1e6, grown1/(1<<20), grown1/float64(lines), grown2/(1<<20), grown2/float64(lines))
		return grown1, grown2, lines
	}
	a1, a2, la := measure(n / 2)
	b1, b2, lb := measure(n)
	if raceDetector {
		t.Log("under the race detector the figures above are the race runtime's: the bounds are checked without it (scripts/test.sh)")
		return
	}
	// What grows with the files: 16 bytes a line, three times that while
	// the first pass makes room. The slope between the two sizes leaves
	// out what does not grow (the rest of the process, the report's
	// bounded tables), which the race detector makes larger; a few MiB of
	// slack cover where in a garbage collection's cycle each peak fell.
	dl := float64(lb - la)
	const slack = 4 << 20
	if slope := (b1 - a1 - slack) / dl; slope > 48 {
		t.Errorf("first pass: the heap grows by %.1f bytes a line, want at most 48", slope)
	}
	if slope := (b2 - a2 - slack) / dl; slope > 16 {
		t.Errorf("second pass: the heap grows by %.1f bytes a line, want at most 16", slope)
	}
	// And all in all it stays small.
	if limit := 48*float64(lb) + 16<<20; b1 > limit || b2 > limit {
		t.Errorf("the heap grew by %.0f and %.0f bytes, want at most %.0f", b1, b2, limit)
	}
}

// TestSummarize_bans: bans are counted per proxy and per host from the
// records' tries and final attempts, as a run counts them.
func TestSummarize_bans(t *testing.T) {
	banned := `{"url":"http://a.example/3","input":"u.txt","line":3,"ok":false,"status":403,"proxy":"http://127.0.0.1:8081","attempts":2,"phases":{"headers":5},"error":{"phase":"headers","kind":"banned","message":"403 Forbidden: banned (--ban-status)"},"tries":[{"proxy":"http://127.0.0.1:8081","status":403,"phases":{"headers":4},"error":{"phase":"headers","kind":"banned","message":"403 Forbidden: banned (--ban-status)"}}]}` + "\n"
	retried := `{"url":"http://a.example/4","input":"u.txt","line":4,"ok":true,"status":200,"proxy":"http://127.0.0.1:8082","attempts":2,"phases":{"headers":5},"error":null,"tries":[{"proxy":"http://127.0.0.1:8081","status":200,"phases":{"body":4},"error":{"phase":"body","kind":"banned","message":"200 OK: banned (--ban-match in the body)"}}]}` + "\n"
	sum, err := report.Summarize(context.Background(), sources(banned+retried))
	if err != nil {
		t.Fatal(err)
	}
	r := sum.Report
	if p := r.Proxies["http://127.0.0.1:8081"]; p == nil || p.Banned != 3 || p.Attempts != 3 {
		t.Errorf("proxy 8081 = %+v, want 3 attempts, 3 banned", p)
	}
	if p := r.Proxies["http://127.0.0.1:8082"]; p == nil || p.Banned != 0 || p.OK != 1 {
		t.Errorf("proxy 8082 = %+v, want 1 ok, none banned", p)
	}
	if h := r.Hosts["a.example:80"]; h == nil || h.Banned != 3 || h.Attempts != 4 {
		t.Errorf("host = %+v, want 4 attempts, 3 banned", h)
	}
	if r.ByKind["banned"] != 1 {
		t.Errorf("by_kind %v", r.ByKind)
	}
}

// TestSummarize_proxiesListed: records through more proxies than the report
// lists: the busiest are listed, each with its true attempts within
// [attempts, attempts+missed]; the others are summed up in proxies_other,
// by pool too; listed and other add up to every attempt and ban.
func TestSummarize_proxiesListed(t *testing.T) {
	// Record i goes through proxy i%7 when i%2 == 0 (seven busy ones),
	// else through one of 300 rarely used ones; proxy k is in pool "a"
	// when k is even, else in pool "b". Every fifth record is a ban.
	type count struct{ attempts, banned int }
	truth := map[string]*count{}
	pools := map[string]*report.Counts{}
	var text strings.Builder
	const n = 3000
	for i := range n {
		k := 7 + (i*37)%300
		if i%2 == 0 {
			k = i % 7
		}
		proxy, pool := fmt.Sprintf("http://127.0.0.1:%d", 9000+k), []string{"a", "b"}[k%2]
		rec := `"ok":true,"status":200,"error":null`
		banned := i%5 == 0
		if banned {
			rec = `"ok":false,"status":403,"error":{"phase":"headers","kind":"banned","message":"403 Forbidden: banned (--ban-status)"}`
		}
		fmt.Fprintf(&text, `{"url":"http://h.example/%d","input":"u.txt","line":%d,%s,"proxy":%q,"pool":%q,"attempts":1,"phases":{"headers":5},"tries":[]}`+"\n",
			i, i+1, rec, proxy, pool)
		c := truth[proxy]
		if c == nil {
			c = &count{}
			truth[proxy] = c
		}
		c.attempts++
		if pools[pool] == nil {
			pools[pool] = &report.Counts{}
		}
		if banned {
			c.banned++
			pools[pool].Attempts++
			pools[pool].Failed++
			pools[pool].Banned++
		} else {
			pools[pool].Attempts++
			pools[pool].OK++
		}
	}
	const listed = 20
	sum, err := report.SummarizeTop(context.Background(), sources(text.String()), report.DefaultHosts, listed)
	if err != nil {
		t.Fatal(err)
	}
	r := sum.Report
	if len(r.Proxies) != listed {
		t.Fatalf("%d proxies listed, want %d", len(r.Proxies), listed)
	}
	total := map[string]*report.Counts{"a": {}, "b": {}}
	attempts := 0
	for id, p := range r.Proxies {
		attempts += p.Attempts
		c := truth[id]
		if p.Attempts > c.attempts || c.attempts > p.Attempts+p.Missed {
			t.Errorf("%s: true attempts %d outside [%d, %d+%d]", id, c.attempts, p.Attempts, p.Attempts, p.Missed)
		}
		if p.PhasesMS["headers"].P50 == 0 {
			t.Errorf("%s: no headers phase: %v", id, p.PhasesMS)
		}
		total[p.Pool].Attempts += p.Attempts
		total[p.Pool].OK += p.OK
		total[p.Pool].Failed += p.Failed
		total[p.Pool].Banned += p.Banned
	}
	for k := range 7 { // each has 1/14 of the attempts, above T/listed
		if id := fmt.Sprintf("http://127.0.0.1:%d", 9000+k); r.Proxies[id] == nil {
			t.Errorf("busy proxy %s not listed", id)
		}
	}
	o := r.ProxiesOther
	if o == nil {
		t.Fatal("no proxies_other")
	}
	if want := len(truth) - listed; o.Proxies != want { // exact: fewer than exactLimit proxies
		t.Errorf("proxies_other.proxies = %d, want %d", o.Proxies, want)
	}
	for pool, c := range o.Pools {
		total[pool].Attempts += c.Attempts
		total[pool].OK += c.OK
		total[pool].Failed += c.Failed
		total[pool].Banned += c.Banned
	}
	for _, pool := range []string{"a", "b"} {
		if *total[pool] != *pools[pool] {
			t.Errorf("pool %s: listed and other add up to %+v, want %+v", pool, *total[pool], *pools[pool])
		}
	}
	if attempts+o.Attempts != n {
		t.Errorf("listed %d and other %d attempts, want %d in all", attempts, o.Attempts, n)
	}

	// A report that lists them all has them all, exact, and no other.
	sum, err = report.SummarizeTop(context.Background(), sources(text.String()), report.DefaultHosts, len(truth))
	if err != nil {
		t.Fatal(err)
	}
	if r := sum.Report; len(r.Proxies) != len(truth) || r.ProxiesOther != nil {
		t.Fatalf("%d proxies listed, other %+v; want %d and none", len(r.Proxies), r.ProxiesOther, len(truth))
	}
	for id, p := range sum.Report.Proxies {
		if c := truth[id]; p.Attempts != c.attempts || p.Banned != c.banned || p.Missed != 0 {
			t.Errorf("%s = %+v, want %d attempts, %d banned, exact", id, *p, c.attempts, c.banned)
		}
	}
}
