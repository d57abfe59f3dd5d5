package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/fetch-dev/fetch/fetch/workqueue"
	"github.com/spf13/cobra"
)

// NewCmdStatus returns the status command. runF replaces the run function
// in tests; nil runs statusRun.
func NewCmdStatus(ios *IOStreams, runF func(*QueueOptions) error) *cobra.Command {
	opts := &QueueOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "status --redis URL [--namespace NAME] [--json]",
		Short: "Show the progress of the shared work queue",
		Long: `status shows the namespace's queue: lines enqueued, done (their final record
written and acknowledged, ok or not), failed (done, not ok), pending (taken by a
worker, not acknowledged) by worker, the workers alive, the rate over the last
minute and the time left at that rate.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("status takes no arguments, not %q", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return statusRun(cmd.Context(), opts)
		},
	}
	opts.queueFlags(cmd)
	cmd.Flags().BoolVar(&opts.JSON, "json", false, `print one JSON object {"enqueued","done","pending","failed","workers","rate_per_s","eta_s"}`)
	return cmd
}

// statusJSON is status --json's object. ETA is null when the rate is 0
// with lines left.
type statusJSON struct {
	Enqueued int64    `json:"enqueued"`
	Done     int64    `json:"done"`
	Pending  int64    `json:"pending"`
	Failed   int64    `json:"failed"`
	Workers  int64    `json:"workers"`
	Rate     float64  `json:"rate_per_s"`
	ETA      *float64 `json:"eta_s"`
}

func statusRun(ctx context.Context, opts *QueueOptions) error {
	q, client, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	st, err := q.Status(ctx)
	if errors.Is(err, workqueue.ErrNoGroup) {
		return fmt.Errorf("no queue in namespace %s: nothing was enqueued there", opts.Namespace)
	}
	if err != nil {
		return err
	}
	if opts.JSON {
		j := statusJSON{Enqueued: st.Enqueued, Done: st.Done, Pending: st.Pending, Failed: st.Failed,
			Workers: st.Workers, Rate: math.Round(st.RatePerS*100) / 100}
		if st.ETA >= 0 {
			eta := math.Round(st.ETA.Seconds()*10) / 10
			j.ETA = &eta
		}
		return json.NewEncoder(opts.IO.Out).Encode(j)
	}
	writeStatus(opts.IO.Out, st)
	return nil
}

// writeStatus prints st as a short table.
func writeStatus(w io.Writer, st workqueue.Status) {
	left := st.Enqueued - st.Done
	pct := 0.0
	if st.Enqueued > 0 {
		pct = 100 * float64(st.Done) / float64(st.Enqueued)
	}
	fmt.Fprintf(w, "enqueued  %d\n", st.Enqueued)
	fmt.Fprintf(w, "done      %d (%.1f%%), %d failed\n", st.Done, pct, st.Failed)
	fmt.Fprintf(w, "left      %d, %d of them pending\n", left, st.Pending)
	fmt.Fprintf(w, "workers   %d alive\n", st.Workers)
	eta := "-"
	switch {
	case left <= 0:
		eta = "0s"
	case st.ETA >= 0:
		eta = st.ETA.Round(time.Second).String()
	}
	fmt.Fprintf(w, "rate      %.1f/s over the last minute, ETA %s\n", st.RatePerS, eta)
	names := make([]string, 0, len(st.PendingBy))
	for name := range st.PendingBy {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "pending   %6d  %s\n", st.PendingBy[name], name)
	}
}
