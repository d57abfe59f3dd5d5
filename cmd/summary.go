package cmd

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fetch-dev/fetch/fetch"
)

// summaryPhases are the per-proxy phase columns of the summary, each shown
// as p50/p95 in milliseconds.
var summaryPhases = []string{fetch.PhaseQueue, fetch.PhaseConnect, fetch.PhaseProxy, fetch.PhaseTLS, fetch.PhaseHeaders, fetch.PhaseBody}

// writeSummary prints the human summary of r: the totals, the records by
// error kind and phase, one row per proxy and one per host.
func writeSummary(w io.Writer, r *fetch.Report) {
	elapsed := time.Duration(r.ElapsedMS * float64(time.Millisecond))
	rate := 0.0
	if r.ElapsedMS > 0 {
		rate = float64(r.Jobs) / (r.ElapsedMS / 1000)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw)
	if r.Stopped != "" {
		fmt.Fprintf(tw, "stopped early: %s\n", r.Stopped)
	}
	fmt.Fprintf(tw, "jobs\tok\tfailed\telapsed\trate\n")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.1f/s\n", r.Jobs, r.OK, r.Failed, elapsed.Round(time.Millisecond), rate)
	if r.Interrupted {
		fmt.Fprintln(tw, "(interrupted)")
	}
	if len(r.ByKind) > 0 {
		fmt.Fprintf(tw, "\nfailed by kind\trecords\n")
		for _, k := range sortedKeys(r.ByKind) {
			fmt.Fprintf(tw, "%s\t%d\n", k, r.ByKind[k])
		}
	}
	if len(r.ByPhase) > 0 {
		fmt.Fprintf(tw, "\nfailed by phase\trecords\n")
		for _, p := range phaseOrder(r.ByPhase) {
			fmt.Fprintf(tw, "%s\t%d\n", p, r.ByPhase[p])
		}
	}
	tw.Flush()

	if len(r.Proxies) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w)
		fmt.Fprintln(w, "per proxy; phases are p50/p95 in ms")
		head := append([]string{"proxy", "pool", "health", "attempts", "ok", "failed", "max in flight"}, summaryPhases...)
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, id := range sortedKeys(r.Proxies) {
			p := r.Proxies[id]
			pool := p.Pool
			if pool == "" {
				pool = "-"
			}
			row := []string{id, pool, healthCell(p), strconv.Itoa(p.Attempts), strconv.Itoa(p.OK), strconv.Itoa(p.Failed), strconv.Itoa(p.MaxInFlight)}
			for _, ph := range summaryPhases {
				row = append(row, quantileCell(p.PhasesMS, ph))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
		tw.Flush()
	}

	if len(r.Hosts) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "host\tattempts\tok\tfailed\tmax in flight")
		for _, h := range sortedKeys(r.Hosts) {
			x := r.Hosts[h]
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", h, x.Attempts, x.OK, x.Failed, x.MaxInFlight)
		}
		tw.Flush()
	}
}

// healthCell is a proxy's health at the end of the run and how often it was
// benched: "-" when it never changed state.
func healthCell(p *fetch.ProxyReport) string {
	if p.State == "" {
		return "-"
	}
	benched := 0
	for _, sc := range p.Health {
		if sc.State == "benched" {
			benched++
		}
	}
	return fmt.Sprintf("%s, benched %d×", p.State, benched)
}

// quantileCell formats one phase's p50/p95, or "-" when it never happened.
func quantileCell(m map[string]fetch.Quantiles, phase string) string {
	q, ok := m[phase]
	if !ok {
		return "-"
	}
	return fmtMS(q.P50) + "/" + fmtMS(q.P95)
}

// fmtMS formats milliseconds with one decimal below 100 and none above.
func fmtMS(ms float64) string {
	if ms >= 100 {
		return strconv.FormatFloat(ms, 'f', 0, 64)
	}
	return strconv.FormatFloat(ms, 'f', 1, 64)
}

// phaseOrder lists the keys of m in the order of fetch.Phases, then any
// other key sorted.
func phaseOrder(m map[string]int) []string {
	var out []string
	known := map[string]bool{}
	for _, p := range fetch.Phases {
		known[p] = true
		if _, ok := m[p]; ok {
			out = append(out, p)
		}
	}
	for _, k := range sortedKeys(m) {
		if !known[k] {
			out = append(out, k)
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
