package fetch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// hostLines is an io.Reader of n URL lines, each to a host of its own:
// 127.x.y.z port 1, where nothing listens, so each attempt is refused at
// once on loopback.
type hostLines struct {
	n, i int
	line []byte
	off  int
}

func (h *hostLines) Read(p []byte) (int, error) {
	for h.off == len(h.line) {
		if h.i == h.n {
			return 0, io.EOF
		}
		x, y, z := 1+h.i/(256*254), h.i/254%256, 1+h.i%254
		h.line, h.off = fmt.Appendf(h.line[:0], "http://127.%d.%d.%d:1/\n", x, y, z), 0
		h.i++
	}
	n := copy(p, h.line[h.off:])
	h.off += n
	return n, nil
}

// TestReport_manyHosts runs 3,000 URLs on as many hosts with a report of
// 100 hosts: 100 are listed, the rest is counted in hosts_other, every
// attempt is counted once, and the report stays small.
func TestReport_manyHosts(t *testing.T) {
	const n, listed = 3000, 100
	cfg := fetch.DefaultConfig()
	cfg.Retries = 0
	cfg.ReportHosts = listed
	e, err := fetch.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rep, err := e.Run(context.Background(), []input.Source{{Name: "-", R: &hostLines{n: n}}}, results.NewJSONLWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Jobs != n || rep.ByKind[results.KindRefused] != n {
		t.Fatalf("jobs %d, by kind %v; want %d refused", rep.Jobs, rep.ByKind, n)
	}
	if len(rep.Hosts) != listed || rep.HostsOther == nil {
		t.Fatalf("%d hosts listed, hosts_other %+v; want %d and the rest", len(rep.Hosts), rep.HostsOther, listed)
	}
	attempts := rep.HostsOther.Attempts
	for h, r := range rep.Hosts {
		attempts += r.Attempts
		if r.Failed != r.Attempts || r.OK != 0 {
			t.Errorf("%s: %+v, want every attempt failed", h, r)
		}
	}
	if attempts != n || rep.HostsOther.Failed != rep.HostsOther.Attempts {
		t.Errorf("attempts add up to %d, want %d; hosts_other %+v", attempts, n, rep.HostsOther)
	}
	if o := rep.HostsOther.Hosts; o < (n-listed)*98/100 || o > (n-listed)*102/100 {
		t.Errorf("hosts_other.hosts = %d, want about %d", o, n-listed)
	}
	data, _ := json.Marshal(rep)
	if len(data) > 16<<10 {
		t.Errorf("report of %d bytes, want under 16 KiB", len(data))
	}
}
