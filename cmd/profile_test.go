package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
)

// TestRun_profilesAndReportHosts runs fetch with --cpuprofile, --memprofile
// and --report-hosts 1 over three hosts, two of them refusing (closed
// loopback ports), the busy one last: the profiles are gzipped pprof
// files, and the report lists the busy host with the attempts it may have
// missed while the others held the one place, the others summed up in
// hosts_other. fetch summarize of the results says the same.
func TestRun_profilesAndReportHosts(t *testing.T) {
	lb := startLoopback(t)
	dir := t.TempDir()
	var urls strings.Builder
	urls.WriteString("http://127.0.0.1:1/refused\nhttp://127.0.0.2:1/refused\n")
	for range 5 {
		urls.WriteString(lb.target.URL + "/a?size=10\n")
	}
	in := writeFile(t, dir, "urls.txt", urls.String())
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	out, report := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	code := Run(context.Background(), ios, []string{"-q", "-c", "1", "--retries", "0", "--report-hosts", "1",
		"--cpuprofile", cpu, "--memprofile", mem, "-o", out, "--report", report, in})
	if code != ExitNotAllOK {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitNotAllOK, stderr)
	}
	for _, p := range []string{cpu, mem} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 20 || !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			t.Errorf("%s: %d bytes, not a gzipped profile: %q", p, len(data), data[:min(len(data), 16)])
		}
	}
	data, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep fetch.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	wantHosts := map[string]*fetch.HostReport{lb.target.Addr: {Attempts: 5, OK: 5, MaxInFlight: 1, Missed: 2}}
	wantOther := &fetch.HostsOther{Hosts: 2, Attempts: 2, Failed: 2}
	if !reflect.DeepEqual(rep.Hosts, wantHosts) || !reflect.DeepEqual(rep.HostsOther, wantOther) {
		t.Errorf("hosts %+v, hosts_other %+v; want %+v, %+v\n%s", rep.Hosts[lb.target.Addr], rep.HostsOther, wantHosts[lb.target.Addr], wantOther, data)
	}

	ios, _, stdout, stderr := Test()
	code = Run(context.Background(), ios, []string{"summarize", "--report-hosts", "1", "--report", report, out})
	if code != ExitNotAllOK {
		t.Fatalf("summarize exit code %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "2 other hosts not listed") {
		t.Errorf("summary does not mention the hosts not listed:\n%s", stdout)
	}
	data, err = os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	rep = fetch.Report{}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	wantHosts[lb.target.Addr].MaxInFlight = 0 // records do not hold it
	if !reflect.DeepEqual(rep.Hosts, wantHosts) || !reflect.DeepEqual(rep.HostsOther, wantOther) {
		t.Errorf("summarize: hosts %+v, hosts_other %+v; want %+v, %+v", rep.Hosts[lb.target.Addr], rep.HostsOther, wantHosts[lb.target.Addr], wantOther)
	}
}

// TestRun_cpuProfileAfterUsageError: the CPU profile starts as the flags
// are read (so that it shows the proxy list being read), before the files
// are checked; a run that stops at a usage error stops its profile too, and
// leaves no profile file: the next run can profile again.
func TestRun_cpuProfileAfterUsageError(t *testing.T) {
	lb := startLoopback(t)
	dir := t.TempDir()
	in := writeFile(t, dir, "urls.txt", lb.target.URL+"/a?size=10\n")
	cpu := filepath.Join(dir, "cpu.pprof")
	ios, _, _, stderr := Test()
	// -o is the input: a usage error, found after the profile started.
	if code := Run(context.Background(), ios, []string{"-q", "--cpuprofile", cpu, "-o", in, in}); code != ExitUsage {
		t.Fatalf("exit code %d, want %d (usage); stderr:\n%s", code, ExitUsage, stderr)
	}
	if _, err := os.Stat(cpu); !os.IsNotExist(err) {
		t.Errorf("a run stopped by a usage error left %s (%v)", cpu, err)
	}
	ios, _, _, stderr = Test()
	if code := Run(context.Background(), ios, []string{"-q", "--cpuprofile", cpu, "-o", filepath.Join(dir, "out.jsonl"), in}); code != ExitOK {
		t.Fatalf("the run after: exit code %d; stderr:\n%s", code, stderr)
	}
	data, err := os.ReadFile(cpu)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 20 || !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
		t.Errorf("%d bytes, not a gzipped profile", len(data))
	}
}
