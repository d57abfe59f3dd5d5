package input

import (
	"fmt"
	"math"
	"strconv"
	"testing"
)

// TestShard_even: lines that differ only in a number spread evenly over
// the shards for every N, odd or even, and shards 1..N take each line
// exactly once. Raw FNV-1a modulo N put 4,000 lines "…&i=N" on line N in
// shards 0 and 4,000 for N=2, and 454, 0, 3546, 0 for N=4: FNV-1a's low
// bits follow the input's.
//
// Each shard's count is binomial (4,000 lines, p = 1/N) for a hash that
// spreads well, so it must fall within 6 standard deviations of 4,000/N
// (±190 for N=2, ±92 for N=16): about one chance in 500 million per shard
// of failing by bad luck, over the 129 shards the table checks.
func TestShard_even(t *testing.T) {
	const lines = 4000
	const input = "urls.txt"
	families := []struct {
		name string
		line func(i int) (n int, text string) // the i-th line of lines, 1-based
	}{
		{"number and line number", func(i int) (int, string) { return i, "http://127.0.0.1:1/ok?size=1&i=" + strconv.Itoa(i) }},
		{"number, one line number", func(i int) (int, string) { return 1, "http://127.0.0.1:1/ok?size=1&i=" + strconv.Itoa(i) }},
		{"line number, one text", func(i int) (int, string) { return i, "http://127.0.0.1:1/ok?size=1" }},
	}
	for _, n := range []int{2, 3, 4, 8, 16, 10} {
		for _, fam := range families {
			t.Run(fmt.Sprintf("N=%d/%s", n, fam.name), func(t *testing.T) {
				counts := make([]int, n)
				for i := 1; i <= lines; i++ {
					ln, text := fam.line(i)
					taken := 0
					for k := 1; k <= n; k++ {
						if (Shard{K: k, N: n}).takes(input, ln, []byte(text)) {
							taken++
							counts[k-1]++
						}
					}
					if taken != 1 {
						t.Fatalf("line %d (%s) taken by %d of shards 1..%d, want 1", ln, text, taken, n)
					}
				}
				p := 1 / float64(n)
				mean := lines * p
				tol := 6 * math.Sqrt(lines*p*(1-p))
				for k, c := range counts {
					if math.Abs(float64(c)-mean) > tol {
						t.Errorf("shard %d/%d holds %d lines, want %.0f ± %.0f; all shards: %v", k+1, n, c, mean, tol, counts)
					}
				}
				t.Logf("shards: %v", counts)
			})
		}
	}
}

// TestShard_ofAllocs: Of, which runs for every input line of a sharded
// run, does not allocate.
func TestShard_ofAllocs(t *testing.T) {
	s := Shard{K: 3, N: 10}
	text := []byte(" http://127.0.0.1:1/ok?size=1&i=12345 \n")
	if a := testing.AllocsPerRun(1000, func() { s.takes("urls.txt", 12345, text) }); a != 0 {
		t.Errorf("%v allocations a line, want 0", a)
	}
}

// TestShard_of pins a few lines' shards, computed apart from this code from
// the formula Shard documents, so that a change of the hash, which moves
// lines between shards and so breaks runs sharded across fetch versions,
// is never made by mistake.
func TestShard_of(t *testing.T) {
	tests := []struct {
		input string
		line  int
		text  string
		n     int
		want  int
	}{
		{"urls.txt", 1, "http://127.0.0.1:1/ok?size=1&i=1", 2, 1},
		{"urls.txt", 2, "http://127.0.0.1:1/ok?size=1&i=2", 2, 1},
		{"urls.txt", 3, "http://127.0.0.1:1/ok?size=1&i=3", 2, 2}, // 1 before the mixing
		{"urls.txt", 4, "http://127.0.0.1:1/ok?size=1&i=4", 2, 2}, // 1 before the mixing
		{"urls.txt", 12, "https://a.example/x", 10, 6},
		{"-", 7, " \thttps://a.example/x \r\n", 10, 6}, // trimmed
		{"urls.txt", 3_000_000, "https://site-7.example.com/products/item/3", MaxShards, 572926},
	}
	for _, tt := range tests {
		if got := (Shard{K: 1, N: tt.n}).Of(tt.input, tt.line, []byte(tt.text)); got != tt.want {
			t.Errorf("%s:%d %q of %d shards: shard %d, want %d", tt.input, tt.line, tt.text, tt.n, got, tt.want)
		}
	}
}
