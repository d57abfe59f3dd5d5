package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/fetch/workqueue"
	redislimits "github.com/fetch-dev/fetch/limits/redis"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
	goredis "github.com/redis/go-redis/v9"
)

// TestQueue_sentinel: three workers, each with its own connection to the
// master a real Sentinel names (redis+sentinel://, as three processes
// would), drain a queue of 3000 lines while the master fails over to its
// replica. No worker fails or hangs: each gets io.EOF once the queue is
// drained. Every line gets a record, and summarize counts each once, ok;
// status counts every line done and none pending.
//
// Replication is asynchronous, and the old master takes writes from the
// promotion of its replica until the clients follow the switch (about a
// second): the acknowledgements and takes it took then are lost. Their
// lines are still in the new master's stream, and are taken again, from
// it or by the claim once idle: a line is fetched twice only so, its
// first record written while the failover went on, and only by another
// worker ("never recorded ok twice by one worker"): a worker that takes
// back a line it acknowledged lately acknowledges it again (see
// Worker.remember). The test logs how many (70 to 670 of 3000 in ten
// runs here); before workers remembered, one worker took back and
// recorded ok twice a fifth to four fifths of them.
func TestQueue_sentinel(t *testing.T) {
	const (
		lines   = 3000
		workers = 3
		// What a fetch takes: the run lasts a few seconds, the failover
		// in its middle.
		fetchTime = 2 * time.Millisecond
		// Records written before the failover starts, and after which
		// writing waits for its end: the workers are taking and
		// acknowledging lines throughout the failover.
		before, gate = 300, 2 * lines / 3
		// How long after the failover a line's first record may have been
		// written, for a second record to be put down to it: lines taken
		// from the old master in its last moments are fetched from the
		// worker's buffer (Batch lines) a little later.
		margin = 2 * time.Second
	)
	s := redistest.StartSentinel(t)
	target, err := redislimits.ParseTarget([]string{s.URL}, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if target.Kind != redislimits.KindSentinel {
		t.Fatalf("target kind %v, want a sentinel's master", target.Kind)
	}
	dial := func() workqueue.Client {
		t.Helper()
		c, err := redislimits.Dial(context.Background(), target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	q := workqueue.New(dial(), "sn")
	enqueue(t, q, "a", list(lines))

	type write struct {
		worker   int
		took, at time.Time // when Next handed the line out, when its record was written
	}
	var (
		mu         sync.Mutex
		writes     = map[int][]write{} // by line number, in order
		written    atomic.Int64
		underway   = make(chan struct{})
		failedOver = make(chan struct{})
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ws := make([]*workqueue.Worker, workers)
	outs := make([]string, workers)
	for i := range ws {
		// Claims after 3s, beats every second: a line whose
		// acknowledgement the failover lost is taken again 3s later.
		ws[i] = newWorker(t, workqueue.New(dial(), "sn"), workqueue.WorkerOptions{
			ClaimAfter: 3 * time.Second, Beat: time.Second, Batch: 16})
		outs[i] = filepath.Join(dir, fmt.Sprintf("out%d.jsonl", i))
	}
	// work is worker i's run: each line fetched, its record written to
	// the worker's own file, then acknowledged, until the queue is
	// drained.
	work := func(i int) error {
		f, err := os.Create(outs[i])
		if err != nil {
			return err
		}
		defer f.Close()
		out := results.NewJSONLWriter(f)
		w := ws[i]
		for {
			l, err := w.Next(ctx)
			took := time.Now()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("Next after %d records in all: %w", written.Load(), err)
			}
			time.Sleep(fetchTime) // the fetch
			if written.Load() >= gate {
				select {
				case <-failedOver:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			rec := record(l, "")
			if err := out.Write(rec); err != nil {
				return err
			}
			if err := out.Flush(); err != nil {
				return err
			}
			mu.Lock()
			writes[l.Number] = append(writes[l.Number], write{i, took, time.Now()})
			mu.Unlock()
			w.Written([]*results.Record{rec})
			if written.Add(1) == before {
				close(underway)
			}
		}
	}
	errs := make(chan error, workers)
	for i := range ws {
		go func() {
			if err := work(i); err != nil {
				errs <- fmt.Errorf("worker %d: %w", i, err)
				return
			}
			errs <- nil
		}()
	}

	select {
	case <-underway:
	case <-ctx.Done():
		t.Fatal("the workers did not write 300 records in 2 minutes")
	}
	foStart := time.Now()
	master, err := s.Failover(ctx)
	foEnd := time.Now()
	atFailover := written.Load()
	close(failedOver)
	if err != nil {
		t.Error(err)
	} else {
		t.Logf("failed over to %s in %s, between records %d and %d of %d",
			master, foEnd.Sub(foStart).Round(time.Millisecond), before, atFailover, lines)
	}
	if atFailover >= lines {
		t.Errorf("the queue was drained before the failover ended: make the run longer")
	}
	for range ws {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	drained := time.Since(foEnd)

	// Every line has a record; summarize counts each once, ok.
	// A line fetched twice: taken again after its first record was
	// written, or while the first copy was under way; by the same worker
	// or another.
	var dups, again, sameWorker, late []int
	for n := 3; n < 3+lines; n++ { // list's lines follow a comment and a blank line
		rs := writes[n]
		switch {
		case len(rs) == 0:
			t.Errorf("line %d has no record", n)
		case len(rs) > 1:
			dups = append(dups, n)
			if first := rs[0].at; first.Before(foStart) || first.After(foEnd.Add(margin)) {
				late = append(late, n)
			}
			if rs[1].took.After(rs[0].at) {
				again = append(again, n)
			}
			for _, w := range rs[1:] {
				if w.worker == rs[0].worker {
					sameWorker = append(sameWorker, n)
					break
				}
			}
		}
	}
	if len(writes) != lines {
		t.Errorf("records of %d lines, want %d", len(writes), lines)
	}
	srcs := make([]report.Source, len(outs))
	for i, out := range outs {
		srcs[i] = report.Source{Name: out, Open: func() (io.ReadCloser, error) { return os.Open(out) }}
	}
	sum, err := report.Summarize(context.Background(), srcs)
	if err != nil {
		t.Fatal(err)
	}
	if r := sum.Report; r.Jobs != lines || r.OK != lines || r.Failed != 0 {
		t.Errorf("summarize: %d jobs, %d ok, %d failed; want %d ok", r.Jobs, r.OK, r.Failed, lines)
	}
	if want := int(written.Load()); sum.Records != want {
		t.Errorf("summarize read %d records, the workers wrote %d", sum.Records, want)
	}

	// Fetched twice only across the failover: the first record's
	// acknowledgement, or the take, was lost with the old master.
	sort.Ints(late)
	t.Logf("%d lines fetched twice (%d taken again once their first record was written, %d while it was under way; %d twice by one worker), "+
		"%d records for %d lines; drained %s after the failover",
		len(dups), len(again), len(dups)-len(again), len(sameWorker), written.Load(), lines, drained.Round(time.Millisecond))
	if len(sameWorker) > 0 {
		t.Errorf("%d lines recorded twice by one worker, such as line %d: %v", len(sameWorker), sameWorker[0], writes[sameWorker[0]])
	}
	if len(late) > 0 {
		t.Errorf("%d lines fetched twice whose first record was not written during the failover (%s to %s), such as line %d: %v",
			len(late), foStart.Format("15:04:05.000"), foEnd.Format("15:04:05.000"), late[0], writes[late[0]])
	}
	for i, w := range ws {
		t.Logf("worker %d: %+v", i, w.Stats())
	}

	st := status(t, q)
	if st.Enqueued != lines || st.Done != lines || st.Failed != 0 || st.Pending != 0 || st.Workers != workers {
		t.Errorf("status: %+v; want %d enqueued and done, none pending, %d workers", st, lines, workers)
	}
}

// TestQueue_ackOfALostTake: a line a worker took from a master that a
// failover then lost is, on the new master, in the stream and pending for
// no one; the worker's acknowledgement, made there once the client has
// followed the failover, deletes it and counts it done. Before, a line
// was counted done only if its XACK found it pending: such lines were
// deleted uncounted, and status stayed short of the lines enqueued
// (2978 to 2990 of 3000 in TestQueue_sentinel).
func TestQueue_ackOfALostTake(t *testing.T) {
	q, srv := newQueue(t)
	enqueue(t, q, "a", list(2))
	w := newWorker(t, q, workqueue.WorkerOptions{Batch: 1})
	l, err := w.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The failover lost the take: the entry is pending for no one.
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	p, err := c.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: "{t}:q", Group: workqueue.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 {
		t.Fatalf("pending: %v, %v; want the line taken", p, err)
	}
	if err := c.XAck(ctx, "{t}:q", workqueue.Group, p[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	w.Written([]*results.Record{record(l, "")})
	if st := status(t, q); st.Done != 1 || st.Pending != 0 {
		t.Errorf("status: %+v; want the line acknowledged counted done", st)
	}
	if got := drain(t, w); len(got) != 1 || got[fmt.Sprintf("a:%d", l.Number)] != 0 {
		t.Errorf("the rest of the queue: %v; want the other line alone", got)
	}
	if st := status(t, q); st.Done != 2 || st.Enqueued != 2 {
		t.Errorf("status after the drain: %+v; want 2 done", st)
	}
}
