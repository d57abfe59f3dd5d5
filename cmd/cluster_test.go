package cmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// fleet is a distributed run for the Cluster and Sentinel tests: three
// fetch processes, each its shard of one list, through two proxies of cap
// 2, each told its own --redis value.
type fleet struct {
	n     int
	cap   int
	pxs   []*fetchtest.Proxy
	procs []*proc
	outs  []string
}

func startFleet(t *testing.T, redis func(k int) string) *fleet {
	t.Helper()
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { target.Close() })
	f := &fleet{n: 150, cap: 2}
	for i := range 2 {
		p, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		f.pxs = append(f.pxs, p)
	}
	dir := t.TempDir()
	var lines strings.Builder
	for i := range f.n {
		fmt.Fprintf(&lines, "%s/d?i=%d&size=1024&chunks=4&drip=25ms\n", target.URL, i)
	}
	urls := writeFile(t, dir, "urls.txt", lines.String())
	for k := 1; k <= 3; k++ {
		out := filepath.Join(dir, fmt.Sprintf("out%d.jsonl", k))
		f.outs = append(f.outs, out)
		f.procs = append(f.procs, startFetch(t, "", "-q", "-c", "16", "--proxy-concurrency", fmt.Sprint(f.cap),
			"--redis", redis(k), "--namespace", "t1", "--shard", fmt.Sprintf("%d/3", k), "--lease-ttl", "2s",
			"--proxy", f.pxs[0].URL, "--proxy", f.pxs[1].URL, "-o", out, urls))
	}
	return f
}

// underway waits until the processes have written some records.
func (f *fleet) underway(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, "15 records", func() bool {
		lines := 0
		for _, out := range f.outs {
			b, _ := os.ReadFile(out)
			lines += strings.Count(string(b), "\n")
		}
		return lines >= 15
	}, func() {
		for i, p := range f.procs {
			t.Logf("process %d stderr:\n%s", i+1, p.stderr)
		}
	})
}

// running fails t unless some process still runs: what the test did
// happened mid-run.
func (f *fleet) running(t *testing.T, what string) {
	t.Helper()
	for _, p := range f.procs {
		if p.running() {
			return
		}
	}
	t.Errorf("every process had ended before %s: make the run longer", what)
}

// check waits for the processes and checks that no proxy had more than
// its cap in flight, counted at the proxy, and that every line has one
// record: ok, or failed closed (kind coordinator) and then at most that.
func (f *fleet) check(t *testing.T) {
	t.Helper()
	for i, p := range f.procs {
		if code := p.wait(t, 2*time.Minute); code != ExitOK && code != ExitNotAllOK {
			t.Errorf("process %d: exit %d; stderr:\n%s", i+1, code, p.stderr.String())
		}
	}
	perLine := map[int]int{}
	byKind := map[string]int{}
	for _, out := range f.outs {
		for _, r := range recordsOf(t, out) {
			perLine[r.Line]++
			switch {
			case r.OK:
				byKind["ok"]++
			case r.Error != nil && r.Error.Kind == results.KindCoordinator:
				byKind[r.Error.Kind]++
			default:
				t.Errorf("line %d failed, not closed: %+v", r.Line, r.Error)
			}
		}
	}
	for line := 1; line <= f.n; line++ {
		if perLine[line] != 1 {
			t.Errorf("line %d has %d records, want 1", line, perLine[line])
		}
	}
	t.Logf("records: %v", byKind)
	for i, p := range f.pxs {
		st := p.Stats()
		t.Logf("proxy %d: %d requests, at most %d in flight (cap %d)", i, st.Requests, st.MaxInFlight, f.cap)
		if st.MaxInFlight > f.cap {
			t.Errorf("proxy %d had %d in flight at once across the processes, cap %d", i, st.MaxInFlight, f.cap)
		}
	}
}

// TestDistributed_cluster: three processes share limits through a real
// Redis Cluster of 3 masters, each process told a different node (one
// address of a cluster_enabled node: the cluster client follows MOVED),
// and the namespace's slot migrates to another node mid-run. No proxy
// is ever over its cap, and every line gets one record. Before, a node
// that did not own the slot gave exit 2 (MOVED 1745 ...).
func TestDistributed_cluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	f := startFleet(t, func(k int) string { return cl.URLs[k-1] })
	f.underway(t)
	slot := cl.Slot("{t1}:limits")
	from := cl.NodeFor(slot)
	to := (from + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.MigrateSlot(ctx, slot, to); err != nil {
		t.Fatal(err)
	}
	f.running(t, "the slot moved")
	t.Logf("slot %d moved from node %d to node %d mid-run", slot, from, to)
	f.check(t)
	if got := cl.NodeFor(slot); got != to {
		t.Errorf("slot %d is on node %d, want %d", slot, got, to)
	}
}

// TestDistributed_sentinel: three processes share limits through the
// master a real Sentinel names (redis+sentinel://), and the master fails
// over to its replica mid-run. No proxy is ever over its cap, and every
// line gets one record.
func TestDistributed_sentinel(t *testing.T) {
	s := redistest.StartSentinel(t)
	f := startFleet(t, func(int) string { return s.URL })
	f.underway(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	master, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.running(t, "the failover")
	t.Logf("failed over to %s mid-run", master)
	f.check(t)
}
