package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fetch-dev/fetch/fetch/metrics"
	"github.com/fetch-dev/fetch/proxies"
	"github.com/spf13/pflag"
)

// metricsOptions are the --metrics flags, of the plain run and of demo.
type metricsOptions struct {
	Addr    string        // --metrics ADDR; "" serves none
	Linger  time.Duration // --metrics-linger: how long the endpoint outlives the run
	Proxies int           // --metrics-proxies: proxies with series of their own
}

// flags adds the --metrics flags to f.
func (o *metricsOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.Addr, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics while running (host:port; :0 picks a port)")
	f.DurationVar(&o.Linger, "metrics-linger", 0, "`D`: keep serving the metrics that long after the run, for a last scrape")
	f.IntVar(&o.Proxies, "metrics-proxies", 0, "the `N` busiest proxies get series of their own in fetch_proxy_attempts_total; the rest are summed as \"other\"")
}

// check checks the --metrics flags.
func (o *metricsOptions) check() error {
	if err := checkCounts([]countFlag{{"--metrics-proxies", o.Proxies, 0, maxCount, " (0: none)"}}); err != nil {
		return err
	}
	switch {
	case o.Linger < 0:
		return errors.New("--metrics-linger: want 0 or more")
	case o.Addr == "" && (o.Linger > 0 || o.Proxies > 0):
		return errors.New("--metrics-linger and --metrics-proxies need --metrics ADDR")
	}
	return nil
}

// metricsServer serves a run's metrics on --metrics ADDR.
type metricsServer struct {
	m      *metrics.Metrics
	srv    *http.Server
	url    string
	served chan error // Serve's error, once it has returned
	linger time.Duration
	notes  io.Writer // where it says where it serves; nil when quiet
}

// startMetrics opens --metrics ADDR and serves on it the metrics of a run
// over list (none: direct). It returns nil without --metrics. The error of
// an address that cannot be listened on names it: a usage error, found
// before any request.
func startMetrics(o *metricsOptions, list []proxies.Proxy, notes io.Writer) (*metricsServer, error) {
	if o.Addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", o.Addr, err)
	}
	s := &metricsServer{
		m:      metrics.New(metrics.Options{Proxies: list, Busiest: o.Proxies}),
		url:    "http://" + ln.Addr().String() + "/metrics",
		served: make(chan error, 1),
		linger: o.Linger,
		notes:  notes,
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.m.Handler())
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { s.served <- s.srv.Serve(ln) }()
	if notes != nil {
		fmt.Fprintf(notes, "fetch: serving metrics at %s\n", s.url)
	}
	return s, nil
}

// stop keeps serving for the linger if the run ran (a usage error found
// after the start does not linger), which ctx ending (an interrupt) cuts
// short, then shuts the server down: scrapes under way may finish within
// a few seconds. When stop returns, the server's goroutines have ended.
func (s *metricsServer) stop(ctx context.Context, ran bool) {
	if s == nil {
		return
	}
	if ran && s.linger > 0 && ctx.Err() == nil {
		if s.notes != nil {
			fmt.Fprintf(s.notes, "fetch: run over; metrics stay at %s for %s\n", s.url, s.linger)
		}
		t := time.NewTimer(s.linger)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), metricsShutdown)
	defer cancel()
	if err := s.srv.Shutdown(shut); err != nil {
		s.srv.Close() // a scrape that would not finish: cut
	}
	<-s.served
}

// metricsShutdown is how long the scrapes under way when the endpoint
// closes may take to finish.
const metricsShutdown = 5 * time.Second

// notesTo is where startMetrics says where it serves: standard error,
// unless quiet.
func notesTo(ios *IOStreams, quiet bool) io.Writer {
	if quiet {
		return nil
	}
	return ios.stderr()
}
