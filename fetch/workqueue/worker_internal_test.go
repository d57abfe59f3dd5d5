package workqueue

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestBeat_forgetsLinesClaimedByOthers: a worker that went silent past
// the claim period (a stopped process) finds at its next beat which of
// the lines it took others have claimed, and drops those it had not
// handed out yet, instead of fetching them a second time; the one it
// handed out is left to finish, and its acknowledgement counts nothing
// twice.
func TestBeat_forgetsLinesClaimedByOthers(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	defer c.Close()
	q := New(c, "t")
	var text strings.Builder
	for range 10 {
		text.WriteString("http://127.0.0.1:1/x\n")
	}
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, input.Source{Name: "a", R: strings.NewReader(text.String())}); err != nil {
		t.Fatal(err)
	}
	// a beats only when the test says: its period is an hour.
	a, err := q.Worker(ctx, WorkerOptions{Name: "a", ClaimAfter: time.Hour, Beat: time.Hour, Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	first, err := a.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := q.Worker(ctx, WorkerOptions{Name: "b", ClaimAfter: time.Second, Beat: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	// b claims all ten once they have been idle a second, and writes them.
	for range 10 {
		l, err := b.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Written([]*results.Record{{Input: l.Input, Line: l.Number, OK: true}})
	}
	if err := a.beat(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.Held != 1 || len(a.buf) != 0 {
		t.Errorf("after the beat: %d buffered, %+v; want none buffered, the one handed out held", len(a.buf), st)
	}
	a.Written([]*results.Record{{Input: first.Input, Line: first.Number, OK: true}})
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if l, err := a.Next(nctx); !errors.Is(err, io.EOF) {
		t.Errorf("a's Next after the beat: %v, %v; want io.EOF", l, err)
	}
	st, err := q.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Done != 10 || st.Pending != 0 {
		t.Errorf("status: %+v; want 10 done (the line written twice counted once)", st)
	}
}
