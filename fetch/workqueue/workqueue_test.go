package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/fetch/workqueue"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newQueue starts a Redis for t and returns a queue on it, with its
// client closed when t ends.
func newQueue(t *testing.T) (*workqueue.Queue, *redistest.Server) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.Client()
	t.Cleanup(func() { c.Close() })
	return workqueue.New(c, "t"), srv
}

// list is n URL lines with a comment and a blank line first.
func list(n int) string {
	var b strings.Builder
	b.WriteString("# urls\n\n")
	for i := range n {
		fmt.Fprintf(&b, "http://127.0.0.1:1/x?i=%d\n", i)
	}
	return b.String()
}

func enqueue(t *testing.T, q *workqueue.Queue, name, text string) int64 {
	t.Helper()
	n, err := q.Enqueue(context.Background(), input.Source{Name: name, R: strings.NewReader(text)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func newWorker(t *testing.T, q *workqueue.Queue, opt workqueue.WorkerOptions) *workqueue.Worker {
	t.Helper()
	if opt.ClaimAfter == 0 {
		opt.ClaimAfter = time.Hour
	}
	if opt.Beat == 0 {
		// Alive for three beats: a beat late by more than two seconds on
		// a loaded machine is not taken for a dead worker.
		opt.Beat = time.Second
	}
	w, err := q.Worker(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(context.Background()) })
	return w
}

// record is the record of l, ok or failed with kind.
func record(l *input.Line, kind string) *results.Record {
	r := &results.Record{URL: l.Shown, Input: l.Input, Line: l.Number, OK: kind == ""}
	if kind != "" {
		r.Error = &results.Error{Phase: results.PhaseHeaders, Kind: kind}
	}
	return r
}

// drain takes lines from w until io.EOF, writing each ok at once, and
// returns them by "input:line". It may run in a goroutine of its own.
func drain(t *testing.T, w *workqueue.Worker) map[string]int {
	t.Helper()
	got := map[string]int{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		l, err := w.Next(ctx)
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Error(err) // not Fatal: drain may run in a goroutine of its own
			return got
		}
		got[fmt.Sprintf("%s:%d", l.Input, l.Number)]++
		w.Written([]*results.Record{record(l, "")})
	}
}

func status(t *testing.T, q *workqueue.Queue) workqueue.Status {
	t.Helper()
	st, err := q.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestEnqueue_oncePerLine: an input enqueued again adds only the lines
// past the last one enqueued from it; comment and blank lines are never
// enqueued, and line numbers count them.
func TestEnqueue_oncePerLine(t *testing.T) {
	q, _ := newQueue(t)
	if n := enqueue(t, q, "a.txt", list(300)); n != 300 {
		t.Fatalf("first enqueue added %d, want 300", n)
	}
	if n := enqueue(t, q, "a.txt", list(300)); n != 0 {
		t.Errorf("the same input again added %d, want 0", n)
	}
	if n := enqueue(t, q, "a.txt", list(310)); n != 10 {
		t.Errorf("the input grown by 10 lines added %d, want 10", n)
	}
	if n := enqueue(t, q, "b.txt", list(5)); n != 5 {
		t.Errorf("another input added %d, want 5", n)
	}
	if st := status(t, q); st.Enqueued != 315 {
		t.Errorf("status: enqueued %d, want 315", st.Enqueued)
	}
	got := drain(t, newWorker(t, q, workqueue.WorkerOptions{}))
	if len(got) != 315 {
		t.Errorf("drained %d lines, want 315", len(got))
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s taken %d times", k, n)
		}
	}
	if got["a.txt:3"] != 1 || got["a.txt:312"] != 1 || got["a.txt:2"] != 0 {
		t.Errorf("line numbers do not count the comment and blank lines: a.txt:3 %d, a.txt:312 %d",
			got["a.txt:3"], got["a.txt:312"])
	}
	st := status(t, q)
	if st.Done != 315 || st.Pending != 0 || st.Failed != 0 {
		t.Errorf("status after the drain: %+v", st)
	}
}

// TestWorker_linesParsedAsTheScannerDoes: what a worker hands out is the
// Line a plain run's Scanner makes of the same input: JSON request lines,
// invalid and long lines, credentials hidden.
func TestWorker_linesParsedAsTheScannerDoes(t *testing.T) {
	q, _ := newQueue(t)
	text := "\ufeffhttp://u:p@127.0.0.1:1/a\nnot a url\n" +
		`{"url":"http://127.0.0.1:1/j","method":"POST","body":"x","id":7}` + "\n" +
		"http://127.0.0.1:1/" + strings.Repeat("a", 9000) + "@x\n"
	enqueue(t, q, "in", text)
	w := newWorker(t, q, workqueue.WorkerOptions{})
	s := input.NewScanner(input.Source{Name: "in", R: strings.NewReader(text)}, input.Shard{}, nil)
	for s.Scan() {
		want := s.Line()
		got, err := w.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got.Number != want.Number || got.Shown != want.Shown || got.Invalid != want.Invalid ||
			fmt.Sprint(got.URL) != fmt.Sprint(want.URL) || (got.Request == nil) != (want.Request == nil) {
			t.Errorf("line %d: got %+v, want %+v", want.Number, got, want)
		}
		if want.Request != nil && (got.Request.Method != want.Request.Method || string(got.Request.ID) != string(want.Request.ID)) {
			t.Errorf("line %d: request %+v, want %+v", want.Number, got.Request, want.Request)
		}
		w.Written([]*results.Record{record(got, "")})
	}
}

// TestWorker_claimsADeadWorkersLines: the lines of a worker that stopped
// (no heartbeat, no acknowledgement) are taken by another once they have
// been idle for the claim period, not before; its own lines a worker
// holds past the claim period, beating, are not.
func TestWorker_claimsADeadWorkersLines(t *testing.T) {
	q, srv := newQueue(t)
	enqueue(t, q, "a", list(40))
	const claimAfter = time.Second
	// The dead worker: its own connection, closed once it took its lines.
	dc := srv.Client()
	dead, err := workqueue.New(dc, "t").Worker(context.Background(), workqueue.WorkerOptions{ClaimAfter: claimAfter, Beat: 100 * time.Millisecond, Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[int]bool{}
	for range 5 {
		l, err := dead.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		taken[l.Number] = true
	}
	dc.Close() // it dies: no more beats, no acknowledgements
	defer dead.Close(context.Background())
	died := time.Now()

	// A live worker that holds one line past the claim period, beating.
	// Its beat, asked for hourly, is cut to a third of the claim period.
	alive := newWorker(t, q, workqueue.WorkerOptions{ClaimAfter: claimAfter, Batch: 1, Beat: time.Hour})
	held, err := alive.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	w := newWorker(t, q, workqueue.WorkerOptions{ClaimAfter: claimAfter})
	got := map[int]int{}
	var firstClaim time.Duration
	ctx, cancel := context.WithTimeout(context.Background(), 3*claimAfter)
	defer cancel()
	for len(got) < 40-1 {
		l, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("after %d lines: %v", len(got), err)
		}
		if taken[l.Number] && firstClaim == 0 {
			firstClaim = time.Since(died)
		}
		got[l.Number]++
		w.Written([]*results.Record{record(l, "")})
	}
	if firstClaim < claimAfter-100*time.Millisecond {
		t.Errorf("a dead worker's line was claimed %s after it died, before the claim period %s", firstClaim, claimAfter)
	}
	t.Logf("the dead worker's first line was claimed %s after it died", firstClaim)
	if got[held.Number] != 0 {
		t.Errorf("line %d, held by a live worker, was claimed", held.Number)
	}
	// The live worker's line is still its own; once written, the queue
	// is drained.
	alive.Written([]*results.Record{record(held, "")})
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if _, err := w.Next(dctx); !errors.Is(err, io.EOF) {
		t.Errorf("Next after every line is written: %v, want io.EOF", err)
	}
	if st := status(t, q); st.Done != 40 || st.Pending != 0 {
		t.Errorf("status: %+v, want 40 done, none pending", st)
	}
}

// TestWorker_putsBackOnClose: lines a worker took but whose record was
// cancelled or never written go back to the queue when it closes, for
// another to take at once; a coordinator record's line goes back at
// once. None is counted done.
func TestWorker_putsBackOnClose(t *testing.T) {
	q, _ := newQueue(t)
	enqueue(t, q, "a", list(10))
	a := newWorker(t, q, workqueue.WorkerOptions{Batch: 10})
	var lines []*input.Line
	for range 4 {
		l, err := a.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	a.Written([]*results.Record{record(lines[0], results.KindCancelled), record(lines[1], results.KindCoordinator),
		record(lines[2], results.KindStatus)})
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Acked != 1 || st.Returned != 9 {
		t.Errorf("stats %+v: want 1 acked (the status failure), 9 returned", st)
	}
	st := status(t, q)
	if st.Done != 1 || st.Failed != 1 || st.Pending != 0 || st.Workers != 0 {
		t.Errorf("status after close: %+v", st)
	}
	// The claim period is an hour: what b gets was put back.
	got := drain(t, newWorker(t, q, workqueue.WorkerOptions{}))
	if len(got) != 9 {
		t.Errorf("the next worker took %d lines, want the 9 not done", len(got))
	}
}

// TestWorker_doneLinesAcknowledged: a line the worker's output already
// finished (a restart after writing, before acknowledging) is
// acknowledged, not handed out again.
func TestWorker_doneLinesAcknowledged(t *testing.T) {
	q, _ := newQueue(t)
	enqueue(t, q, "a", list(3))
	var out strings.Builder
	fmt.Fprintf(&out, `{"url":"http://127.0.0.1:1/x?i=1","input":"a","line":4,"ok":true,"status":200}`+"\n")
	done, err := results.LoadDone(strings.NewReader(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, newWorker(t, q, workqueue.WorkerOptions{Done: done}))
	if len(got) != 2 || got["a:4"] != 0 {
		t.Errorf("took %v, want lines 3 and 5", got)
	}
	if st := status(t, q); st.Done != 3 || st.Pending != 0 {
		t.Errorf("status: %+v", st)
	}
}

// TestStatus_workersAndPending: status counts the workers whose heartbeat
// runs, and the lines each holds.
func TestStatus_workersAndPending(t *testing.T) {
	q, _ := newQueue(t)
	if _, err := q.Status(context.Background()); !errors.Is(err, workqueue.ErrNoGroup) {
		t.Errorf("status of an empty namespace: %v, want ErrNoGroup", err)
	}
	enqueue(t, q, "a", list(10))
	a := newWorker(t, q, workqueue.WorkerOptions{Name: "a", Batch: 3})
	b := newWorker(t, q, workqueue.WorkerOptions{Name: "b", Batch: 2})
	for _, w := range []*workqueue.Worker{a, b} {
		if _, err := w.Next(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	st := status(t, q)
	if st.Workers != 2 || st.Pending != 5 || st.PendingBy["a"] != 3 || st.PendingBy["b"] != 2 {
		t.Errorf("status: %+v", st)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := status(t, q); st.Workers != 1 || st.Pending != 2 {
		t.Errorf("status after a closed: %+v", st)
	}
}

// TestEnqueue_survivesRestartWithAOF: with an append-only file, the
// queue, a worker's pending lines and the counts survive Redis killed
// and restarted.
func TestEnqueue_survivesRestartWithAOF(t *testing.T) {
	srv := redistest.StartAOF(t)
	c := srv.Client()
	defer c.Close()
	q := workqueue.New(c, "t")
	enqueue(t, q, "a", list(20))
	w := newWorker(t, q, workqueue.WorkerOptions{Name: "w", Batch: 5})
	l, err := w.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.Written([]*results.Record{record(l, "")})
	srv.Stop() // kill -9
	srv.Restart()
	st := status(t, q)
	if st.Enqueued != 20 || st.Done != 1 || st.Pending != 4 || st.PendingBy["w"] != 4 {
		t.Errorf("status after the restart: %+v", st)
	}
	if n := enqueue(t, q, "a", list(20)); n != 0 {
		t.Errorf("enqueue after the restart added %d, want 0", n)
	}
	if got := drain(t, w); len(got) != 19 {
		t.Errorf("drained %d after the restart, want 19", len(got))
	}
}

// TestWorker_defaultNamesDiffer: workers made at once in one process
// without a name are two consumers of the group, not one: a name of host,
// pid and the millisecond made them one, and status counted 1 worker of 2
// (TestQueue_cluster, now and then).
func TestWorker_defaultNamesDiffer(t *testing.T) {
	q, _ := newQueue(t)
	enqueue(t, q, "a", list(4))
	a := newWorker(t, q, workqueue.WorkerOptions{Batch: 2})
	b := newWorker(t, q, workqueue.WorkerOptions{Batch: 2})
	if a.Name() == b.Name() {
		t.Fatalf("two workers named %q", a.Name())
	}
	if st := status(t, q); st.Workers != 2 {
		t.Errorf("status counts %d workers, want 2", st.Workers)
	}
}
