// Package cmd is the command line of fetch: flags, inputs and outputs, the
// progress bar, the summary table, the demo, and the mapping of errors to
// exit codes.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fetch-dev/fetch/internal/gcfloor"
	"github.com/fetch-dev/fetch/limits"
)

// Exit codes, as the command-line contract fixes them.
const (
	ExitOK          = 0   // every record ok
	ExitNotAllOK    = 1   // at least one record not ok, or a failure after the run started
	ExitUsage       = 2   // usage error, checked before any request
	ExitNoProxy     = 3   // stopped because no proxy could serve, or Redis was gone for --pool-wait
	ExitInterrupted = 130 // SIGINT or SIGTERM
)

// gcFloor is the least allocation between two garbage collections.
const gcFloor = 8 << 20

// Main runs fetch with the process's arguments and streams and returns the
// exit code. The first SIGINT or SIGTERM cancels the root context: no new
// URLs are taken and work in flight gets the grace period (--grace). The
// second ends the grace period at once, and the third exits at once (see
// interrupts).
func Main() int {
	// A run keeps little live and allocates per URL: unless GOGC or
	// GOMEMLIMIT says otherwise, garbage is collected no more often than
	// every gcFloor bytes (see gcfloor), which costs at most that much
	// memory and saves collections.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" {
		floor := gcfloor.Start(gcFloor)
		defer floor.Stop()
		ctx = withFloor(ctx, floor)
	}
	ios := System()
	in := &interrupts{cancel: cancel, errOut: ios.stderr(), exit: os.Exit}
	// The handler stays until the process exits: a signal that comes as
	// fetch ends, its records written, must not kill it.
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go in.watch(sigs)
	return Run(withInterrupts(ctx, in), ios, os.Args[1:])
}

type floorKey struct{}

// withFloor has the process's garbage-collection floor travel in ctx, so
// that a run can pause collection while it builds what it keeps (see
// gcfloor.Floor.Pause). A context without one (tests that call Run) pauses
// nothing: the collector is the process's, shared by the tests.
func withFloor(ctx context.Context, f *gcfloor.Floor) context.Context {
	return context.WithValue(ctx, floorKey{}, f)
}

func floorFrom(ctx context.Context) *gcfloor.Floor {
	f, _ := ctx.Value(floorKey{}).(*gcfloor.Floor)
	return f
}

// Run executes the command line args with ios and returns the exit code.
func Run(ctx context.Context, ios *IOStreams, args []string) int {
	root := NewCmdRoot(ios)
	root.SetArgs(args)
	return ExitCode(ios, root.ExecuteContext(ctx))
}

// ExitCode maps the error of a command to the exit code, printing on
// ios.ErrOut what the user needs to know. It is the one place where errors
// become exit codes.
func ExitCode(ios *IOStreams, err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(ios.ErrOut, "fetch: interrupted")
		return ExitInterrupted
	case errors.Is(err, limits.ErrNoUsableProxy):
		fmt.Fprintf(ios.ErrOut, "%s\nfetch: stopped: fix the proxy list, then run the same command with --resume (and -o FILE) to go on where it stopped\n", message(err))
		return ExitNoProxy
	case errors.Is(err, limits.ErrCoordinatorDown):
		fmt.Fprintf(ios.ErrOut, "%s\nfetch: stopped: bring Redis back, then run the same command with --resume (and -o FILE) to go on where it stopped\n", message(err))
		return ExitNoProxy
	case errors.As(err, &ue):
		fmt.Fprintf(ios.ErrOut, "%s\nRun 'fetch --help' for usage.\n", message(err))
		return ExitUsage
	case errors.Is(err, ErrNotAllOK):
		return ExitNotAllOK
	default:
		fmt.Fprintln(ios.ErrOut, message(err))
		return ExitNotAllOK
	}
}

// message is err's text with the program's name in front, once: errors of
// the engine's packages already start with "fetch: ", and wrapped ones
// carry it inside too.
func message(err error) string {
	msg := strings.ReplaceAll(err.Error(), ": fetch: ", ": ")
	if strings.HasPrefix(msg, "fetch: ") {
		return msg
	}
	return "fetch: " + msg
}
