package results_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
)

func TestLoadDone(t *testing.T) {
	const file = `{"url":"http://a/1","input":"u.txt","line":1,"ok":true,"status":200,"error":null}
{"url":"http://a/2","input":"u.txt","line":2,"ok":false,"error":{"phase":"body","kind":"cancelled","message":"interrupted"}}
{"url":"http://a/3","input":"u.txt","line":3,"ok":false,"status":503,"error":{"phase":"headers","kind":"status","message":"503"}}
{"url":"http://a/1","input":"-","line":1,"ok":true,"error":null}
{"url":"not a url","input":"-","line":2,"ok":false,"error":{"phase":"input","kind":"invalid","message":"no"}}
{"url":"http://a/2","input":"u.txt","line":2,"ok":true,"error":null}
{"url":"http://a/1","input":"u.txt","line":1,"ok":true,"error":null}
{"url":"http://a/5","input":"u.txt","line":5,"ok":false,"error":{"phase":"queue","kind":"coordinator","message":"redis unreachable"}}
{"line":6,"input":"u.txt","url":"http://a/6","ok":false,"error":{"kind":"coordinator","phase":"body"}}
{"url":"http://a/7","input":"u.txt","line":7,"ok":false,"error":{"phase":"body","kind":"coordinator","message":"lease lost"}}
{"url":"http://a/7","input":"u.txt","line":7,"ok":true,"error":null}
{"url":"http://a/8","input":"u.txt","line":8,"ok":false,"error":{"phase":"queue","kind":"banned","message":"banned: a:80 banned the one proxy"}}
{"url":"http://a/9","input":"u.txt","line":9,"ok":false,"error":{"phase":"headers","kind":"banned","message":"403 Forbidden: banned (--ban-status)"}}
`
	d, err := results.LoadDone(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		input string
		line  int
		url   string
		want  bool
	}{
		{"u.txt", 1, "http://a/1", true},  // ok, written twice: counted once
		{"u.txt", 2, "http://a/2", true},  // cancelled, then ok on resume
		{"u.txt", 3, "http://a/3", true},  // failed for good
		{"-", 1, "http://a/1", true},      // standard input is its own input
		{"-", 2, "not a url", true},       // invalid is final
		{"u.txt", 5, "http://a/5", false}, // coordinator is not final
		{"u.txt", 6, "http://a/6", false}, // nor in a record fetch did not write
		{"u.txt", 7, "http://a/7", true},  // coordinator, then ok on resume
		{"u.txt", 8, "http://a/8", false}, // banned in queue: its host banned every proxy before its turn
		{"u.txt", 9, "http://a/9", true},  // banned by the answer to its own attempt
		{"u.txt", 4, "http://a/1", false}, // same URL, another line
		{"u.txt", 1, "http://a/9", false}, // the input changed at that line
		{"v.txt", 1, "http://a/1", false}, // another input
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s:%d:%s", tt.input, tt.line, tt.url), func(t *testing.T) {
			if got := d.Has(tt.input, tt.line, tt.url); got != tt.want {
				t.Errorf("Has = %v, want %v", got, tt.want)
			}
		})
	}
	if d.Len() != 7 {
		t.Errorf("Len = %d, want 7", d.Len())
	}

	var nilSet *results.DoneSet
	if nilSet.Has("u.txt", 1, "http://a/1") || nilSet.Len() != 0 {
		t.Error("nil DoneSet is not empty")
	}
}

func TestLoadDone_errors(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		wantErr bool
	}{
		{"empty", "", false},
		{"torn last line is not looked at", `{"url":"http://a/1","input":"-","line":1,"ok":true}` + "\n" + `{"url":"http://a/2","inp`, false},
		{"torn middle line", `{"url":"http://a/1","inp` + "\n" + `{"url":"http://a/2","input":"-","line":2,"ok":true}` + "\n", true},
		{"not JSON", "hello\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := results.LoadDone(strings.NewReader(tt.file))
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

func TestRepairTail(t *testing.T) {
	long := strings.Repeat("x", 200<<10) // more than one block back
	tests := []struct {
		name, in, want string
		cut            bool
	}{
		{"empty", "", "", false},
		{"whole lines", "a\nb\n", "a\nb\n", false},
		{"torn last line", "a\nb\nc", "a\nb\n", true},
		{"only a torn line", "abc", "", true},
		{"long torn line", "a\n" + long, "a\n", true},
		{"long whole line then torn", long + "\n" + long, long + "\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := filepath.Join(t.TempDir(), "out.jsonl")
			if err := os.WriteFile(name, []byte(tt.in), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cut, err := results.RepairTail(f)
			if err != nil || cut != tt.cut {
				t.Errorf("RepairTail = %v, %v; want %v, nil", cut, err, tt.cut)
			}
			got, _ := os.ReadFile(name)
			if string(got) != tt.want {
				t.Errorf("file is %d bytes, want %d", len(got), len(tt.want))
			}
		})
	}
}

// BenchmarkLoadDone3M measures LoadDone on a results file of 3 million
// records, the resume of a long run: its time, and the heap it keeps. Run it
// with
//
//	go test -run '^$' -bench LoadDone3M -benchtime 1x ./fetch/
//
// The file (about 1 GB) is written to a temporary directory first.
func BenchmarkLoadDone3M(b *testing.B) {
	const n = 3_000_000
	name := filepath.Join(b.TempDir(), "out.jsonl")
	size := writeResults(b, name, n)

	for b.Loop() {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)

		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		d, err := results.LoadDone(f)
		elapsed := time.Since(start)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}

		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if d.Len() != n-n/10 { // every tenth record is cancelled
			b.Fatalf("Len = %d, want %d", d.Len(), n-n/10)
		}
		kept := float64(after.HeapInuse) - float64(before.HeapInuse)
		b.ReportMetric(float64(size)/(1<<20), "file-MiB")
		b.ReportMetric(elapsed.Seconds(), "load-s")
		b.ReportMetric(kept/(1<<20), "kept-heap-MiB")
		b.ReportMetric(float64(after.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(float64(after.HeapSys)/(1<<20), "heap-sys-MiB") // about the peak
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/(1<<20), "allocated-MiB")
		b.ReportMetric(kept/float64(d.Len()), "kept-B/record")
		runtime.KeepAlive(d)
	}
}

// writeResults writes n records like a real run's to name, across two
// inputs, and returns the file's size.
func writeResults(tb testing.TB, name string, n int) int64 {
	tb.Helper()
	f, err := os.Create(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	var line bytes.Buffer
	for i := range n {
		input, ln := "urls-a.txt", i+1
		if i >= n/2 {
			input, ln = "urls-b.txt", i-n/2+1
		}
		line.Reset()
		fmt.Fprintf(&line, `{"url":"https://site-%d.example.com/products/item/%d?ref=feed&page=%d","input":%q,"line":%d,`, i%977, i, i%50, input, ln)
		if i%10 == 9 {
			line.WriteString(`"ok":false,"proxy":"http://127.0.0.1:8081","attempts":1,"bytes":0,"elapsed_ms":5012.3,"phases":{"queue":0.4,"connect":1.1,"headers":5010.2},"error":{"phase":"headers","kind":"cancelled","message":"interrupted"},"tries":[]}`)
		} else {
			line.WriteString(`"ok":true,"status":200,"proxy":"http://127.0.0.1:8081","attempts":1,"bytes":18324,"elapsed_ms":532.1,"phases":{"queue":1.2,"dns":0.3,"connect":1.1,"proxy":0.5,"tls":10.2,"request":0.1,"headers":50.3,"body":3.4},"error":null,"tries":[]}`)
		}
		line.WriteByte('\n')
		if _, err := w.Write(line.Bytes()); err != nil {
			tb.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	st, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	return st.Size()
}
