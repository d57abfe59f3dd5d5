package cmd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/workqueue"
	redislimits "github.com/fetch-dev/fetch/limits/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
)

// workOptions are what fetch work adds to a plain run: the queue it takes
// its lines from instead of inputs.
type workOptions struct {
	ClaimAfter time.Duration // --claim-after; 0 for 3 x --lease-ttl
	Follow     bool          // --follow: wait for more lines once drained

	client redislimits.Client // the run's connection to --redis, once dialled
}

// NewCmdWork returns the work command: a plain run (every flag of it)
// whose lines come from the namespace's queue. runF replaces the run
// function in tests; nil runs fetchRun.
func NewCmdWork(ios *IOStreams, runF func(*FetchOptions) error) *cobra.Command {
	work := &workOptions{}
	var cmd *cobra.Command
	cmd = NewCmdFetch(ios, func(opts *FetchOptions) error {
		if err := work.complete(cmd, opts); err != nil {
			return usageError(err)
		}
		opts.work = work
		// The worker's output is its own: appended to, and a line it
		// already finished (before a restart) is not fetched again.
		opts.Resume = true
		if runF != nil {
			return runF(opts)
		}
		return fetchRun(cmd.Context(), opts, nil)
	})
	cmd.Use = "work --redis URL [--namespace NAME] -o FILE [flags]"
	cmd.Short = "Take lines from the shared work queue and fetch them"
	cmd.Long = `work takes URL lines from the namespace's queue (see enqueue), as one of any
number of workers, fetches them within the namespace's shared limits with the
flags of a plain run, writes each record to its own -o FILE and acknowledges a
line once its record is written. A worker that dies has its lines taken over by
the others after --claim-after. work exits when the queue is drained and no
worker holds a line, unless --follow.`
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf("work takes no URL files (%s): fetch enqueue adds them to the queue", args[0])
		}
		return nil
	}
	f := cmd.Flags()
	f.DurationVar(&work.ClaimAfter, "claim-after", 0, "`D` a line taken by a worker that went silent waits before another takes it (default 3 x --lease-ttl)")
	f.BoolVar(&work.Follow, "follow", false, "once the queue is drained, wait for more lines instead of exiting")
	for _, name := range []string{"claim-after", "follow"} {
		_ = f.SetAnnotation(name, groupAnnotation, []string{groupDistributed})
	}
	// A worker always appends to its -o and passes over what it finished;
	// the queue, not --shard, shares the lines out.
	for _, name := range []string{"resume", "shard"} {
		_ = f.MarkHidden(name)
	}
	return cmd
}

// complete checks work's flags, which opts.complete has checked as a
// plain run's.
func (w *workOptions) complete(cmd *cobra.Command, opts *FetchOptions) error {
	switch {
	case len(opts.Redis) == 0:
		return errors.New("work needs --redis: the queue is there")
	case opts.Output == "" || opts.Output == "-":
		return errors.New("work needs -o FILE: each worker writes its own records")
	case opts.Shard != "":
		return errors.New("work takes no --shard: the queue shares the lines out")
	case w.ClaimAfter < 0:
		return errors.New("--claim-after: want a positive duration")
	}
	if !cmd.Flags().Changed("claim-after") {
		w.ClaimAfter = 3 * opts.LeaseTTL
	}
	if w.ClaimAfter < time.Second {
		return fmt.Errorf("--claim-after %s: want at least 1s", w.ClaimAfter)
	}
	return nil
}

// startWorker joins the queue as a worker, for a run of opts.work, and
// registers its counts with the metrics (mx, nil for none). It returns nil
// for a plain run. The returned function puts back the lines the worker
// holds and leaves the queue; call it once the run has ended.
func (opts *FetchOptions) startWorker(ctx context.Context, mx *metricsServer) (*workqueue.Worker, func(), error) {
	w := opts.work
	if w == nil {
		return nil, func() {}, nil
	}
	q := workqueue.New(w.client, opts.Namespace)
	wk, err := q.Worker(ctx, workqueue.WorkerOptions{
		// Beats as often as leases are renewed, or oftener when
		// --claim-after is short (see WorkerOptions.Beat).
		ClaimAfter: w.ClaimAfter, Beat: opts.LeaseTTL / 3, Follow: w.Follow,
		MaxRequestBody: opts.Config.MaxRequestBody, Done: opts.Config.Done,
		GiveUp: opts.Config.PoolWait, Clock: opts.Config.Clock,
	})
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--redis: %w", err))
	}
	if mx != nil {
		if err := mx.m.Register(queueCollector{wk}); err != nil {
			return nil, nil, err
		}
	}
	return wk, func() {
		// Within a few seconds, interrupted or not: what is left is
		// claimed by the others after --claim-after.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = wk.Close(cctx)
	}, nil
}

// workResult is the command's error for a run of work: a run that ended
// because the queue was drained exits 0, whatever its records, since they
// are the queue's (fetch status counts the failed ones).
func (opts *FetchOptions) workResult(err error) error {
	if opts.work != nil && errors.Is(err, ErrNotAllOK) {
		return nil
	}
	return err
}

// queueDesc is fetch_queue_lines{state}.
var queueDesc = prometheus.NewDesc("fetch_queue_lines",
	"Lines of the shared work queue this worker took (taken), acknowledged once written (acked), put back (returned), and holds now (held).",
	[]string{"state"}, nil)

// queueCollector serves a worker's counts as fetch_queue_lines.
type queueCollector struct{ w *workqueue.Worker }

func (c queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- queueDesc }

func (c queueCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.w.Stats()
	for _, s := range []struct {
		state string
		n     int64
	}{{"taken", st.Taken}, {"acked", st.Acked}, {"returned", st.Returned}, {"held", st.Held}} {
		// One family has one type: a gauge, though three of the four only rise.
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(s.n), s.state)
	}
}

var _ fetch.LineSource = (*workqueue.Worker)(nil)
