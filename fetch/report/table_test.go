package report

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
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
		t.Fatalf("%v (run go test ./fetch/report/ -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// sampleReport is a report with every part of the summary in it.
func sampleReport() *Report {
	return &Report{
		Jobs: 500, OK: 470, Failed: 30, ElapsedMS: 10234.5,
		ByKind:  map[string]int{"invalid": 20, "timeout": 6, "status": 4},
		ByPhase: map[string]int{"input": 20, "headers": 8, "body": 2},
		Proxies: map[string]*Proxy{
			"http://127.0.0.1:8081": {
				Pool: "shared", Attempts: 260, OK: 240, Failed: 20, MaxInFlight: 4,
				PhasesMS: map[string]Quantiles{
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
				Health: []StateChange{
					{AtMS: 1200, State: "benched", CooldownMS: 30000},
					{AtMS: 31200, State: "probing"},
					{AtMS: 31250, State: "healthy"},
				},
				PhasesMS: map[string]Quantiles{
					"queue":   {P50: 1, P95: 20},
					"connect": {P50: 0.3, P95: 0.9},
					"tls":     {P50: 10.2, P95: 30},
					"headers": {P50: 40, P95: 99.99},
					"body":    {P50: 2, P95: 8},
				},
			},
		},
		Hosts: map[string]*Host{
			"a.example:443": {Attempts: 300, OK: 290, Failed: 10, MaxInFlight: 2},
			"b.example:80":  {Attempts: 210, OK: 194, Failed: 16, MaxInFlight: 12},
		},
	}
}

func TestWriteSummary(t *testing.T) {
	tests := []struct {
		name   string
		report *Report
	}{
		{"summary.golden", sampleReport()},
		{"summary_direct.golden", &Report{Jobs: 3, OK: 3, ElapsedMS: 12.5, Interrupted: true,
			Proxies: map[string]*Proxy{"direct": {Attempts: 3, OK: 3, MaxInFlight: 1,
				PhasesMS: map[string]Quantiles{"queue": {}, "headers": {P50: 1, P95: 2}}}}}},
		{"summary_empty.golden", &Report{}},
		{"summary_others.golden", othersReport()},
		{"summary_pools_dropped.golden", &Report{Jobs: 10, OK: 10, ElapsedMS: 100,
			Proxies:      map[string]*Proxy{"http://gate.example:7000#0a1b2c3d": {Pool: "gate", Attempts: 4, OK: 4, MaxInFlight: 1}},
			ProxiesOther: &ProxiesOther{Proxies: 6, Counts: Counts{Attempts: 6, OK: 6}, PoolsDropped: true}}},
		{"summary_none_listed.golden", &Report{Jobs: 10, OK: 10, ElapsedMS: 100,
			Proxies: map[string]*Proxy{},
			ProxiesOther: &ProxiesOther{Proxies: 7, Counts: Counts{Attempts: 10, OK: 10},
				PoolsDropped: true, States: map[string]int{"benched": 1}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			WriteSummary(&buf, tt.report)
			golden(t, tt.name, buf.Bytes())
		})
	}
}

// othersReport is the report of a run through a pool of sessions, more
// of them than it lists: a listed proxy of the pool, one of none, and the
// others summed up, some of another pool none of whose members is listed,
// two of them benched; and more hosts than it lists.
func othersReport() *Report {
	q := func(ms float64) map[string]Quantiles {
		return map[string]Quantiles{"headers": {P50: ms, P95: 2 * ms}}
	}
	return &Report{
		Jobs: 20000, OK: 19990, Failed: 10, ElapsedMS: 5000,
		ByKind:  map[string]int{"refused": 10},
		ByPhase: map[string]int{"connect": 10},
		Proxies: map[string]*Proxy{
			"http://gate.example:7000#0a1b2c3d": {Pool: "gate", Attempts: 3, OK: 3, MaxInFlight: 1, PhasesMS: q(10)},
			"http://127.0.0.1:3128":             {Attempts: 2, OK: 1, Failed: 1, MaxInFlight: 1, PhasesMS: q(4), State: "benched"},
		},
		ProxiesOther: &ProxiesOther{Proxies: 19990, Counts: Counts{Attempts: 19995, OK: 19986, Failed: 9},
			Pools:  map[string]*Counts{"gate": {Attempts: 15000, OK: 14995, Failed: 5}, "spare": {Attempts: 4995, OK: 4991, Failed: 4}},
			States: map[string]int{"benched": 2}},
		Hosts:      map[string]*Host{"a.example:443": {Attempts: 19000, OK: 19000, MaxInFlight: 64}},
		HostsOther: &HostsOther{Hosts: 1000, Counts: Counts{Attempts: 1000, OK: 990, Failed: 10}},
	}
}

// bigReport is the report of a large crawl: 1,000 proxies, 980 of them in
// 3 pools, and 300,000 hosts, some proxies benched.
func bigReport() *Report {
	r := &Report{
		Jobs: 1_234_567, OK: 1_200_000, Failed: 34_567, ElapsedMS: 3_725_123.4,
		ByKind:  map[string]int{"timeout": 20_000, "refused": 10_000, "status": 4_000, "reset": 567},
		ByPhase: map[string]int{"connect": 10_000, "headers": 24_000, "body": 567},
		Proxies: map[string]*Proxy{},
		Hosts:   map[string]*Host{},
	}
	pools := []string{"residential", "datacenter", "mobile-eu-west"}
	for i := range 1000 {
		id := fmt.Sprintf("http://proxy-%03d.provider.example.net:3128", i)
		if i%3 == 0 {
			id = fmt.Sprintf("socks5://10.%d.%d.%d:1080#%08x", i/256, i%256, i%7, i*2654435761%(1<<32))
		}
		p := &Proxy{Attempts: 1000 + i*7%997, MaxInFlight: 4,
			PhasesMS: map[string]Quantiles{
				"queue": {P50: 0.4, P95: 12}, "connect": {P50: float64(i%50) + 0.5, P95: float64(i%500) + 30.25},
				"proxy": {P50: 20, P95: 210}, "headers": {P50: 150, P95: 12_345}, "body": {P50: 3.4, P95: 1234.5},
			}}
		p.Failed = p.Attempts * (i % 13) / 100
		p.OK = p.Attempts - p.Failed
		if i < 980 {
			p.Pool = pools[i%3]
		}
		if i%97 == 0 {
			p.State = []string{"healthy", "benched", "probing"}[i%3]
			p.Health = []StateChange{{AtMS: 1200, State: "benched", CooldownMS: 30000}}
		}
		r.Proxies[id] = p
	}
	for i := range 300_000 {
		h := &Host{Attempts: 1 + i%17, MaxInFlight: 1 + i%3}
		h.Failed = h.Attempts * (i % 11) / 20
		h.OK = h.Attempts - h.Failed
		r.Hosts[fmt.Sprintf("www.site-%06d.example-domain.com:443", i)] = h
	}
	r.Hosts["a-very-long-subdomain.of-a-very-long-domain-name.example.co.uk:8443"] = &Host{Attempts: 5000, OK: 10, Failed: 4990}
	return r
}

// TestWriteSummary_bounded: a run with 1,000 proxies and 300,000 hosts
// still gives a summary of about 40 lines, none over 100 columns.
func TestWriteSummary_bounded(t *testing.T) {
	var buf bytes.Buffer
	WriteSummary(&buf, bigReport())
	golden(t, "summary_big.golden", buf.Bytes())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) > 42 {
		t.Errorf("%d lines, want at most 42", len(lines))
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > summaryWidth {
			t.Errorf("line of %d columns, want at most %d: %q", n, summaryWidth, l)
		}
	}
}

func TestForPeople(t *testing.T) {
	tests := []struct {
		got, want string
	}{
		{fmtElapsed(24929), "24.9s"},
		{fmtElapsed(10234.5), "10.2s"},
		{fmtElapsed(999.6), "1.00s"},
		{fmtElapsed(532.14), "532ms"},
		{fmtElapsed(12.5), "12.5ms"},
		{fmtElapsed(245_400), "4m5s"},
		{fmtElapsed(3_725_123), "1h2m"},
		{fmtElapsed(0), "-"},
		{sig3(48.857), "48.9"},
		{sig3(1234.5), "1230"},
		{sig3(9.996), "10.0"},
		{sig3(0.012345), "0.0123"},
		{sig3(123456), "123000"},
		{fmtMS(12_345), "12.3s"},
		{fmtMS(181.4), "181"},
		{fmtMS(0.44), "0.4"},
		{cut("http://proxy-000.provider.example.net:3128", 20), "http://pr…e.net:3128"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
