package workqueue_test

import (
	"context"
	"errors"
	"io"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/fetch/workqueue"
)

// lineGen is a list of URL lines made as it is read: the list itself is
// never in memory.
type lineGen struct {
	n, i int
	buf  []byte
	peak uint64 // the most heap live at a read, every 16,384 lines
}

func (g *lineGen) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		g.buf = append(g.buf, "http://127.0.0.1:1/some/path/x?i="...)
		g.buf = strconv.AppendInt(g.buf, int64(g.i), 10)
		g.buf = append(g.buf, '\n')
		if g.i%16384 == 0 {
			runtime.GC() // what is live, not the garbage of the last collection's cycle
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			g.peak = max(g.peak, ms.HeapAlloc)
		}
		g.i++
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.buf)
	g.buf = g.buf[:copy(g.buf, g.buf[n:])]
	return n, nil
}

// TestEnqueue_streams: enqueueing a list of 200,000 lines (about 9 MB)
// holds a batch of it at a time, not the list: the live heap while it
// runs grows by less than 1 MiB. (A list of 10 million lines goes the
// same way, 50 times longer.)
func TestEnqueue_streams(t *testing.T) {
	q, _ := newQueue(t)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	base := before.HeapAlloc
	g := &lineGen{n: 200_000}
	n, err := q.Enqueue(context.Background(), input.Source{Name: "gen", R: g})
	if err != nil || n != 200_000 {
		t.Fatalf("enqueued %d, %v", n, err)
	}
	grew := int64(g.peak) - int64(base)
	t.Logf("the live heap grew by %d KiB at most while enqueueing", grew>>10)
	// Tolerance: a batch of 256 lines and its arguments is under 100 KiB,
	// the scanner's buffer 16 KiB; the rest is the client's and the race
	// detector's.
	if grew > 1<<20 {
		t.Errorf("the live heap grew by %d KiB while enqueueing a 9 MB list, want under 1 MiB", grew>>10)
	}
}

// TestWorker_follow: with Follow, a worker on a drained queue waits for
// more lines instead of returning io.EOF, and takes them once enqueued.
func TestWorker_follow(t *testing.T) {
	q, _ := newQueue(t)
	enqueue(t, q, "a", list(1))
	w := newWorker(t, q, workqueue.WorkerOptions{Follow: true, ClaimAfter: time.Second})
	l, err := w.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.Written([]*results.Record{record(l, "")})
	got := make(chan *input.Line, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := w.Next(context.Background())
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}()
	enqueue(t, q, "b", list(1))
	select {
	case l := <-got:
		if l.Input != "b" {
			t.Errorf("took %s:%d, want b's line", l.Input, l.Number)
		}
	case err := <-errs:
		t.Fatalf("Next on a drained queue with Follow: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the line enqueued was not taken within 10s")
	}
}

// TestWorker_memoryFlat: a worker draining a queue of 100,000 lines holds
// no more of it at the end than at the start: the live heap, sampled every
// 16,384 lines, grows by less than 1 MiB from the first sample.
func TestWorker_memoryFlat(t *testing.T) {
	q, _ := newQueue(t)
	const n = 100_000
	if got, err := q.Enqueue(context.Background(), input.Source{Name: "gen", R: &lineGen{n: n}}); err != nil || got != n {
		t.Fatalf("enqueued %d, %v", got, err)
	}
	w := newWorker(t, q, workqueue.WorkerOptions{})
	var first, peak uint64
	var recs []*results.Record
	ctx := context.Background()
	for i := 0; ; i++ {
		l, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, record(l, ""))
		if len(recs) == 32 || i == n-1 {
			w.Written(recs)
			recs = recs[:0]
		}
		if i%16384 == 1000 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if first == 0 {
				first = ms.HeapAlloc
			}
			peak = max(peak, ms.HeapAlloc)
		}
	}
	if st := w.Stats(); st.Acked != n || st.Held != 0 {
		t.Errorf("stats %+v, want %d acked, none held", st, n)
	}
	grew := int64(peak) - int64(first)
	t.Logf("the live heap grew by %d KiB from the first sample", grew>>10)
	if grew > 1<<20 {
		t.Errorf("the live heap grew by %d KiB while draining %d lines, want under 1 MiB", grew>>10, n)
	}
}
