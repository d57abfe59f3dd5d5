package input

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
)

// BenchmarkReadInput measures reading and parsing URL lines: one op is
// one line (a URL, with a comment or blank line every tenth).
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
// times, with done, which is nil or holds every URL line: all are parsed
// for work, or all are skipped.
func benchReadInput(b *testing.B, data []byte, done *results.DoneSet) {
	b.ReportAllocs()
	b.ResetTimer()
	for range (b.N + 999) / 1000 {
		taken, skipped := 0, 0
		s := NewScanner(Source{Name: "urls.txt", R: bytes.NewReader(data)}, Shard{}, done)
		for s.Scan() {
			if s.Done() {
				skipped++
				continue
			}
			s.Line()
			taken++
		}
		if err := s.Err(); err != nil {
			b.Fatal(err)
		}
		want := 800 // the URL lines
		if done != nil {
			want = 0
		}
		if taken != want || taken+skipped != 800 {
			b.Fatalf("%d lines taken and %d skipped, want %d taken of 800 URLs", taken, skipped, want)
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
	taken, skipped := 0, 0
	allocs := testing.AllocsPerRun(5, func() {
		s := NewScanner(Source{Name: "urls.txt", R: bytes.NewReader(data)}, Shard{}, done)
		for s.Scan() {
			if s.Done() {
				skipped++
			} else {
				taken++
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
	})
	if taken != 0 || skipped != 6*800 {
		t.Fatalf("%d lines taken, %d skipped in 6 reads, want none and %d", taken, skipped, 6*800)
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

// TestPlainURLShownAsWritten: a line plainURL passes is shown in its
// record as it is written, so that --resume may look it up by its text;
// and the lines that are shown otherwise do not pass. Random lines from
// the characters URLs are made of, with a fixed seed, and a table of the
// ways a line may differ from its shown form.
func TestPlainURLShownAsWritten(t *testing.T) {
	shown := func(s string) string {
		return parseLine("urls", 1, rawLine{kept: []byte(s)}, false, firstNonSpace([]byte(s)), DefaultMaxRequestBody).Shown
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
