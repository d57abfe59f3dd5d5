package cmd

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// hardExitWait is how long a third interrupt waits for a write of records
// in progress to end before the process exits.
const hardExitWait = 2 * time.Second

// interrupts turns SIGINT and SIGTERM into the three steps of stopping:
// the first cancels the root context (no new URLs; work in flight gets the
// grace period), the second calls the StopNow functions registered with
// onSecondInterrupt (the grace period ends at once), and the third exits the
// process at once, between two writes of records so that no line is torn.
//
// It travels in the root context (see withInterrupts); a context without one
// (tests that call Run) has only the first step. Its methods are safe for
// concurrent use.
type interrupts struct {
	cancel context.CancelFunc
	errOut io.Writer
	exit   func(code int) // os.Exit

	mu      sync.Mutex
	n       int
	stopNow []func()

	writeMu sync.Mutex // held during each write of records; see guard
}

type interruptsKey struct{}

func withInterrupts(ctx context.Context, in *interrupts) context.Context {
	return context.WithValue(ctx, interruptsKey{}, in)
}

func interruptsFrom(ctx context.Context) *interrupts {
	in, _ := ctx.Value(interruptsKey{}).(*interrupts)
	return in
}

// watch handles each signal received on sigs until sigs is closed.
func (in *interrupts) watch(sigs <-chan os.Signal) {
	for sig := range sigs {
		in.signal(sig)
	}
}

// signal takes one step on a SIGINT or SIGTERM.
func (in *interrupts) signal(sig os.Signal) {
	in.mu.Lock()
	in.n++
	n := in.n
	stop := slices.Clone(in.stopNow)
	in.mu.Unlock()
	switch n {
	case 1:
		fmt.Fprintf(in.errOut, "\nfetch: %v: finishing work in flight (interrupt again to stop now)\n", sig)
		in.cancel()
	case 2:
		fmt.Fprintf(in.errOut, "fetch: %v: stopping now (interrupt again to exit at once)\n", sig)
		for _, f := range stop {
			f()
		}
	default:
		fmt.Fprintf(in.errOut, "fetch: %v: exiting at once; records not yet written are lost\n", sig)
		locked := make(chan struct{})
		go func() {
			in.writeMu.Lock() // never unlocked: no write starts after this
			close(locked)
		}()
		select {
		case <-locked:
		case <-time.After(hardExitWait):
		}
		in.exit(ExitInterrupted)
	}
}

// onSecondInterrupt registers f to be called on the second interrupt, or
// calls it now if that has come already. The returned function unregisters
// it. With no interrupts in ctx it does nothing.
func onSecondInterrupt(ctx context.Context, f func()) (unregister func()) {
	in := interruptsFrom(ctx)
	if in == nil {
		return func() {}
	}
	in.mu.Lock()
	if in.n >= 2 {
		in.mu.Unlock()
		f()
		return func() {}
	}
	in.stopNow = append(in.stopNow, f)
	i := len(in.stopNow) - 1
	in.mu.Unlock()
	return func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		in.stopNow[i] = func() {}
	}
}

// guardWrites returns w wrapped so that a hard exit (the third interrupt)
// never lands in the middle of one of its writes. The JSONLWriter writes
// whole lines only, so records are never torn. With no interrupts in ctx it
// returns w.
func guardWrites(ctx context.Context, w io.Writer) io.Writer {
	in := interruptsFrom(ctx)
	if in == nil {
		return w
	}
	return &guardedWriter{w: w, mu: &in.writeMu}
}

type guardedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w.Write(p)
}
