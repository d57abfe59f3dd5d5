package fetch

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptrace"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
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
	pb.add(results.IndexQueue, 0)
	pb.add(results.IndexQueue, 0)
	if pb.hist != nil {
		t.Fatal("two zeros: bins not in place")
	}
	for i := 1; i <= 1000; i++ {
		pb.add(results.IndexHeaders, float64(i)) // 1..1000 ms
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
			phase := rng.IntN(results.NumPhases)
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

// phaseTimes are the phases of m, whose keys must be phases.
func phaseTimes(m map[string]float64) results.PhaseTimes {
	var p results.PhaseTimes
	for k, ms := range m {
		if !p.Set(k, ms) {
			panic("not a phase: " + k)
		}
	}
	return p
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
func benchReadInput(b *testing.B, data []byte, done *results.DoneSet) {
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
func allDone(tb testing.TB, data []byte) *results.DoneSet {
	tb.Helper()
	var recs bytes.Buffer
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(line) > 0 && line[0] == 'h' {
			fmt.Fprintf(&recs, "{\"url\":%q,\"input\":\"urls.txt\",\"line\":%d,\"ok\":true,\"error\":null}\n", line, i+1)
		}
	}
	done, err := results.LoadDone(&recs)
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
		tr.set(results.IndexConnect)
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
