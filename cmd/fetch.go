package cmd

import (
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// largePool is the size of a proxy list from which the start's garbage is
// collected before the run (see fetchRun).
const largePool = 10_000

// FetchOptions is everything the fetch command was asked to do. RunE fills
// Config from the flags; the run function does the work.
type FetchOptions struct {
	IO *IOStreams

	Inputs []string // URL files as given; "-" is standard input
	Config fetch.Config

	ProxyFiles []string
	ProxyURLs  []string
	Headers    []string // raw -H values
	CACert     string

	Output string // "" or "-" is standard output
	Report string
	Quiet  bool

	Resume bool // with Output: skip what it finished, append the rest

	Metrics metricsOptions // --metrics, --metrics-linger, --metrics-proxies

	CPUProfile string // --cpuprofile FILE, or ""
	MemProfile string // --memprofile FILE, or ""

	// Distributed mode: with Redis set (once, or several Cluster nodes),
	// every limit, proxy health and the usage counts are shared through
	// that Redis by all the processes of Namespace. Shard is "K/N" or ""
	// (Config.Shard is parsed from it).
	Redis     []string
	Namespace string
	Shard     string
	LeaseTTL  time.Duration

	work *workOptions // fetch work: the lines come from the queue; nil for a plain run

	// resumeGC ends the pause of garbage collection that covers reading
	// the proxy list and building the engine; nil when none was paused.
	resumeGC func()
}

// endGCPause ends the pause of garbage collection of the run's start, if
// any: once the engine is built, or before a phase that makes garbage in
// proportion to a file rather than to what it keeps (reading --resume).
func (opts *FetchOptions) endGCPause() {
	if opts.resumeGC != nil {
		opts.resumeGC()
	}
}

// NewCmdRoot returns the fetch command with its subcommands.
func NewCmdRoot(ios *IOStreams) *cobra.Command {
	root := NewCmdFetch(ios, nil)
	root.AddCommand(NewCmdDemo(ios, nil))
	root.AddCommand(NewCmdCheck(ios, nil))
	root.AddCommand(NewCmdSummarize(ios, nil))
	root.AddCommand(NewCmdEnqueue(ios, nil), NewCmdWork(ios, nil), NewCmdStatus(ios, nil))
	root.AddCommand(NewCmdCompletion(ios, root))
	// --help and --version, as cobra would add them, but without its
	// templates: text/template keeps every exported method of every type
	// in the binary (go-redis' hundreds among them), which nearly doubles
	// its size and costs every run's start (see help.go).
	root.InitDefaultHelpFlag()
	root.Flags().BoolP("version", "v", false, "version for fetch")
	run := root.RunE
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if v, _ := cmd.Flags().GetBool("version"); v {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "fetch %s\n", version())
			return err
		}
		return run(cmd, args)
	}
	root.SetUsageFunc(usage)
	return root
}

// NewCmdFetch returns the fetch command. runF replaces the run function in
// tests; nil runs fetchRun.
func NewCmdFetch(ios *IOStreams, runF func(*FetchOptions) error) *cobra.Command {
	opts := &FetchOptions{IO: ios, Config: fetch.DefaultConfig()}
	cfg := &opts.Config

	cmd := &cobra.Command{
		Use:   "fetch [flags] [URL_FILE ...]",
		Short: "Fetch lists of URLs through pools of forward proxies",
		Long: `fetch reads URLs, one a line, from the files given (or standard input), fetches
each through the proxy that can start it soonest within every limit, and writes one
JSON record per URL line.`,
		Args:          cobra.ArbitraryArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Inputs = args
			var cpu *earlyCPU
			if opts.CPUProfile != "" && runF == nil {
				// From here, so that reading the proxy list is in it.
				var err error
				if cpu, err = startEarlyCPU(); err != nil {
					return usageError(err)
				}
				defer cpu.abandon()
			}
			// A list of 100,000 proxies and the engine's state for them
			// are kept all run: no collection marks them again and again
			// while they are built (see gcfloor.Floor.Pause).
			opts.resumeGC = floorFrom(cmd.Context()).Pause()
			defer opts.endGCPause()
			if err := opts.complete(cmd); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return fetchRun(cmd.Context(), opts, cpu)
		},
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.SetOut(ios.Out)
	cmd.SetErr(ios.ErrOut)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })

	f := cmd.Flags()
	f.SortFlags = false
	groups := newFlagGrouper(f)
	defer groups.done()

	// Proxies.
	groups.begin(groupProxies)
	f.StringArrayVarP(&opts.ProxyFiles, "proxies", "p", nil, "proxy list `FILE` (repeatable)")
	f.StringArrayVar(&opts.ProxyURLs, "proxy", nil, "one proxy `URL` (repeatable)")
	f.Var(&cfg.Policy, "policy", "`POLICY` to break ties between proxies: least-inflight, least-used, round-robin or random")

	// Proxy health and pushback.
	f.IntVar(&cfg.ProxyMaxFailures, "proxy-max-failures", cfg.ProxyMaxFailures, "`N` consecutive failures of a proxy's own that bench it (0 never benches)")
	f.DurationVar(&cfg.ProxyCooldown, "proxy-cooldown", cfg.ProxyCooldown, "`D` a benched proxy sits out; doubles on each relapse")
	f.DurationVar(&cfg.ProxyCooldownMax, "proxy-cooldown-max", cfg.ProxyCooldownMax, "`D`: the longest a benched proxy sits out")
	f.DurationVar(&cfg.PushbackDelay, "pushback-delay", cfg.PushbackDelay, "after a 429 or 503, narrow that proxy's attempts in flight to that host, then start them `D` apart, doubling on each further one (0 never)")
	f.DurationVar(&cfg.PushbackMax, "pushback-max", cfg.PushbackMax, "`D`: the widest spacing --pushback-delay grows to")
	f.DurationVar(&cfg.RetryAfterMax, "retry-after-max", cfg.RetryAfterMax, "`D`: the longest a host's Retry-After, told through two or more proxies within a minute, holds every proxy (0 never)")
	f.Var(rotationValue{&cfg.ProxyRotate}, "proxy-rotate", "when to open a new connection to a proxy: never (keep-alive) or request (every attempt; a proxy line's rotate= wins)")
	f.Var(statusListValue{&cfg.BanStatus}, "ban-status", "statuses that mean this proxy is banned by this host: retried on another proxy, failed as kind banned (default none)")
	f.Var(regexpValue{&cfg.BanMatch}, "ban-match", "a ban when `REGEX` matches the status line and headers, or the start of the body")
	f.Var(sizeValue{&cfg.BanScan}, "ban-scan", "how much of the body --ban-match reads")
	f.IntVar(&cfg.HostMaxFailures, "host-max-failures", cfg.HostMaxFailures, "`N` attempts in a row to a host without a response before its other URLs are skipped (0 never)")

	// Limits.
	groups.begin(groupLimits)
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", cfg.Concurrency, "`N` jobs in flight at once, all proxies together")
	f.IntVar(&cfg.ProxyConcurrency, "proxy-concurrency", cfg.ProxyConcurrency, "`N` in flight per proxy or pool")
	f.Var(rateValue{&cfg.ProxyRate}, "proxy-rate", "attempts started per proxy or pool: N/s, N/m, N/h or N/DURATION")
	f.IntVar(&cfg.ProxyBurst, "proxy-burst", cfg.ProxyBurst, "`N`: token-bucket burst for --proxy-rate")
	f.IntVar(&cfg.HostConcurrency, "host-concurrency", cfg.HostConcurrency, "`N` in flight per target host:port (0 unlimited)")
	f.Var(rateValue{&cfg.HostRate}, "host-rate", "attempts started per target host:port")
	f.IntVar(&cfg.HostBurst, "host-burst", cfg.HostBurst, "`N`: token-bucket burst for --host-rate")
	f.Var(rateValue{&cfg.Rate}, "rate", "attempts started, all together (burst 1)")

	// Timeouts and retries.
	groups.begin(groupTimeouts)
	f.DurationVar(&cfg.ConnectTimeout, "connect-timeout", cfg.ConnectTimeout, "`D`: dns + tcp connect + proxy handshake + tls, one attempt")
	f.DurationVar(&cfg.HeaderTimeout, "header-timeout", cfg.HeaderTimeout, "`D`: request written -> response headers, one attempt")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", cfg.IdleTimeout, "`D` with no bytes of progress while sending or receiving")
	f.DurationVarP(&cfg.Timeout, "timeout", "t", cfg.Timeout, "`D` for everything for one URL: permits, attempts, back-off, body")
	f.IntVar(&cfg.Retries, "retries", cfg.Retries, "`N` extra attempts after the first")
	f.DurationVar(&cfg.RetryBackoff, "retry-backoff", cfg.RetryBackoff, "`D`: first back-off; doubles with full jitter")
	f.Var(statusListValue{&cfg.RetryStatus}, "retry-status", "statuses retried, and failed when final")
	f.DurationVar(&cfg.Grace, "grace", cfg.Grace, "`D`: after an interrupt, how long work in flight may finish")
	f.DurationVar(&cfg.PoolWait, "pool-wait", cfg.PoolWait, "`D` every proxy may be unusable (benched or rejected) before the run stops, exit 3 (0 never)")

	// Requests and bodies.
	groups.begin(groupRequests)
	f.StringVarP(&cfg.Method, "method", "X", cfg.Method, "request method `M`")
	f.StringArrayVarP(&opts.Headers, "header", "H", nil, "request `HEADER` \"K: V\" (repeatable; replaces a default of the same name)")
	f.IntVar(&cfg.MaxRedirects, "max-redirects", cfg.MaxRedirects, "`N` redirects followed (0 does not follow)")
	f.Var(sizeValue{&cfg.MaxBody}, "max-body", "larger bodies fail with kind too_large (64MiB, 10MB, 512k …)")
	f.Var(sizeValue{&cfg.MaxRequestBody}, "max-request-body", "largest body of a JSON request line; larger is invalid")
	f.Var(sizeValue{&cfg.MaxHeader}, "max-header", "larger response headers fail with kind too_large in phase headers")
	f.StringVar(&cfg.SaveDir, "save-dir", "", "write the body of each ok record to a file in `DIR`")
	f.BoolVarP(&cfg.Insecure, "insecure", "k", false, "do not verify target TLS certificates")
	f.Var(recordHeadersValue{&cfg.RecordHeaders, &cfg.RecordAllHeaders}, "record-headers", "copy response headers into the record: a comma list of names, or all (16 KiB at most)")
	f.BoolVar(&cfg.RecordHash, "record-hash", false, "add the body's SHA-256 to the record")
	f.Var(transportValue{&cfg.Transport}, "transport", "fast: fetch's own HTTP/1.1 client for plain http:// requests; std: every request through Go's net/http (records the same)")
	f.StringVar(&opts.CACert, "cacert", "", "trust the PEM certificates in `FILE` (targets and https proxies)")

	// Output.
	groups.begin(groupIO)
	f.StringVarP(&opts.Output, "output", "o", "", "results, JSON lines, to `FILE` (default standard output)")
	f.StringVar(&opts.Report, "report", "", "summary, one JSON document, to `FILE`")
	f.BoolVar(&opts.Resume, "resume", false, "with -o: skip URLs that FILE already finished; append the rest")
	f.BoolVarP(&opts.Quiet, "quiet", "q", false, "no progress bar, no summary, no warnings on stderr")
	reportFlags(f, &cfg.ReportHosts, &cfg.ReportProxies)
	opts.Metrics.flags(f)
	f.StringVar(&opts.CPUProfile, "cpuprofile", "", "write a CPU profile of the run to `FILE` (go tool pprof)")
	f.StringVar(&opts.MemProfile, "memprofile", "", "write a memory (allocations) profile of the run to `FILE` (go tool pprof)")

	// Distributed mode.
	groups.begin(groupDistributed)
	f.StringArrayVar(&opts.Redis, "redis", nil, "share every limit, proxy health and usage count through Redis at `URL` (redis://, rediss://, unix://, redis+sentinel://; repeat for Cluster nodes; password also from $REDISCLI_AUTH)")
	f.StringVar(&opts.Namespace, "namespace", "fetch", "Redis key namespace `NAME`: the processes that share limits")
	f.StringVar(&opts.Shard, "shard", "", "take only the input lines of shard `K/N` (1 <= K <= N)")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", 10*time.Second, "`D`: how long a permit outlives a process that died holding it")

	return cmd
}

// complete checks the flags and finishes building opts.Config: headers,
// the CA pool and the proxies, whose files are read here.
func (opts *FetchOptions) complete(cmd *cobra.Command) error {
	if err := opts.completeDistributed(cmd); err != nil {
		return err
	}
	if opts.Resume && (opts.Output == "" || opts.Output == "-") {
		return errors.New("--resume needs -o FILE: the results of the run to resume")
	}
	if err := opts.Metrics.check(); err != nil {
		return err
	}
	cfg := &opts.Config
	stdin := 0
	for _, in := range opts.Inputs {
		if in == "-" {
			stdin++
		}
	}
	if stdin > 1 {
		return errors.New("standard input (-) can be given only once")
	}
	if err := completeConfig(cfg, opts.Headers, opts.CACert); err != nil {
		return err
	}
	if len(opts.ProxyFiles) > 0 || len(opts.ProxyURLs) > 0 {
		list, err := proxies.Load(opts.ProxyFiles, opts.ProxyURLs, newWarnings(opts.IO.stderr(), opts.Quiet).warn)
		if err != nil {
			return err
		}
		cfg.Proxies = list
	}
	return nil
}

// Ranges of the count flags. A count far past what any run needs is a
// typing mistake, and the engine must never be asked to size anything by it.
const (
	maxConcurrency = 100_000   // -c
	maxCount       = 1_000_000 // per proxy or host: concurrency, bursts, failures (as a proxy line's concurrency= and burst=)
	maxRetries     = 100       // --retries, --max-redirects
	maxBanScan     = 64 << 20  // --ban-scan: what is read of a body is held in memory
	maxRequestBody = 256 << 20 // --max-request-body: a JSON line of twice that is read whole
)

// countFlag is a flag that takes a count, its value and the counts it
// allows.
type countFlag struct {
	flag   string
	v      int
	lo, hi int
	what   string // what the lowest value means, if anything
}

// checkCounts returns an error naming the first flag whose count is out of
// its range.
func checkCounts(counts []countFlag) error {
	for _, c := range counts {
		if c.v < c.lo || c.v > c.hi {
			return fmt.Errorf("%s %d: want an integer from %d to %d%s", c.flag, c.v, c.lo, c.hi, c.what)
		}
	}
	return nil
}

// reportFlags adds the flags that bound a report, of fetch and of
// summarize, to f.
func reportFlags(f *pflag.FlagSet, hosts, proxies *int) {
	f.IntVar(hosts, "report-hosts", *hosts, "the report lists the `N` busiest hosts; the rest are summed in hosts_other")
	f.IntVar(proxies, "report-proxies", *proxies, "the report lists the `N` busiest proxies; the rest are summed in proxies_other")
}

// reportCounts are the flags that bound a report, of fetch and of
// summarize.
func reportCounts(hosts, proxies int) []countFlag {
	return []countFlag{
		{"--report-hosts", hosts, 0, maxCount, " (0: none, all in hosts_other)"},
		{"--report-proxies", proxies, 0, maxCount, " (0: none, all in proxies_other)"},
	}
}

// checkConfig checks the values the flags set directly. It is the one place
// where a flag's value is checked.
func checkConfig(cfg *fetch.Config) error {
	counts := []countFlag{
		{"--concurrency", cfg.Concurrency, 1, maxConcurrency, ""},
		{"--proxy-concurrency", cfg.ProxyConcurrency, 1, maxCount, ""},
		{"--proxy-burst", cfg.ProxyBurst, 1, maxCount, ""},
		{"--host-concurrency", cfg.HostConcurrency, 0, maxCount, " (0: unlimited)"},
		{"--host-burst", cfg.HostBurst, 1, maxCount, ""},
		{"--retries", cfg.Retries, 0, maxRetries, ""},
		{"--max-redirects", cfg.MaxRedirects, 0, maxRetries, " (0: do not follow)"},
		{"--proxy-max-failures", cfg.ProxyMaxFailures, 0, maxCount, " (0: never bench)"},
		{"--host-max-failures", cfg.HostMaxFailures, 0, maxCount, " (0: never skip)"},
	}
	counts = append(counts, reportCounts(cfg.ReportHosts, cfg.ReportProxies)...)
	if err := checkCounts(counts); err != nil {
		return err
	}
	checks := []struct {
		bad  bool
		flag string
		want string
	}{
		{cfg.ConnectTimeout <= 0, "--connect-timeout", "a positive duration"},
		{cfg.HeaderTimeout <= 0, "--header-timeout", "a positive duration"},
		{cfg.IdleTimeout <= 0, "--idle-timeout", "a positive duration"},
		{cfg.Timeout <= 0, "--timeout", "a positive duration"},
		{cfg.RetryBackoff < 0, "--retry-backoff", "0 or more"},
		{cfg.Grace < 0, "--grace", "0 or more"},
		{cfg.PoolWait < 0, "--pool-wait", "0 (never) or more"},
		{cfg.ProxyCooldown <= 0, "--proxy-cooldown", "a positive duration"},
		{cfg.ProxyCooldownMax < cfg.ProxyCooldown, "--proxy-cooldown-max", "at least --proxy-cooldown"},
		{cfg.PushbackDelay < 0, "--pushback-delay", "0 (never) or more"},
		{cfg.PushbackMax < cfg.PushbackDelay, "--pushback-max", "at least --pushback-delay"},
		{cfg.RetryAfterMax < 0, "--retry-after-max", "0 (never) or more"},
		{!isToken(cfg.Method), "--method", "a method name such as GET"},
		{cfg.MaxBody < 1, "--max-body", "at least 1 byte"},
		{cfg.MaxHeader < 1, "--max-header", "at least 1 byte"},
		{cfg.MaxRequestBody < 1 || cfg.MaxRequestBody > maxRequestBody, "--max-request-body", "from 1 byte to 256MiB"},
		{cfg.BanScan < 1 || cfg.BanScan > maxBanScan, "--ban-scan", "from 1 byte to 64MiB"},
	}
	for _, c := range checks {
		if c.bad {
			return fmt.Errorf("%s: want %s", c.flag, c.want)
		}
	}
	return nil
}

// completeConfig checks the values the flags set in cfg and adds what
// takes reading: the -H headers and the --cacert pool.
func completeConfig(cfg *fetch.Config, headers []string, cacert string) error {
	if err := checkConfig(cfg); err != nil {
		return err
	}
	h, err := parseHeaders(headers)
	if err != nil {
		return err
	}
	cfg.Header = h
	if cacert != "" {
		if cfg.RootCAs, err = loadCertPool(cacert); err != nil {
			return err
		}
	}
	return nil
}

// loadCertPool reads the PEM certificates of file into a new pool.
func loadCertPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--cacert: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", file)
	}
	return pool, nil
}
