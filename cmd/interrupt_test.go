package cmd

import (
	"bytes"
	"context"
	"io"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

func TestInterrupts_steps(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errOut bytes.Buffer
	exited := make(chan int, 1)
	in := &interrupts{cancel: cancel, errOut: &errOut, exit: func(code int) { exited <- code }}
	ctx = withInterrupts(ctx, in)

	var stopped, unregistered atomic.Int32
	defer onSecondInterrupt(ctx, func() { stopped.Add(1) })()
	onSecondInterrupt(ctx, func() { unregistered.Add(1) })()

	in.signal(os.Interrupt)
	if ctx.Err() == nil || stopped.Load() != 0 {
		t.Fatalf("first interrupt: ctx.Err() = %v, stopped %d times; want cancelled, 0", ctx.Err(), stopped.Load())
	}
	in.signal(os.Interrupt)
	if stopped.Load() != 1 || unregistered.Load() != 0 {
		t.Fatalf("second interrupt: stopped %d times, unregistered %d; want 1, 0", stopped.Load(), unregistered.Load())
	}
	var late atomic.Int32
	onSecondInterrupt(ctx, func() { late.Add(1) })
	if late.Load() != 1 {
		t.Errorf("registered after the second interrupt: not called at once")
	}

	// The third waits for a write of records in progress, then exits.
	release := make(chan struct{})
	writing := make(chan struct{}) // closed by the write, which holds the lock then
	w := guardWrites(ctx, writerFunc(func(p []byte) (int, error) {
		close(writing)
		<-release
		return len(p), nil
	}))
	go w.Write([]byte("{}\n"))
	<-writing
	go in.signal(os.Interrupt)
	// A window for a wrong exit, not a wait for an event: while the write
	// holds the lock a right one cannot exit, however slow the machine.
	select {
	case <-exited:
		t.Fatal("third interrupt exited in the middle of a write")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case code := <-exited:
		if code != ExitInterrupted {
			t.Errorf("exit code %d, want %d", code, ExitInterrupted)
		}
	case <-time.After(hardExitWait + time.Second):
		t.Fatal("third interrupt did not exit")
	}
}

func TestInterrupts_none(t *testing.T) {
	ctx := context.Background()
	called := false
	onSecondInterrupt(ctx, func() { called = true })()
	if called {
		t.Error("called without interrupts")
	}
	if w := guardWrites(ctx, io.Discard); w != io.Discard {
		t.Error("guardWrites wrapped without interrupts")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
