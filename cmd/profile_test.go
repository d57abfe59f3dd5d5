package cmd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/report"
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
	out, reportPath := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	code := Run(context.Background(), ios, []string{"-q", "-c", "1", "--retries", "0", "--report-hosts", "1",
		"--cpuprofile", cpu, "--memprofile", mem, "-o", out, "--report", reportPath, in})
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
	rep, data := readReport(t, reportPath)
	wantHosts := map[string]*report.Host{lb.target.Addr: {Attempts: 5, OK: 5, MaxInFlight: 1, Missed: 2}}
	wantOther := &report.HostsOther{Hosts: 2, Counts: report.Counts{Attempts: 2, Failed: 2}}
	if !reflect.DeepEqual(rep.Hosts, wantHosts) || !reflect.DeepEqual(rep.HostsOther, wantOther) {
		t.Errorf("hosts %+v, hosts_other %+v; want %+v, %+v\n%s", rep.Hosts[lb.target.Addr], rep.HostsOther, wantHosts[lb.target.Addr], wantOther, data)
	}

	ios, _, stdout, stderr := Test()
	code = Run(context.Background(), ios, []string{"summarize", "--report-hosts", "1", "--report", reportPath, out})
	if code != ExitNotAllOK {
		t.Fatalf("summarize exit code %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stdout.String(), "2 other hosts not listed") {
		t.Errorf("summary does not mention the hosts not listed:\n%s", stdout)
	}
	rep, _ = readReport(t, reportPath)
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

// TestRun_reportProxies runs fetch through 30 identities of a pool on one
// proxy and another proxy, with --report-proxies 3: the report lists
// three proxies and sums up the others in proxies_other, by pool too, the
// two adding up to every attempt; fetch summarize of the results with the
// same flag lists as many and says, on its summary, how many it did not.
func TestRun_reportProxies(t *testing.T) {
	lb := startLoopback(t)
	dir := t.TempDir()
	var list strings.Builder
	host := strings.TrimPrefix(lb.proxies[0].URL, "http://")
	for i := range 30 {
		fmt.Fprintf(&list, "http://user-session-%d:pw@%s pool=gate\n", i, host)
	}
	fmt.Fprintf(&list, "%s\n", lb.proxies[1].URL)
	proxyFile := writeFile(t, dir, "ids.txt", list.String())
	const urls = 62
	in := writeFile(t, dir, "urls.txt", strings.Repeat(lb.target.URL+"/a?size=10\n", urls))
	out, reportPath := filepath.Join(dir, "out.jsonl"), filepath.Join(dir, "report.json")
	ios, _, _, stderr := Test()
	code := Run(context.Background(), ios, []string{"-q", "-c", "4", "--retries", "0", "--report-proxies", "3",
		"--proxies", proxyFile, "-o", out, "--report", reportPath, in})
	if code != ExitOK {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, ExitOK, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, rec := range readRecords(t, data) {
		used[rec.Proxy] = true
	}
	if len(used) < 4 {
		t.Fatalf("the run used %d proxies: too few to list 3 and sum up others", len(used))
	}
	// check reads the report and says what is wrong with its proxies.
	check := func(who string) {
		t.Helper()
		rep, data := readReport(t, reportPath)
		o := rep.ProxiesOther
		if len(rep.Proxies) != 3 || o == nil || o.Pools["gate"] == nil {
			t.Fatalf("%s: %d proxies listed, proxies_other %+v; want 3, and others of pool gate\n%s", who, len(rep.Proxies), o, data)
		}
		attempts := o.Attempts
		for id, p := range rep.Proxies {
			if strings.Contains(id, "pw") || strings.Contains(id, "user-session") {
				t.Errorf("%s: proxy identity %q shows its credentials", who, id)
			}
			attempts += p.Attempts
		}
		if attempts != urls || o.OK != o.Attempts || o.Proxies != len(used)-3 {
			t.Errorf("%s: listed and other add up to %d attempts, want %d; proxies_other %+v, want %d proxies", who, attempts, urls, *o, len(used)-3)
		}
		if strings.Contains(string(data), "pw") {
			t.Errorf("%s: the report shows a password:\n%s", who, data)
		}
	}
	check("fetch")

	ios, _, stdout, stderr := Test()
	code = Run(context.Background(), ios, []string{"summarize", "--report-proxies", "3", "--report", reportPath, out})
	if code != ExitOK {
		t.Fatalf("summarize exit code %d; stderr:\n%s", code, stderr)
	}
	check("summarize")
	for _, want := range []string{"not listed (--report-proxies)", "pool gate ("} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("summary does not say %q:\n%s", want, stdout)
		}
	}
}
