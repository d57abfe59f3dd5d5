package cmd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/schollz/progressbar/v3"
)

// progressInterval is how often the progress bar polls the engine.
const progressInterval = 150 * time.Millisecond

// statser is the part of *fetch.Engine the progress bar reads.
type statser interface {
	Stats() fetch.Stats
}

// startProgress draws a progress bar on w, polling eng on a ticker, until
// the returned stop function is called; stop clears the bar from the line.
// total is called once, in the background, for the number of URLs; -1 (or
// until it returns) shows a spinner instead of a bar.
func startProgress(ctx context.Context, w io.Writer, eng statser, total func(context.Context) int64) (stop func()) {
	bar := progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("url"),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetSpinnerChangeInterval(0), // the ticker below renders
		progressbar.OptionSetDescription("starting"),
	)

	countCtx, cancelCount := context.WithCancel(ctx)
	totals := make(chan int64, 1)
	go func() { totals <- total(countCtx) }()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(progressInterval)
		defer t.Stop()
		max := int64(-1)
		for {
			select {
			case <-done:
				return
			case n := <-totals:
				if n > 0 {
					max = n
					bar.ChangeMax64(max)
				}
			case <-t.C:
			}
			s := eng.Stats()
			if max > 0 && s.Done > max { // the count was short; never overflow the bar
				max = s.Done
				bar.ChangeMax64(max)
			}
			bar.Set64(s.Done)
			bar.Describe(fmt.Sprintf("ok %d failed %d in flight %d", s.OK, s.Failed, s.InFlight))
		}
	}()
	return func() {
		cancelCount()
		close(done)
		wg.Wait()
		bar.Clear()
		fmt.Fprint(w, "\r")
	}
}

// countURLLines counts the lines of the named files that are neither blank
// nor comments, the way the engine takes them. It returns -1 when an input
// is standard input, cannot be read, or ctx is done first.
func countURLLines(ctx context.Context, names []string) int64 {
	var n int64
	for _, name := range names {
		if name == "-" {
			return -1
		}
		c, err := countFile(ctx, name)
		if err != nil {
			return -1
		}
		n += c
	}
	return n
}

func countFile(ctx context.Context, name string) (int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return countLines(ctx, f)
}

// countLines counts the URL lines of r: trimmed, not empty, not starting
// with '#'. Long lines are read in pieces, never whole.
func countLines(ctx context.Context, r io.Reader) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	first, start := true, true
	for i := 0; ; i++ {
		if i%4096 == 0 && ctx.Err() != nil {
			return 0, ctx.Err()
		}
		piece, err := br.ReadSlice('\n')
		if start && len(piece) > 0 {
			t := piece
			if first {
				t = bytes.TrimPrefix(t, []byte("\ufeff"))
				first = false
			}
			t = bytes.TrimSpace(t)
			if len(t) > 0 && t[0] != '#' {
				n++
			}
			// A piece that is only white space at the start of a long line
			// is followed by the rest; treat that rest as a line start.
			start = len(t) == 0
		}
		if err == nil {
			start = true
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}
