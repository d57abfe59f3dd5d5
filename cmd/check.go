package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"
)

// CheckOptions is what `fetch check` was asked to do.
type CheckOptions struct {
	IO     *IOStreams
	Config fetch.Config // the usual limits and timeouts; Proxies are the ones checked

	ProxyFiles []string
	ProxyURLs  []string
	Headers    []string
	CACert     string
	URL        string
	Count      int    // attempts through each proxy
	Output     string // JSON lines, one per proxy; "" for none
}

// CheckResult is one proxy's line of `fetch check -o`.
type CheckResult struct {
	Proxy    string             `json:"proxy"`
	Pool     string             `json:"pool,omitempty"`
	OK       bool               `json:"ok"` // every attempt got a whole response with a status not in --retry-status
	Status   int                `json:"status"`
	Attempts int                `json:"attempts"`
	Phases   results.PhaseTimes `json:"phases"`
	Error    *results.Error     `json:"error"`
	ExitIP   string             `json:"exit_ip,omitempty"`
}

// NewCmdCheck returns the check command. runF replaces the run function in
// tests; nil runs checkRun.
func NewCmdCheck(ios *IOStreams, runF func(*CheckOptions) error) *cobra.Command {
	opts := &CheckOptions{IO: ios, Config: fetch.DefaultConfig(), Count: 1}
	cfg := &opts.Config
	cfg.Concurrency = 16
	cmd := &cobra.Command{
		Use:   "check [-p FILE]... [--proxy URL]... --url URL [--count N] [-o FILE]",
		Short: "Try every proxy of the lists against a URL and say which are usable",
		Long: `check tries every proxy of the lists against --url, --count times each, within
the usual limits and timeouts, and prints a table with a row per proxy: usable or
not, the failed phase and kind, the phase times, and the address the target saw
when --url answers with the caller's address (plain text, or a JSON field "ip" or
"origin"). With -o, one JSON line per proxy. Exit 0 when every proxy is usable,
1 when any is not.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := opts.complete(); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return checkRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringArrayVarP(&opts.ProxyFiles, "proxies", "p", nil, "proxy list `FILE` (repeatable)")
	f.StringArrayVar(&opts.ProxyURLs, "proxy", nil, "one proxy `URL` (repeatable)")
	f.StringVar(&opts.URL, "url", "", "the `URL` every proxy fetches")
	f.IntVar(&opts.Count, "count", opts.Count, "`N` attempts through each proxy")
	f.StringVarP(&opts.Output, "output", "o", "", "one JSON line per proxy to `FILE` (- is standard output, after the table)")
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", cfg.Concurrency, "`N` proxies checked at once")
	f.IntVar(&cfg.ProxyConcurrency, "proxy-concurrency", cfg.ProxyConcurrency, "`N` attempts in flight per proxy or pool")
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "`D`: dns + tcp connect + proxy handshake + tls, one attempt")
	f.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "`D`: request written -> response headers, one attempt")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "`D` with no bytes of progress while sending or receiving")
	f.DurationVarP(&cfg.Timeout, "timeout", "t", cfg.Timeout, "`D` for one attempt, everything included")
	f.Var(statusListValue{&cfg.RetryStatus}, "retry-status", "statuses that make an attempt fail")
	f.StringArrayVarP(&opts.Headers, "header", "H", nil, "request `HEADER` \"K: V\" (repeatable)")
	f.BoolVarP(&cfg.Insecure, "insecure", "k", false, "do not verify the target's TLS certificate")
	f.StringVar(&opts.CACert, "cacert", "", "trust the PEM certificates in `FILE` (target and https proxies)")
	return cmd
}

// complete checks the flags and reads the proxy lists.
func (opts *CheckOptions) complete() error {
	cfg := &opts.Config
	switch {
	case opts.URL == "":
		return errors.New("--url is required: the URL every proxy fetches")
	case len(opts.ProxyFiles) == 0 && len(opts.ProxyURLs) == 0:
		return errors.New("no proxy to check: give -p FILE or --proxy URL")
	case opts.Count < 1 || opts.Count > maxCount:
		return fmt.Errorf("--count %d: want an integer from 1 to %d", opts.Count, maxCount)
	}
	if err := completeConfig(cfg, opts.Headers, opts.CACert); err != nil {
		return err
	}
	// Every proxy is tried, whatever its health: nothing is benched, no
	// attempt is retried elsewhere, and the pool never gives up. A proxy
	// that refuses its credentials is the exception: it is not tried
	// again (a wrong password stays wrong, and a provider may ban the
	// address that keeps sending it), so its row may count fewer attempts
	// than --count.
	cfg.Retries = 0
	cfg.ProxyMaxFailures = 0
	cfg.PoolWait = 0
	cfg.HostMaxFailures = 0 // each proxy is tried --count times, whatever the URL's host does
	cfg.KeepBody = exitIPBody
	list, err := proxies.Load(opts.ProxyFiles, opts.ProxyURLs, newWarnings(opts.IO.stderr(), false).warn)
	if err != nil {
		return err
	}
	cfg.Proxies = list
	return nil
}

// exitIPBody is how much of a body check reads for the caller's address.
const exitIPBody = 4 << 10

// checkRun tries every proxy and prints the table (and the JSON lines).
func checkRun(ctx context.Context, opts *CheckOptions) (err error) {
	ios := opts.IO
	var out *outputFile
	if opts.Output != "" && opts.Output != "-" {
		if err := checkFiles(opts.inputFiles(), []namedFile{{role: "--output", name: opts.Output}}); err != nil {
			return usageError(err)
		}
		if out, err = createOutput("--output", opts.Output); err != nil {
			return usageError(err)
		}
		defer func() {
			if cerr := out.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--output: %w", cerr)
			}
		}()
	}
	warn := newWarnings(ios.stderr(), false)
	opts.Config.Warn = warn.warn
	defer routeLog(warn)()
	results, err := checkProxies(ctx, opts)
	if err != nil {
		return err
	}
	writeCheckTable(ios.Out, results)
	var jw io.Writer
	switch {
	case out != nil:
		jw = out.f
	case opts.Output == "-":
		jw = ios.Out
	}
	if jw != nil {
		enc := json.NewEncoder(jw)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return fmt.Errorf("--output: %w", err)
			}
		}
	}
	if ctx.Err() != nil {
		return context.Canceled
	}
	for _, r := range results {
		if !r.OK {
			return ErrNotAllOK
		}
	}
	return nil
}

// inputFiles are the files check reads, for checkFiles.
func (opts *CheckOptions) inputFiles() []namedFile {
	var fs []namedFile
	for _, name := range opts.ProxyFiles {
		fs = append(fs, namedFile{role: "proxy list", name: name})
	}
	if opts.CACert != "" {
		fs = append(fs, namedFile{role: "--cacert", name: opts.CACert})
	}
	return fs
}

// checkProxies runs --count attempts of the URL through each proxy, with
// an engine of its own so that every attempt goes through that proxy, and
// returns one result per proxy in the order of the lists. At most -c
// proxies are checked at once.
func checkProxies(ctx context.Context, opts *CheckOptions) ([]CheckResult, error) {
	results := make([]CheckResult, len(opts.Config.Proxies))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(opts.Config.Concurrency)
	lines := strings.Repeat(opts.URL+"\n", opts.Count)
	for i, p := range opts.Config.Proxies {
		g.Go(func() error {
			cfg := opts.Config
			cfg.Proxies = []proxies.Proxy{p}
			cfg.Concurrency = min(opts.Count, max(cfg.ProxyConcurrency, p.Concurrency))
			e, err := fetch.New(cfg)
			if err != nil {
				return err
			}
			defer e.Close()
			rw := &checkRecords{}
			// A proxy the engine rejected (a wrong password, say) stops
			// its run with limits.ErrNoUsableProxy: that is this proxy's
			// row, not a broken dependency of the check.
			_, err = e.Run(ctx, []input.Source{{Name: "check", R: strings.NewReader(lines)}}, rw)
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, limits.ErrNoUsableProxy) {
				return err
			}
			results[i] = rw.result(p)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return results, nil
}

// checkRecords collects one proxy's records into its CheckResult.
type checkRecords struct {
	mu   sync.Mutex
	recs []*results.Record
}

func (c *checkRecords) Write(r *results.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r)
	return nil
}

// result is the proxy's row: ok when every attempt was, with the status,
// phases and error of the last failed attempt (of the last one when none
// failed), and the exit address of the last one that showed it. A URL
// cancelled before its attempt, because the proxy was rejected meanwhile,
// fails the row but does not hide the failure that rejected the proxy.
func (c *checkRecords) result(p proxies.Proxy) CheckResult {
	res := CheckResult{Proxy: p.ID, Pool: p.Pool, OK: len(c.recs) > 0}
	var shown *results.Record
	for _, r := range c.recs {
		res.Attempts += r.Attempts
		cancelled := r.Error != nil && r.Error.Kind == results.KindCancelled
		switch {
		case !r.OK && (!cancelled || shown == nil || shown.OK):
			shown = r
		case r.OK && res.OK:
			shown = r
		}
		if !r.OK {
			res.OK = false
		}
		if ip := exitIP(r.Body); ip != "" {
			res.ExitIP = ip
		}
	}
	if shown != nil {
		res.Status, res.Phases, res.Error = shown.Status, shown.Phases, shown.Error
	}
	return res
}

// exitIP is the address a body gives as the caller's: the whole body when
// it is one address, or the JSON field "ip" or "origin" (httpbin's, which
// may list several, the first being the caller).
func exitIP(body []byte) string {
	body = bytes.TrimSpace(body)
	if ip := net.ParseIP(string(body)); ip != nil {
		return ip.String()
	}
	var v struct {
		IP     string `json:"ip"`
		Origin string `json:"origin"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	for _, s := range []string{v.IP, v.Origin} {
		first, _, _ := strings.Cut(s, ",")
		if ip := net.ParseIP(strings.TrimSpace(first)); ip != nil {
			return ip.String()
		}
	}
	return ""
}

// checkPhases are the phase columns of the check table, in milliseconds.
var checkPhases = []string{results.PhaseConnect, results.PhaseProxy, results.PhaseTLS, results.PhaseHeaders}

// writeCheckTable prints a row per proxy.
func writeCheckTable(w io.Writer, results []CheckResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "proxy\tpool\tusable\tstatus\tfailed in\t"+strings.Join(checkPhases, "\t")+"\texit ip")
	usable := 0
	for _, r := range results {
		pool, ok, failed, ip := orDash(r.Pool), "no", "-", orDash(r.ExitIP)
		if r.OK {
			ok = "yes"
			usable++
		}
		if r.Error != nil {
			failed = r.Error.Phase + "/" + r.Error.Kind
		}
		status := "-"
		if r.Status > 0 {
			status = strconv.Itoa(r.Status)
		}
		row := []string{r.Proxy, pool, ok, status, failed}
		for _, ph := range checkPhases {
			if ms, found := r.Phases.Get(ph); found {
				row = append(row, strconv.FormatFloat(ms, 'f', 1, 64))
			} else {
				row = append(row, "-")
			}
		}
		fmt.Fprintln(tw, strings.Join(append(row, ip), "\t"))
	}
	tw.Flush()
	fmt.Fprintf(w, "%d of %d proxies usable\n", usable, len(results))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
