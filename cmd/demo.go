package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	// Named lb: cmd tests have a type named loopback.
	lb "github.com/fetch-dev/fetch/internal/loopback"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/spf13/cobra"
)

// DemoOptions is what `fetch demo` was asked to do.
type DemoOptions struct {
	IO     *IOStreams
	URLs   int    // how many URLs to fetch
	Output string // results file; "" discards them, "-" is standard output
	Quiet  bool

	Metrics metricsOptions // --metrics, --metrics-linger, --metrics-proxies
}

// demoProxies are the three loopback proxies of the demo: each has its own
// capacity (enforced by the proxy, and given to fetch as the proxy's
// concurrency) and latency, so the summary shows the work spread by
// capacity.
var demoProxies = []struct {
	concurrency int
	latency     time.Duration
}{
	{2, 150 * time.Millisecond},
	{4, 80 * time.Millisecond},
	{8, 40 * time.Millisecond},
}

// NewCmdDemo returns the demo command. runF replaces the run function in
// tests; nil runs demoRun.
func NewCmdDemo(ios *IOStreams, runF func(*DemoOptions) error) *cobra.Command {
	opts := &DemoOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Fetch a few hundred URLs through three proxies, all on loopback",
		Long: `demo starts, on loopback, a small target site and three HTTP forward proxies of
different capacities (concurrency 2, 4 and 8), fetches --urls URLs through them with
the real pipeline (some slow bodies, some planned failures that are retried), and
prints the progress bar and the summary. It exits 0 when every record is ok.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.URLs < 1 || opts.URLs > maxCount {
				return usageErrorf("--urls %d: want an integer from 1 to %d", opts.URLs, maxCount)
			}
			if err := opts.Metrics.check(); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return demoRun(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.IntVar(&opts.URLs, "urls", 300, "`N` URLs to fetch")
	f.StringVarP(&opts.Output, "output", "o", "", "results, JSON lines, to `FILE` (default: discarded; - is standard output)")
	f.BoolVarP(&opts.Quiet, "quiet", "q", false, "no progress bar, no summary on stderr")
	opts.Metrics.flags(f)
	return cmd
}

// demoRun starts the loopback servers, runs the engine over the demo URLs
// and stops the servers.
func demoRun(ctx context.Context, opts *DemoOptions) (err error) {
	ios := opts.IO
	out := io.Writer(io.Discard)
	switch opts.Output {
	case "":
	case "-":
		out = ios.Out
	default:
		var results *outputFile
		if results, err = createOutput("--output", opts.Output); err != nil {
			return usageError(err)
		}
		defer func() {
			if cerr := results.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--output: %w", cerr)
			}
		}()
		out = results.f
	}

	target, err := lb.StartTarget(lb.TargetOptions{})
	if err != nil {
		return fmt.Errorf("demo: starting the target: %w", err)
	}
	defer target.Close()

	cfg := fetch.DefaultConfig()
	cfg.Concurrency = 32
	cfg.RetryBackoff = 20 * time.Millisecond
	cfg.Timeout = 20 * time.Second
	for i, dp := range demoProxies {
		p, err := lb.StartHTTPProxy(lb.ProxyOptions{
			BindIP: lb.IP(i), Latency: dp.latency, Concurrency: dp.concurrency,
		})
		if err != nil {
			return fmt.Errorf("demo: starting proxy %d: %w", i+1, err)
		}
		defer p.Close()
		u, err := url.Parse(p.URL)
		if err != nil {
			return fmt.Errorf("demo: proxy %d: %w", i+1, err)
		}
		px := proxies.FromURL(u)
		px.Concurrency, px.From, px.Line = dp.concurrency, "demo", int32(i+1)
		cfg.Proxies = append(cfg.Proxies, px)
	}

	mx, err := startMetrics(&opts.Metrics, cfg.Proxies, notesTo(ios, opts.Quiet))
	if err != nil {
		return usageError(err)
	}
	ran := false
	defer func() { mx.stop(ctx, ran) }()
	if mx != nil {
		cfg.Observer = mx.m
	}
	eng, err := fetch.New(cfg)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer eng.Close()
	if mx != nil {
		mx.m.Watch(eng)
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeDemoURLs(pw, target.URL, opts.URLs)) }()
	defer pr.CloseWithError(errors.New("demo: run over"))

	var total func(context.Context) int64
	if !opts.Quiet && ios.IsStderrTTY() {
		n := int64(opts.URLs)
		total = func(context.Context) int64 { return n }
	}
	inputs := []input.Source{{Name: "demo", R: pr}}
	warn := newWarnings(ios.stderr(), opts.Quiet)
	defer routeLog(warn)()
	ran = true
	report, runErr := runEngine(ctx, ios, warn, eng, inputs, out, opts.Quiet, total)
	return runResult(report, runErr)
}

// writeDemoURLs writes n URL lines of base: a mix of body sizes, some slow
// (dripped) bodies and delayed headers, and some URLs that fail once with a
// retried status before they succeed. Each URL is unique.
func writeDemoURLs(w io.Writer, base string, n int) error {
	sizes := []int{512, 4 << 10, 32 << 10, 128 << 10}
	bw := bufio.NewWriter(w)
	for i := range n {
		q := fmt.Sprintf("id=%d&size=%d", i, sizes[i%len(sizes)])
		switch {
		case i%25 == 7:
			q += "&fail=1"
		case i%10 == 3:
			q += "&chunks=8&drip=50ms"
		case i%10 == 6:
			q += "&delay=100ms"
		}
		if _, err := fmt.Fprintf(bw, "%s/demo?%s\n", base, q); err != nil {
			return err
		}
	}
	return bw.Flush()
}
