package workqueue_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/fetch/workqueue"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// BenchmarkQueue is the queue's own cost, no fetching: b.N lines
// enqueued, then taken by 4 workers (each with its own connection, as
// processes have) that write each line's record at once and tell the
// worker every 32 records or 5ms, as the engine's flushes do. It reports, per
// line, the commands Redis ran (INFO commandstats, those run by scripts
// among them) and the server's CPU (used_cpu_sys + used_cpu_user), for
// enqueue and for work; and the lines a second the 4 workers got
// through.
func BenchmarkQueue(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	defer c.Close()
	q := workqueue.New(c, "b")
	var text strings.Builder
	for i := range b.N {
		text.WriteString("http://127.0.0.1:1/x?i=")
		text.WriteString(strconv.Itoa(i))
		text.WriteByte('\n')
	}
	ctx := context.Background()
	b.ResetTimer()

	before := serverCost(b, srv)
	if _, err := q.Enqueue(ctx, input.Source{Name: "u", R: strings.NewReader(text.String())}); err != nil {
		b.Fatal(err)
	}
	enq := serverCost(b, srv)

	start := time.Now()
	var wg sync.WaitGroup
	for range 4 {
		wc := srv.Client()
		defer wc.Close()
		w, err := workqueue.New(wc, "b").Worker(ctx, workqueue.WorkerOptions{ClaimAfter: time.Hour, Beat: time.Second})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer w.Close(ctx)
			recs := make(chan *results.Record, 64)
			go func() {
				defer close(recs)
				for {
					l, err := w.Next(ctx)
					if err != nil {
						if !errors.Is(err, io.EOF) {
							b.Error(err)
						}
						return
					}
					recs <- &results.Record{URL: l.Shown, Input: l.Input, Line: l.Number, OK: true}
				}
			}()
			// The writer: tells the worker every 32 records, or 5ms
			// after the first it holds, as the engine's flushes do.
			var batch []*results.Record
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case r, ok := <-recs:
					if !ok {
						w.Written(batch)
						return
					}
					if batch = append(batch, r); len(batch) == 32 {
						w.Written(batch)
						batch = batch[:0]
					}
				case <-tick.C:
					if len(batch) > 0 {
						w.Written(batch)
						batch = batch[:0]
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	work := serverCost(b, srv)
	st, err := q.Status(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if st.Done != int64(b.N) || st.Pending != 0 {
		b.Fatalf("status after the run: %+v, want %d done", st, b.N)
	}
	// With -v, each command's calls and time: where the server's CPU goes.
	if v, err := srv.Do("INFO", "commandstats"); err == nil && testing.Verbose() {
		b.Log(v)
	}
	n := float64(b.N)
	b.ReportMetric((enq.cmds-before.cmds)/n, "enqueue-cmds/line")
	b.ReportMetric((enq.cpu-before.cpu)*1e6/n, "enqueue-cpu-µs/line")
	b.ReportMetric((work.cmds-enq.cmds)/n, "work-cmds/line")
	b.ReportMetric((work.cpu-enq.cpu)*1e6/n, "work-cpu-µs/line")
	b.ReportMetric(n/elapsed.Seconds(), "lines/s")
}

// cost is what a Redis server has done so far: commands and CPU seconds.
type cost struct{ cmds, cpu float64 }

// serverCost reads the commands (INFO commandstats, INFO and its own
// CONFIG not counted) and CPU seconds of srv so far.
func serverCost(b *testing.B, srv *redistest.Server) cost {
	b.Helper()
	in, err := srv.Info()
	if err != nil {
		b.Fatal(err)
	}
	c := cost{cpu: in.CPUSeconds}
	for name, n := range in.Calls {
		if name != "info" && name != "hello" && name != "client|setinfo" {
			c.cmds += n
		}
	}
	return c
}
