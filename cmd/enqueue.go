package cmd

import (
	"context"
	"fmt"
	"os"

	"github.com/fetch-dev/fetch/fetch/workqueue"
	redislimits "github.com/fetch-dev/fetch/limits/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// QueueOptions are the flags enqueue and status share: the queue's Redis
// and namespace.
type QueueOptions struct {
	IO        *IOStreams
	Redis     []string
	Namespace string
	Quiet     bool

	Inputs []string // enqueue: URL files as given; "-" is standard input
	JSON   bool     // status --json
}

// queueFlags adds the flags every queue command has to cmd.
func (o *QueueOptions) queueFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&o.Redis, "redis", nil, "the queue's Redis at `URL` (as fetch --redis)")
	f.StringVar(&o.Namespace, "namespace", "fetch", "Redis key namespace `NAME`: the queue's")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
}

// check checks the shared flags.
func (o *QueueOptions) check() error {
	if len(o.Redis) == 0 {
		return usageErrorf("--redis is required: the queue is there")
	}
	if !validNamespace(o.Namespace) {
		return usageErrorf("--namespace %q: want 1 to 64 letters, digits, '.', '_', ':' or '-'", o.Namespace)
	}
	return nil
}

// dial connects to the queue; the caller closes the client. Errors are
// usage errors naming the address, never its password.
func (o *QueueOptions) dial(ctx context.Context) (*workqueue.Queue, redislimits.Client, error) {
	target, err := redislimits.ParseTarget(o.Redis, os.Getenv)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--redis: %w", err))
	}
	goredis.SetLogger(redisLog{newWarnings(o.IO.stderr(), o.Quiet)})
	client, err := redislimits.Dial(ctx, target)
	if err != nil {
		return nil, nil, usageError(fmt.Errorf("--redis: %w", err))
	}
	return workqueue.New(client, o.Namespace), client, nil
}

// NewCmdEnqueue returns the enqueue command. runF replaces the run
// function in tests; nil runs enqueueRun.
func NewCmdEnqueue(ios *IOStreams, runF func(*QueueOptions) error) *cobra.Command {
	opts := &QueueOptions{IO: ios}
	cmd := &cobra.Command{
		Use:   "enqueue --redis URL [--namespace NAME] [URL_FILE ...]",
		Short: "Append URL lines to the shared work queue",
		Long: `enqueue appends the URL lines of the files given (or standard input) to the
namespace's queue, each with its input's name and line number, for fetch work
to take. Enqueueing an input again adds only the lines past the last one
enqueued from it. It streams its inputs.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Inputs = args
			if err := opts.check(); err != nil {
				return err
			}
			if runF != nil {
				return runF(opts)
			}
			return enqueueRun(cmd.Context(), opts)
		},
	}
	opts.queueFlags(cmd)
	cmd.Flags().BoolVarP(&opts.Quiet, "quiet", "q", false, "say nothing on stderr but errors")
	return cmd
}

// enqueueRun opens every input before it enqueues any, then enqueues them
// in order, saying how many lines each added.
func enqueueRun(ctx context.Context, opts *QueueOptions) error {
	inputs, closeInputs, err := openInputs(opts.IO, opts.Inputs)
	if err != nil {
		return usageError(err)
	}
	defer closeInputs()
	q, client, err := opts.dial(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	for _, in := range inputs {
		n, err := q.Enqueue(ctx, in)
		if !opts.Quiet {
			fmt.Fprintf(opts.IO.stderr(), "fetch: enqueued %d lines of %s\n", n, in.Name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
