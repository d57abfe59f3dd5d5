package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch/results"
)

// summaryPhases are the candidates for the per-proxy phase columns of the
// summary, each shown as p50/p95 in milliseconds, most wanted first: at most
// maxPhaseColumns of those that happened are shown, in the order of
// fetch.Phases. The report has every phase.
var summaryPhases = []string{results.PhaseHeaders, results.PhaseBody, results.PhaseConnect, results.PhaseProxy, results.PhaseTLS, results.PhaseQueue}

const maxPhaseColumns = 4

// phaseColumns picks the phase columns for proxies.
func phaseColumns(proxies map[string]*Proxy) []string {
	var cols []string
	for _, ph := range summaryPhases {
		for _, p := range proxies {
			if _, ok := p.PhasesMS[ph]; ok {
				cols = append(cols, ph)
				break
			}
		}
		if len(cols) == maxPhaseColumns {
			break
		}
	}
	slices.SortFunc(cols, func(a, b string) int { return slices.Index(results.Phases, a) - slices.Index(results.Phases, b) })
	return cols
}

// Bounds of the summary: it fits a screen whatever the run. The tables show
// the summaryTop busiest rows and the summaryTop most failing others; the
// report holds them all. A table's first column (a proxy's identity, a
// host) is cut in the middle when the line would be wider than
// summaryWidth, to no less than minNameCell.
const (
	summaryTop    = 7
	summaryWidth  = 100
	minNameCell   = 24
	summaryIndent = "    "
)

// WriteSummary prints the human summary of r (the table fetch prints on
// stderr at the end of a run, and fetch summarize on stdout): the totals, the failed
// records by error kind and phase, the busiest and the most failing proxies
// (a pool as one row) and hosts, and how many more the report holds.
func WriteSummary(w io.Writer, r *Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw)
	if r.Stopped != "" {
		fmt.Fprintf(tw, "stopped early: %s\n", r.Stopped)
	}
	fmt.Fprintf(tw, "jobs\tok\tfailed\telapsed\trate\n")
	rate := "-"
	if r.ElapsedMS > 0 {
		rate = sig3(float64(r.Jobs)/(r.ElapsedMS/1000)) + "/s"
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\n", r.Jobs, r.OK, r.Failed, fmtElapsed(r.ElapsedMS), rate)
	tw.Flush()
	if r.Interrupted {
		fmt.Fprintln(w, "(interrupted)")
	}
	if len(r.ByKind) > 0 {
		kinds := sortedKeys(r.ByKind)
		slices.SortStableFunc(kinds, func(a, b string) int { return cmp.Compare(r.ByKind[b], r.ByKind[a]) })
		writeWrapped(w, "failed by kind:  ", countList(r.ByKind, kinds))
	}
	if len(r.ByPhase) > 0 {
		writeWrapped(w, "failed by phase: ", countList(r.ByPhase, phaseOrder(r.ByPhase)))
	}
	if len(r.Proxies) > 0 || r.ProxiesOther != nil {
		writeProxies(w, r.Proxies, r.ProxiesOther)
	}
	if len(r.Hosts) > 0 || r.HostsOther != nil {
		writeHosts(w, r.Hosts, r.HostsOther)
	}
}

// summaryRow is one row of a table: a proxy, a pool, or a host.
type summaryRow struct {
	name             string
	attempts, failed int
	cells            []string // the other columns
}

// pickRows returns the rows to show, in order: the summaryTop busiest, then
// the summaryTop most failing of the others; all of them when they are
// few.
func pickRows(rows []summaryRow) []summaryRow {
	slices.SortFunc(rows, func(a, b summaryRow) int {
		return cmp.Or(cmp.Compare(b.attempts, a.attempts), strings.Compare(a.name, b.name))
	})
	if len(rows) <= 2*summaryTop {
		return rows
	}
	shown := slices.Clone(rows[:summaryTop])
	rest := slices.Clone(rows[summaryTop:])
	slices.SortStableFunc(rest, func(a, b summaryRow) int { return cmp.Compare(b.failed, a.failed) })
	for _, r := range rest[:summaryTop] {
		if r.failed > 0 {
			shown = append(shown, r)
		}
	}
	return shown
}

// writeProxies prints the proxy table: a pool is one row, with the
// attempts of its members the report does not list (other) added in; and
// a line for the proxies the report does not list, when there are any.
func writeProxies(w io.Writer, proxies map[string]*Proxy, other *ProxiesOther) {
	cols := phaseColumns(proxies)
	type pool struct {
		row     summaryRow
		members []*Proxy
	}
	pools := map[string]*pool{}
	var rows []summaryRow
	var changed int
	states := map[string]int{}
	for _, id := range sortedKeys(proxies) {
		p := proxies[id]
		if p.State != "" {
			changed++
			states[p.State]++
		}
		if p.Pool == "" {
			rows = append(rows, summaryRow{name: id, attempts: p.Attempts, failed: p.Failed, cells: phaseCells(cols, []*Proxy{p})})
			continue
		}
		pl := pools[p.Pool]
		if pl == nil {
			pl = &pool{}
			pools[p.Pool] = pl
		}
		pl.row.attempts += p.Attempts
		pl.row.failed += p.Failed
		pl.members = append(pl.members, p)
	}
	var unlisted map[string]*Counts
	unlistedChanged := 0
	if other != nil {
		unlisted = other.Pools
		for st, n := range other.States {
			unlistedChanged += n
			states[st] += n
		}
		changed += unlistedChanged
	}
	for name, c := range unlisted {
		pl := pools[name]
		if pl == nil {
			pl = &pool{}
			pools[name] = pl
		}
		pl.row.attempts += c.Attempts
		pl.row.failed += c.Failed
	}
	for _, name := range sortedKeys(pools) {
		pl := pools[name]
		switch {
		case unlisted[name] != nil:
			pl.row.name = fmt.Sprintf("pool %s (%d listed, and others)", name, len(pl.members))
		case other != nil && other.PoolsDropped:
			pl.row.name = fmt.Sprintf("pool %s (%d listed)", name, len(pl.members)) // its others, if any, are only in the line below
		default:
			pl.row.name = fmt.Sprintf("pool %s (%d)", name, len(pl.members))
		}
		pl.row.cells = phaseCells(cols, pl.members)
		rows = append(rows, pl.row)
	}
	all := len(rows)
	shown := pickRows(rows)

	fmt.Fprintln(w)
	n := len(proxies)
	if other != nil {
		n += other.Proxies
	}
	title := "proxies: " + strconv.Itoa(n)
	if len(pools) > 0 {
		title += " (a pool is one row)"
	}
	if len(shown) < all {
		title += fmt.Sprintf(": the %d busiest and the %d most failing", summaryTop, summaryTop)
	}
	if len(shown) == 0 {
		fmt.Fprintln(w, title)
	} else {
		fmt.Fprintln(w, title+"; phases p50/p95 in ms")
		writeTable(w, append([]string{"proxy", "attempts", "failed"}, cols...), shown)
	}
	if len(shown) < all {
		fmt.Fprintf(w, "... and %d more in the report\n", all-len(shown))
	}
	if other != nil {
		line := fmt.Sprintf("... and %s not listed (--report-proxies): %d attempts, %d failed",
			plural(other.Proxies, "other proxy", "other proxies"), other.Attempts, other.Failed)
		// The pool rows above have the attempts of their unlisted members
		// already: say so, lest they be added up twice.
		var inPools Counts
		for _, c := range unlisted {
			inPools.Attempts += c.Attempts
			inPools.Failed += c.Failed
		}
		if inPools.Attempts > 0 {
			line += fmt.Sprintf(", of which %d attempts and %d failed in the pool rows above", inPools.Attempts, inPools.Failed)
		}
		fmt.Fprintln(w, line)
	}
	if changed > 0 {
		var ends []string
		for _, st := range sortedKeys(states) {
			ends = append(ends, fmt.Sprintf("%s %d", st, states[st]))
		}
		when := "the report says when"
		switch {
		case changed == unlistedChanged:
			when = "the report lists none of them"
		case unlistedChanged > 0:
			when += " for those it lists"
		}
		fmt.Fprintf(w, "health: %s changed state (%s); at the end %s\n", plural(changed, "proxy", "proxies"), when, strings.Join(ends, ", "))
	}
}

// writeHosts prints the host table, and a line for the hosts the report
// does not list (other), when there are any.
func writeHosts(w io.Writer, hosts map[string]*Host, other *HostsOther) {
	rows := make([]summaryRow, 0, len(hosts))
	for h, x := range hosts {
		inFlight := "-" // unknown, as in a report rebuilt from records
		if x.MaxInFlight > 0 {
			inFlight = strconv.Itoa(x.MaxInFlight)
		}
		rows = append(rows, summaryRow{name: h, attempts: x.Attempts, failed: x.Failed, cells: []string{inFlight}})
	}
	shown := pickRows(rows)
	fmt.Fprintln(w)
	title := "hosts: " + strconv.Itoa(len(hosts))
	if len(shown) < len(rows) {
		title += fmt.Sprintf(": the %d busiest and the %d most failing", summaryTop, summaryTop)
	}
	fmt.Fprintln(w, title)
	writeTable(w, []string{"host", "attempts", "failed", "max in flight"}, shown)
	if len(shown) < len(rows) {
		fmt.Fprintf(w, "... and %d more hosts in the report\n", len(rows)-len(shown))
	}
	if other != nil {
		fmt.Fprintf(w, "... and %s not listed (--report-hosts): %d attempts, %d failed\n",
			plural(other.Hosts, "other host", "other hosts"), other.Attempts, other.Failed)
	}
}

// writeTable writes the rows under head, aligned, cutting the names so
// that the lines fit summaryWidth columns.
func writeTable(w io.Writer, head []string, rows []summaryRow) {
	cells := make([][]string, 0, len(rows)+1)
	cells = append(cells, head)
	for _, r := range rows {
		cells = append(cells, append([]string{r.name, strconv.Itoa(r.attempts), strconv.Itoa(r.failed)}, r.cells...))
	}
	widths := make([]int, len(head))
	for _, row := range cells {
		for i, c := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	others := 2 * (len(head) - 1) // the gaps
	for _, wd := range widths[1:] {
		others += wd
	}
	nameCell := max(summaryWidth-others, minNameCell)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range cells {
		row[0] = cut(row[0], nameCell)
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// phaseCells are the phase columns cols of a proxy, or of the proxies of a pool:
// for a pool, each quantile is the middle one of its proxies', weighted by
// their attempts.
func phaseCells(cols []string, ps []*Proxy) []string {
	cells := make([]string, 0, len(cols))
	for _, ph := range cols {
		var p50, p95 []weighted
		for _, p := range ps {
			if q, ok := p.PhasesMS[ph]; ok {
				p50 = append(p50, weighted{q.P50, p.Attempts})
				p95 = append(p95, weighted{q.P95, p.Attempts})
			}
		}
		if len(p50) == 0 {
			cells = append(cells, "-")
			continue
		}
		cells = append(cells, fmtMS(weightedMedian(p50))+"/"+fmtMS(weightedMedian(p95)))
	}
	return cells
}

type weighted struct {
	v float64
	w int
}

// weightedMedian is the value below which half the weight lies.
func weightedMedian(xs []weighted) float64 {
	slices.SortFunc(xs, func(a, b weighted) int { return cmp.Compare(a.v, b.v) })
	total := 0
	for _, x := range xs {
		total += max(x.w, 1)
	}
	seen := 0
	for _, x := range xs {
		seen += max(x.w, 1)
		if 2*seen >= total {
			return x.v
		}
	}
	return xs[len(xs)-1].v
}

// countList is "key N" for each of keys, N its count in m.
func countList(m map[string]int, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return out
}

// writeWrapped writes head and the items, comma-separated, wrapped to
// summaryWidth columns.
func writeWrapped(w io.Writer, head string, items []string) {
	line := head
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		}
		if i > 0 && len(line)+1+len(it) > summaryWidth {
			fmt.Fprintln(w, line)
			line = summaryIndent + it
			continue
		}
		if i > 0 {
			line += " "
		}
		line += it
	}
	fmt.Fprintln(w, line)
}

// cut shortens s to at most n runes, keeping its start and its end (the
// port and the hash of an identity) around "…".
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	tail := n / 2
	return string(r[:n-1-tail]) + "…" + string(r[len(r)-tail:])
}

// fmtMS formats milliseconds for people: one decimal below 100, none up to
// 10 seconds, then seconds to 3 significant figures ("12.3s").
func fmtMS(ms float64) string {
	switch {
	case ms >= 10_000:
		return sig3(ms/1000) + "s"
	case ms >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64)
	}
	return strconv.FormatFloat(ms, 'f', 1, 64)
}

// fmtElapsed formats a run's milliseconds for people: 3 significant figures
// under a minute ("532ms", "24.9s"), whole seconds under an hour ("4m5s"),
// whole minutes after ("2h10m"); "-" when unknown (0).
func fmtElapsed(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	switch {
	case ms <= 0:
		return "-"
	case roundSig3(ms) < 1000:
		return sig3(ms) + "ms"
	case d < time.Minute:
		return sig3(ms/1000) + "s"
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
}

// sig3 formats v to 3 significant figures, without an exponent: 48.9,
// 1.23, 1230.
func sig3(v float64) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	r := roundSig3(v)
	d := 2 - int(math.Floor(math.Log10(math.Abs(r)))) // of r: 9.996 rounds up to 10.0
	return strconv.FormatFloat(r, 'f', max(d, 0), 64)
}

// roundSig3 rounds v to 3 significant figures.
func roundSig3(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	d := 2 - int(math.Floor(math.Log10(math.Abs(v))))
	p := math.Pow(10, float64(d))
	return math.Round(v*p) / p
}

// phaseOrder lists the keys of m in the order of fetch.Phases, then any
// other key sorted.
func phaseOrder(m map[string]int) []string {
	var out []string
	known := map[string]bool{}
	for _, p := range results.Phases {
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

// count is n and the noun, plural (with an s) when n is not 1.
func count(n int, noun string) string { return plural(n, noun, noun+"s") }

// plural is n and one or many.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
