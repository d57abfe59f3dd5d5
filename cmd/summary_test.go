package cmd

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/ -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// sampleReport is a report with every part of the summary in it.
func sampleReport() *fetch.Report {
	return &fetch.Report{
		Jobs: 500, OK: 470, Failed: 30, ElapsedMS: 10234.5,
		ByKind:  map[string]int{"invalid": 20, "timeout": 6, "status": 4},
		ByPhase: map[string]int{"input": 20, "headers": 8, "body": 2},
		Proxies: map[string]*fetch.ProxyReport{
			"http://127.0.0.1:8081": {
				Pool: "shared", Attempts: 260, OK: 240, Failed: 20, MaxInFlight: 4,
				PhasesMS: map[string]fetch.Quantiles{
					"queue":   {P50: 0.4, P95: 12},
					"connect": {P50: 0.2, P95: 1.1},
					"proxy":   {P50: 0.5, P95: 2.25},
					"headers": {P50: 50.3, P95: 180.7},
					"body":    {P50: 3.4, P95: 1234.5},
				},
			},
			"socks5://127.0.0.2:1080#5e884898": {
				Attempts: 250, OK: 244, Failed: 6, MaxInFlight: 8,
				State: "healthy",
				Health: []fetch.StateChange{
					{AtMS: 1200, State: "benched", CooldownMS: 30000},
					{AtMS: 31200, State: "probing"},
					{AtMS: 31250, State: "healthy"},
				},
				PhasesMS: map[string]fetch.Quantiles{
					"queue":   {P50: 1, P95: 20},
					"connect": {P50: 0.3, P95: 0.9},
					"tls":     {P50: 10.2, P95: 30},
					"headers": {P50: 40, P95: 99.99},
					"body":    {P50: 2, P95: 8},
				},
			},
		},
		Hosts: map[string]*fetch.HostReport{
			"a.example:443": {Attempts: 300, OK: 290, Failed: 10, MaxInFlight: 2},
			"b.example:80":  {Attempts: 210, OK: 194, Failed: 16, MaxInFlight: 12},
		},
	}
}

func TestWriteSummary(t *testing.T) {
	tests := []struct {
		name   string
		report *fetch.Report
	}{
		{"summary.golden", sampleReport()},
		{"summary_direct.golden", &fetch.Report{Jobs: 3, OK: 3, ElapsedMS: 12.5, Interrupted: true,
			Proxies: map[string]*fetch.ProxyReport{"direct": {Attempts: 3, OK: 3, MaxInFlight: 1,
				PhasesMS: map[string]fetch.Quantiles{"queue": {}, "headers": {P50: 1, P95: 2}}}}}},
		{"summary_empty.golden", &fetch.Report{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			writeSummary(&buf, tt.report)
			golden(t, tt.name, buf.Bytes())
		})
	}
}
