package results_test

import (
	"encoding/json"
	"io"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
)

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

// benchRecords are records like a run's: a plain success, one through a
// pool after a retry, and an invalid line.
var benchRecords = []*results.Record{
	{URL: "https://a.example/products/item/123?ref=feed", Input: "urls.txt", Line: 12, OK: true, Status: 200,
		Proxy: "http://127.0.0.1:8081", Attempts: 1, Bytes: 18324, ElapsedMS: 532.1,
		Phases: phaseTimes(map[string]float64{"queue": 1.2, "dns": 0.3, "connect": 1.1, "tls": 10.2, "request": 0.1, "headers": 50.3, "body": 3.4}),
		Tries:  []results.Try{}},
	{URL: "http://b.example/x", Input: "-", Line: 7, OK: false, Status: 503,
		Proxy: "http://127.0.0.1:8082", Pool: "shared", Attempts: 2, ElapsedMS: 40.25,
		Phases: phaseTimes(map[string]float64{"queue": 0.1, "headers": 20}),
		Error:  &results.Error{Phase: "headers", Kind: "status", Message: "503 Service Unavailable"},
		Tries: []results.Try{{Proxy: "http://127.0.0.1:8081", Pool: "shared", Status: 503, ElapsedMS: 20.4,
			Phases: phaseTimes(map[string]float64{"queue": 0.1, "headers": 20.0}),
			Error:  &results.Error{Phase: "headers", Kind: "status", Message: "503 Service Unavailable"}}}},
	{URL: "ftp://c.example/<a>", Input: "urls.txt", Line: 3, Tries: []results.Try{},
		Error: &results.Error{Phase: "input", Kind: "invalid", Message: `unsupported scheme "ftp" (want http or https)`}},
}

// BenchmarkRecordWrite measures encoding a record as a JSON line and
// buffering it: one op is one record.
func BenchmarkRecordWrite(b *testing.B) {
	w := results.NewJSONLWriter(io.Discard)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := w.Write(benchRecords[i%len(benchRecords)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRecordRead measures reading back a record line as `fetch
// summarize` does (encoding/json into a Record, its phases included): one
// op is one of benchRecords' lines.
func BenchmarkRecordRead(b *testing.B) {
	var lines [][]byte
	for _, r := range benchRecords {
		line, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, line)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var rec results.Record
		if err := json.Unmarshal(lines[i%len(lines)], &rec); err != nil {
			b.Fatal(err)
		}
	}
}
