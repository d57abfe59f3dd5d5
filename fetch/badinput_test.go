package fetch

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// recorder keeps records in memory.
type recorder struct {
	mu   sync.Mutex
	recs []*results.Record
}

func (r *recorder) Write(rec *results.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

// TestBadInput runs bad inputs through the engine: every line taken gets a
// record, bad lines as input/invalid with no request sent, and nothing
// panics.
func TestBadInput(t *testing.T) {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ok := tg.URL + "/ok?size=3"
	type want struct {
		line    int
		invalid bool
	}
	cases := []struct {
		name  string
		input io.Reader
		want  []want
	}{
		{"empty", strings.NewReader(""), nil},
		{"bom only", strings.NewReader("\ufeff"), nil},
		{"bom and crlf", strings.NewReader("\ufeff" + ok + "\r\n# c\r\n\r\n" + ok + "\r\n"), []want{{1, false}, {4, false}}},
		{"binary garbage", bytes.NewReader([]byte("\x00\x01\xff\xfe\n\x89PNG\r\n\x1a\n" + ok + "\n\xc3\x28\n")),
			[]want{{1, true}, {2, true}, {3, true}, {4, false}, {5, true}}},
		{"control characters in a URL", strings.NewReader(ok + "\x00x\n" + tg.URL + "/a\x7fb\n"), []want{{1, true}, {2, true}}},
		{"line over 8 KiB", strings.NewReader(tg.URL + "/" + strings.Repeat("x", input.MaxLineBytes) + "\n" + ok + "\n"), []want{{1, true}, {2, false}}},
		{"comment and blank lines over 8 KiB", strings.NewReader("# " + strings.Repeat("c", input.MaxLineBytes) + "\n" + strings.Repeat(" ", input.MaxLineBytes+5) + "\n" + ok + "\n"), []want{{3, false}}},
		{"line of exactly 8 KiB", strings.NewReader(tg.URL + "/" + strings.Repeat("x", input.MaxLineBytes-len(tg.URL)-1) + "\r\n"), []want{{1, false}}},
		{"10 MiB line without a line end", &fetchtest.Endless{Prefix: ok, N: 10 << 20}, []want{{1, true}}},
		{"bom at the start of a later file", strings.NewReader(ok + "\n\ufeff" + ok + "\n\ufeff# comment\n"), []want{{1, false}, {2, false}}},
		{"port outside 1-65535", strings.NewReader(tg.URL[:strings.LastIndexByte(tg.URL, ':')] + ":0/\n" + "http://127.0.0.1:65536/\nhttp://127.0.0.1:99999999999999999999/\n"),
			[]want{{1, true}, {2, true}, {3, true}}},
		{"not absolute", strings.NewReader("//example.com/x\n/x\nexample.com\nhttp:/x\nhttp:x\n"),
			[]want{{1, true}, {2, true}, {3, true}, {4, true}, {5, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg.ResetStats()
			cfg := DefaultConfig()
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := &recorder{}
			if _, err := e.Run(context.Background(), []input.Source{{Name: "in", R: c.input}}, w); err != nil {
				t.Fatal(err)
			}
			if len(w.recs) != len(c.want) {
				t.Fatalf("%d records, want %d", len(w.recs), len(c.want))
			}
			byLine := map[int]*results.Record{}
			for _, r := range w.recs {
				byLine[r.Line] = r
			}
			valid := 0
			for _, wt := range c.want {
				r := byLine[wt.line]
				if r == nil {
					t.Fatalf("no record for line %d", wt.line)
				}
				if wt.invalid {
					if r.OK || r.Error == nil || r.Error.Phase != results.PhaseInput || r.Error.Kind != results.KindInvalid || r.Attempts != 0 {
						t.Errorf("line %d: ok=%v attempts=%d error %+v, want input/invalid", wt.line, r.OK, r.Attempts, r.Error)
					}
					if len(r.URL) > input.MaxLineBytes+8 {
						t.Errorf("line %d: record URL of %d bytes", wt.line, len(r.URL))
					}
				} else {
					valid++
					if !r.OK {
						t.Errorf("line %d: %+v", wt.line, r.Error)
					}
				}
			}
			if got := tg.Requests(); got != valid {
				t.Errorf("target got %d requests, want %d: invalid lines must send none", got, valid)
			}
		})
	}
}
