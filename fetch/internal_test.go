package fetch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFullJitter: the n-th back-off is uniform in [0, base·2^(n-1)]: never
// above it, and spread over it (1000 draws all under half the ceiling
// would happen with probability 2^-1000).
func TestFullJitter(t *testing.T) {
	base := 100 * time.Millisecond
	for n := 1; n <= 4; n++ {
		ceil := base << (n - 1)
		var hi time.Duration
		for range 1000 {
			d := fullJitter(base, n)
			if d < 0 || d > ceil {
				t.Fatalf("n=%d: back-off %s outside [0, %s]", n, d, ceil)
			}
			hi = max(hi, d)
		}
		if hi < ceil/2 {
			t.Errorf("n=%d: 1000 back-offs all under %s: not doubling with full jitter up to %s", n, ceil/2, ceil)
		}
	}
	if d := fullJitter(0, 3); d != 0 {
		t.Errorf("no back-off configured: %s", d)
	}
}

// TestPhaseBinsQuantiles checks p50 and p95 against exact ones, within
// the 2% buckets, for a phase whose bins are in place and one whose are not.
func TestPhaseBinsQuantiles(t *testing.T) {
	var pb phaseBins
	pb.add(pQueue, 0)
	pb.add(pQueue, 0)
	if pb.hist != nil {
		t.Fatal("two zeros: bins not in place")
	}
	for i := 1; i <= 1000; i++ {
		pb.add(pHeaders, float64(i)) // 1..1000 ms
	}
	q := pb.quantiles()
	if len(q) != 2 || q["queue"] != (Quantiles{}) {
		t.Fatalf("quantiles %v: want queue's zeros and headers", q)
	}
	bins := pb.bins()[1:] // the headers'
	for _, tc := range []struct {
		got, want float64
	}{{q["headers"].P50, 500}, {q["headers"].P95, 950}, {quantile(bins, 1000, 1), 1000}} {
		if math.Abs(tc.got-tc.want)/tc.want > 0.02 {
			t.Errorf("%.2f, want %.0f within 2%%", tc.got, tc.want)
		}
	}
}

// TestHistBucket: a value's bucket is how many times histBase fits
// between histFloor and it; below histFloor (zero among them) it is -1.
func TestHistBucket(t *testing.T) {
	for _, tc := range []struct {
		ms   float64
		want int32
	}{
		{0, -1},
		{histFloor * 0.999, -1},
		{histFloor, 0},
		{histFloor * 1.0199, 0},
		{histFloor * 1.0201, 1},
		{histFloor * math.Pow(histBase, 100) * 1.001, 100},
		{histFloor * math.Pow(histBase, 100) * 0.999, 99},
	} {
		if got := histBucket(tc.ms); got != tc.want {
			t.Errorf("histBucket(%g) = %d, want %d", tc.ms, got, tc.want)
		}
	}
}

// TestPhaseBins: durations added in any order, to any phase, keep one bin
// for each phase and bucket, in order of phase then bucket, each with its
// count: in place while they fit, and after; merged as if added.
func TestPhaseBins(t *testing.T) {
	type key struct {
		phase  uint8
		bucket int32
	}
	for _, n := range []int{1, fewBins, 20000} {
		rng := rand.New(rand.NewPCG(8, uint64(n)))
		var pb, half, rest phaseBins
		want := map[key]int64{}
		for i := range n {
			phase := rng.IntN(numPhases)
			ms := math.Exp(rng.Float64()*20-8) * float64(rng.IntN(2)) // zeros, and 0.0003 ms to 8 s
			if n == fewBins {
				phase, ms = i, 1 // six bins: all in place
			}
			pb.add(phase, ms)
			if i%2 == 0 {
				half.add(phase, ms)
			} else {
				rest.add(phase, ms)
			}
			want[key{uint8(phase), histBucket(ms)}]++
		}
		half.merge(&rest)
		for _, x := range []*phaseBins{&pb, &half} {
			bins := x.bins()
			if len(bins) != len(want) || (x.hist == nil) != (len(want) <= fewBins) {
				t.Fatalf("%d durations: %d bins (in place: %v), want %d", n, len(bins), x.hist == nil, len(want))
			}
			for i, bin := range bins {
				if i > 0 && cmpBin(bins[i-1], bin) >= 0 {
					t.Fatalf("%d durations: bins %d and %d out of order: %+v, %+v", n, i-1, i, bins[i-1], bin)
				}
				if k := (key{bin.phase, bin.bucket}); bin.count != want[k] {
					t.Errorf("%d durations: %+v: %d, want %d", n, k, bin.count, want[k])
				}
			}
		}
	}
}

// recordingWriter keeps each write made to it.
type recordingWriter struct{ writes [][]byte }

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

// TestJSONLWriterWholeLines: every write that reaches the file ends at a
// line end, even when a record does not fit in what is left of the buffer
// or is larger than the buffer.
func TestJSONLWriterWholeLines(t *testing.T) {
	rw := &recordingWriter{}
	w := NewJSONLWriter(rw)
	for i := range 300 {
		size := 300 + i*7
		if i%50 == 49 {
			size = 100 << 10 // larger than the 64 KiB buffer
		}
		if err := w.Write(&Record{URL: "http://a/" + strings.Repeat("x", size), Line: i + 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := 0
	for i, b := range rw.writes {
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("write %d of %d bytes does not end a line", i, len(b))
		}
		lines += bytes.Count(b, []byte("\n"))
	}
	if lines != 300 {
		t.Errorf("%d lines written, want 300", lines)
	}
}

// phaseTimes are the phases of m, whose keys must be phases.
func phaseTimes(m map[string]float64) PhaseTimes {
	var p PhaseTimes
	for k, ms := range m {
		if !p.Set(k, ms) {
			panic("not a phase: " + k)
		}
	}
	return p
}

// TestPhaseTimes: phases are set and got by name, written as JSON in the
// order the work passes through them, and read back as they were; a key
// that is not a phase is neither set nor read.
func TestPhaseTimes(t *testing.T) {
	var p PhaseTimes
	for _, k := range []string{"body", "queue", "tls", "connect", "headers"} {
		if !p.Set(k, map[string]float64{"body": 3.4, "queue": 0, "tls": 10.25, "connect": 1, "headers": 50.3}[k]) {
			t.Fatalf("Set(%q) refused", k)
		}
	}
	if p.Set("x-other", 2) || p.Set("", 2) {
		t.Error("Set took a key that is not a phase")
	}
	if ms, ok := p.Get("tls"); !ok || ms != 10.25 {
		t.Errorf("Get(tls) = %v, %v", ms, ok)
	}
	if ms, ok := p.Get("queue"); !ok || ms != 0 {
		t.Errorf("Get(queue) = %v, %v: a phase of 0 ms happened", ms, ok)
	}
	for _, k := range []string{"dns", "proxy", "x-other"} {
		if _, ok := p.Get(k); ok {
			t.Errorf("Get(%q) found a phase that did not happen", k)
		}
	}
	var order []string
	for k := range p.All() {
		order = append(order, k)
	}
	if got := strings.Join(order, " "); got != "queue connect tls headers body" {
		t.Errorf("All in the order %s", got)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"queue":0,"connect":1,"tls":10.25,"headers":50.3,"body":3.4}`
	if string(b) != want || p.String() != want {
		t.Errorf("got %s and %s, want %s", b, p.String(), want)
	}
	var back PhaseTimes
	back.Set("dns", 9) // cleared by the read
	if err := json.Unmarshal([]byte(`{"body":3.4,"x-other":2,"queue":0,"tls":10.25,"connect":1,"headers":50.3}`), &back); err != nil || back != p {
		t.Errorf("read back %v, %v; want %v", back, err, p)
	}
	if err := json.Unmarshal([]byte(`null`), &back); err != nil || back != p {
		t.Errorf("null changed the phases to %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"tls":"x"}`), &back); err == nil {
		t.Error("a phase that is not a number was read")
	}
	if b, _ := json.Marshal(PhaseTimes{}); string(b) != "{}" {
		t.Errorf("no phases: %s", b)
	}
}

// FuzzPhaseTimesJSON holds UnmarshalJSON, whose common case skips
// encoding/json's map, to what reading the same JSON into a map and
// setting its phases gives.
func FuzzPhaseTimesJSON(f *testing.F) {
	for _, s := range []string{
		`{"queue":0,"connect":0.05,"request":0.02,"headers":7.2,"body":0.04}`, `{}`, `null`, ` { } `,
		`{"x-other":2,"tls":1e3,"tls":-2.5E-3}`, `{ "dns" : 1 , "body":2 }`, `{"d\u006es":1}`, `{"dns":"1"}`,
		`{"dns":null}`, `{"dns":+1}`, `{"dns":1,}`, `{"dns":1}x`, `{"dns":01}`, `[1]`, `{"x":{"a":1}}`, `{"dns":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got PhaseTimes
		err := json.Unmarshal(b, &got)
		var m map[string]float64
		werr := json.Unmarshal(b, &m)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, err, werr)
		}
		if err != nil {
			return
		}
		var want PhaseTimes
		for k, v := range m {
			want.Set(k, v)
		}
		if got != want {
			t.Fatalf("%q: read %v, encoding/json's %v", b, got, want)
		}
	})
}

// BenchmarkReadInput measures reading, parsing and handing over URL lines:
// one op is one line (a URL, with a comment or blank line every tenth).
func BenchmarkReadInput(b *testing.B) {
	benchReadInput(b, readInputData(), nil)
}

// BenchmarkReadInputResumed reads the lines of BenchmarkReadInput when
// all of them are done (--resume): one op is one line, skipped without
// allocating.
func BenchmarkReadInputResumed(b *testing.B) {
	data := readInputData()
	done := allDone(b, data)
	benchReadInput(b, data, done)
}

// benchReadInput reads data, 1,000 lines, as the input urls.txt, b.N/1000
// times, with done, which is nil or holds every URL line: all come out
// as jobs, or all are skipped.
func benchReadInput(b *testing.B, data []byte, done *DoneSet) {
	jobs := newJobQueue(1024)
	var skipped atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	for range (b.N + 999) / 1000 {
		skipped.Store(0)
		if err := readInput(context.Background(), Input{Name: "urls.txt", R: bytes.NewReader(data)}, Shard{}, done, &skipped, jobs); err != nil {
			b.Fatal(err)
		}
		want := 800 // the URL lines
		if done != nil {
			want = 0
		}
		if len(jobs.jobs) != want || len(jobs.jobs)+int(skipped.Load()) != 800 {
			b.Fatalf("%d jobs and %d lines skipped, want %d jobs of 800 URLs", len(jobs.jobs), skipped.Load(), want)
		}
		for len(jobs.jobs) > 0 {
			<-jobs.jobs
		}
	}
}

// TestReadInputResumedAllocs: with every URL line done, --resume skips a
// line written as its record shows it without parsing it: reading 1,000
// lines allocates what a read of any input does (its buffer), not an
// object per line, which over millions of lines held the heap at its
// largest (issue 12's memory goal).
func TestReadInputResumedAllocs(t *testing.T) {
	data := readInputData()
	done := allDone(t, data)
	jobs := newJobQueue(1024)
	var skipped atomic.Int64
	allocs := testing.AllocsPerRun(5, func() {
		if err := readInput(context.Background(), Input{Name: "urls.txt", R: bytes.NewReader(data)}, Shard{}, done, &skipped, jobs); err != nil {
			t.Fatal(err)
		}
	})
	if len(jobs.jobs) != 0 || skipped.Load() != 6*800 {
		t.Fatalf("%d jobs, %d lines skipped in 6 reads, want none and %d", len(jobs.jobs), skipped.Load(), 6*800)
	}
	if allocs > 10 {
		t.Errorf("%.0f allocations to read 1,000 done lines, want at most 10 (none a line)", allocs)
	}
}

// allDone is the done set of a run that recorded every URL line of data,
// the input urls.txt, as fetch shows it.
func allDone(tb testing.TB, data []byte) *DoneSet {
	tb.Helper()
	var results bytes.Buffer
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(line) > 0 && line[0] == 'h' {
			fmt.Fprintf(&results, "{\"url\":%q,\"input\":\"urls.txt\",\"line\":%d,\"ok\":true,\"error\":null}\n", line, i+1)
		}
	}
	done, err := LoadDone(&results)
	if err != nil {
		tb.Fatal(err)
	}
	return done
}

// readInputData is 1,000 lines: URLs, a comment and a blank line in ten.
func readInputData() []byte {
	var in bytes.Buffer
	for i := range 1000 {
		switch i % 10 {
		case 8:
			in.WriteString("# a comment\n")
		case 9:
			in.WriteString("\r\n")
		default:
			fmt.Fprintf(&in, "https://site-%d.example.com/products/item/%d?ref=feed&page=%d\n", i%97, i, i%50)
		}
	}
	return in.Bytes()
}

// BenchmarkTracker measures tracing one attempt through its phases on a
// fresh connection, with every per-phase timer armed: one op is one
// attempt.
func BenchmarkTracker(b *testing.B) {
	cfg := DefaultConfig()
	tr := newTracker(&cfg, context.Background()) // a worker's, for all its attempts
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		now := time.Now()
		gen := tr.begin(ctx, cancel, now, now.Add(time.Minute))
		ct, dt := &tr.trace, tr.dialTrace(gen)
		tr.set(pConnect)
		ct.GetConn("a.example:80")
		dt.ConnectStart("tcp", "127.0.0.1:80")
		dt.ConnectDone("tcp", "127.0.0.1:80", nil)
		ct.GotConn(httptrace.GotConnInfo{})
		ct.WroteRequest(httptrace.WroteRequestInfo{})
		tr.gotHeaders()
		tr.progress()
		tr.finish()
		cancel()
	}
}

// TestPlainURLShownAsWritten: a line plainURL passes is shown in its
// record as it is written, so that --resume may look it up by its text;
// and the lines that are shown otherwise do not pass. Random lines from
// the characters URLs are made of, with a fixed seed, and a table of the
// ways a line may differ from its shown form.
func TestPlainURLShownAsWritten(t *testing.T) {
	shown := func(s string) string {
		return parseLine("urls", 1, rawLine{kept: []byte(s)}, false, firstNonSpace([]byte(s))).shown
	}
	for _, s := range []string{
		"HTTP://h/x", "Http://h/x", "http://user@h/x", "http://u:p@h/x", "http://h/a b", "http://h/#",
		"http://h/a#f", `http://h/a"b`, "http://h/é", "http://h/a{b}", "http://h/a|b", `http://h/a\b`,
		"http://h/a^b", "http://h/a`b", "http://h/a<b>", "http://h/a[1]", "http://[::1]/", "ftp://h/x", "h/x",
		"http://h/\x7f", "http://h/\t", "http://h%41/", "http://0%a9/",
	} {
		if plainURL([]byte(s)) {
			t.Errorf("plainURL(%q) is true; the line is shown as %q", s, shown(s))
		}
	}
	for _, s := range []string{
		"http://h/x", "https://Example.COM:8443/a/./b/../c?q=1&r=%zz;s,t+u", "http://h", "http://h?", "http://h/%41%2F",
		"http://h:99999/", "http:///x", "http://h:/", "http://h/a!$'()*~", "http://h/%a9",
	} {
		if !plainURL([]byte(s)) {
			t.Errorf("plainURL(%q) is false", s)
		}
	}
	const chars = "aZ09-._~:/?&=%+,;!$'()*@# \"[]{}|\\^`<>é\x7f"
	rng := rand.New(rand.NewPCG(1, 2))
	passed := 0
	for range 200000 {
		b := []byte("http://")
		if rng.IntN(2) == 0 {
			b = []byte("https://")
		}
		for range rng.IntN(12) {
			c := chars[rng.IntN(len(chars))]
			if c == '%' && rng.IntN(2) == 0 { // a valid escape, often
				b = append(b, fmt.Sprintf("%%%02X", rng.IntN(256))...)
				continue
			}
			b = append(b, c)
		}
		if !plainURL(b) {
			continue
		}
		passed++
		if s := string(b); shown(s) != s {
			t.Errorf("plainURL(%q) is true, but the line is shown as %q", s, shown(s))
		}
	}
	if passed < 10000 {
		t.Errorf("only %d random lines passed plainURL: the test looks at too few", passed)
	}
}
