package workqueue

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/limits"
	goredis "github.com/redis/go-redis/v9"
)

// WorkerOptions configure a Worker. ClaimAfter and Beat are required.
type WorkerOptions struct {
	// Name is the worker's consumer name in the group; "" for
	// host:pid:random, unique to the worker.
	Name string
	// ClaimAfter is how long a line taken by a worker may go without news
	// of it (its heartbeat touches the lines it holds) before another
	// worker claims it.
	ClaimAfter time.Duration
	// Beat is how often the heartbeat runs, at most a third of
	// ClaimAfter (a longer one is cut to that: the lines of a live worker
	// must not sit idle for the claim period between two beats); a worker
	// counts as alive for three beats after its last.
	Beat time.Duration
	// Follow: Next waits for more lines when the queue is drained, instead
	// of returning io.EOF.
	Follow bool
	// MaxRequestBody is the largest body of a JSON request line (see
	// input.Raw.Parse).
	MaxRequestBody int64
	// Done holds the lines this worker's output already has a final record
	// of (a run before a restart): such a line is acknowledged, not
	// fetched again. Nil for none.
	Done *results.DoneSet
	// GiveUp is how long Redis may stay unreachable before Next fails
	// with an error wrapping limits.ErrCoordinatorDown; 0 never.
	GiveUp time.Duration
	// Batch is how many lines one read from Redis takes (default 32).
	Batch int
	// Clock is the worker's time: the heartbeat's period and the waits
	// between tries (nil: the real clock). The times the queue keeps
	// (heartbeats, the rate's buckets) are on the Redis clock.
	Clock clock.Clock
}

// Worker takes lines from a Queue as one member of its consumer group, and
// acknowledges each once its record is written. Use Next and Written from
// the run (one goroutine each at most), Stats from anywhere, and Close
// once the run has ended. Create one with Queue.Worker.
type Worker struct {
	q   *Queue
	opt WorkerOptions
	clk clock.Clock

	// fillMu is held while fill talks to Redis: Close waits for it, so
	// that no line is taken after Close has put back what was held.
	fillMu sync.Mutex
	mu     sync.Mutex
	held   map[lineKey][]string // entries handed out by Next, by line, not yet let go
	heldID map[string]bool      // their ids, and those of buf
	buf    []goredis.XMessage   // taken from Redis, not yet handed out
	acks   []any                // (id, ok) pairs whose acknowledgement failed: tried again
	// recent holds the entries acknowledged lately, with their ok flags;
	// recentIDs is them in the order acknowledged, a ring of recentMax
	// (see remember).
	recent    map[string]string
	recentIDs []string
	recentAt  int
	cursor    string    // XAUTOCLAIM's
	scanned   time.Time // when XAUTOCLAIM last went through the whole group

	taken, acked, returned atomic.Int64
	stopBeats              context.CancelFunc
	beatDone               chan struct{}
	closed                 bool
}

// ErrClosed is Next's error once Close was called.
var ErrClosed = errors.New("workqueue: worker closed")

// lineKey names a line as its record does.
type lineKey struct {
	input string
	n     int
}

// Stats counts a worker's lines so far.
type Stats struct {
	Taken    int64 // handed to the run
	Acked    int64 // acknowledged: their final record written
	Returned int64 // put back in the queue (interrupted, or Redis lost a lease)
	Held     int64 // taken and not let go yet
}

// Worker joins the queue's consumer group as a new worker and starts its
// heartbeat. ctx bounds the calls to Redis that joining takes.
func (q *Queue) Worker(ctx context.Context, opt WorkerOptions) (*Worker, error) {
	if opt.ClaimAfter <= 0 || opt.Beat <= 0 {
		panic("workqueue: WorkerOptions.ClaimAfter and Beat must be positive")
	}
	if opt.Name == "" {
		// Host and process say where it runs; the random part keeps two
		// workers of one process, made in the same millisecond, apart
		// (one name is one consumer of the group: they would share lines).
		host, _ := os.Hostname()
		var r [4]byte
		_, _ = rand.Read(r[:])
		opt.Name = fmt.Sprintf("%s:%d:%x", host, os.Getpid(), r)
	}
	if opt.Batch < 1 {
		opt.Batch = 32
	}
	opt.Beat = min(opt.Beat, opt.ClaimAfter/3)
	w := &Worker{q: q, opt: opt, clk: opt.Clock, held: map[lineKey][]string{}, heldID: map[string]bool{},
		recent: map[string]string{}, cursor: "0-0", beatDone: make(chan struct{})}
	if w.clk == nil {
		w.clk = clock.Real{}
	}
	if err := q.ensureGroup(ctx); err != nil {
		return nil, err
	}
	if err := w.beat(ctx); err != nil {
		return nil, err
	}
	bctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	w.stopBeats = stop
	go w.beats(bctx)
	return w, nil
}

// Name is the worker's consumer name.
func (w *Worker) Name() string { return w.opt.Name }

// Stats returns the worker's counts so far.
func (w *Worker) Stats() Stats {
	w.mu.Lock()
	held := int64(len(w.heldID) - len(w.buf))
	w.mu.Unlock()
	return Stats{Taken: w.taken.Load(), Acked: w.acked.Load(), Returned: w.returned.Load(), Held: held}
}

// wait waits d on the worker's clock, or until ctx is done.
func (w *Worker) wait(ctx context.Context, d time.Duration) error {
	ch := make(chan struct{})
	t := w.clk.AfterFunc(d, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// poll is how long a worker with nothing to take waits before it looks
// again for lines to claim: an eighth of the claim period, from 50ms to a
// second.
func (w *Worker) poll() time.Duration {
	return min(max(w.opt.ClaimAfter/8, 50*time.Millisecond), time.Second)
}

// Next returns the next line to fetch: one claimed from a worker that went
// silent for the claim period, else a new one, waiting for one while other
// workers hold lines (they may die). It returns io.EOF once nothing is
// left to take and no worker holds any line (with Follow it waits on), and
// ctx.Err() once ctx is done. While Redis cannot be reached it tries
// again, up to GiveUp. A line this worker's output already finished
// (Done) is acknowledged and passed over.
func (w *Worker) Next(ctx context.Context) (*input.Line, error) {
	var down time.Time // when Redis was first found unreachable; zero while it answers
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if l := w.pop(ctx); l != nil {
			return l, nil
		}
		drained, err := w.fill(ctx)
		switch {
		case errors.Is(err, ErrClosed):
			return nil, err
		case err == nil:
			down = time.Time{}
			if drained && !w.opt.Follow {
				return nil, io.EOF
			}
			continue
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		now := w.clk.Now()
		if down.IsZero() {
			down = now
		}
		if w.opt.GiveUp > 0 && now.Sub(down) >= w.opt.GiveUp {
			return nil, fmt.Errorf("workqueue: Redis unreachable for %s: %w: %w", w.opt.GiveUp, limits.ErrCoordinatorDown, err)
		}
		if err := w.wait(ctx, w.poll()); err != nil {
			return nil, err
		}
	}
}

// pop hands out the first line of buf, acknowledging those Done holds.
func (w *Worker) pop(ctx context.Context) *input.Line {
	if l := w.popBuf(); l != nil {
		return l
	}
	w.flushAcks(ctx)
	return nil
}

// popBuf hands out the first line of buf that is to be fetched.
func (w *Worker) popBuf() *input.Line {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.buf) > 0 {
		m := w.buf[0]
		w.buf[0] = goredis.XMessage{}
		w.buf = w.buf[1:]
		l := parse(m, w.opt.MaxRequestBody)
		if l == nil { // not an entry of this queue's: let it go
			w.acks = append(w.acks, m.ID, "0")
			delete(w.heldID, m.ID)
			continue
		}
		if w.opt.Done.Has(l.Input, l.Number, l.Shown) {
			// Recorded before this worker restarted, not acknowledged:
			// counted done (not failed: the set does not tell).
			w.acks = append(w.acks, m.ID, "1")
			delete(w.heldID, m.ID)
			continue
		}
		k := lineKey{l.Input, l.Number}
		w.held[k] = append(w.held[k], m.ID)
		w.taken.Add(1)
		return l
	}
	return nil
}

// parse makes the line of entry m, or nil when m is not one.
func parse(m goredis.XMessage, maxBody int64) *input.Line {
	in, _ := m.Values["i"].(string)
	ns, _ := m.Values["n"].(string)
	text, _ := m.Values["t"].(string)
	flags, _ := m.Values["f"].(string)
	n, err := strconv.Atoi(ns)
	if in == "" || err != nil || n < 1 {
		return nil
	}
	r := input.Raw{Input: in, Number: n, Text: []byte(text), Long: flags != "", AtPastKept: flags == flagLongAtPast}
	return r.Parse(maxBody)
}

// fill takes lines from Redis into buf: those idle for the claim period
// first, then new ones, waiting up to poll for some. drained reports that
// none was found and that no line is pending in the group but those this
// worker holds, with none held: the queue is done.
func (w *Worker) fill(ctx context.Context) (drained bool, err error) {
	w.fillMu.Lock()
	defer w.fillMu.Unlock()
	q := w.q
	w.mu.Lock()
	cursor, closed, scanned := w.cursor, w.closed, w.scanned
	w.mu.Unlock()
	if closed {
		return false, ErrClosed
	}
	// Lines to claim are looked for once a poll: they have waited the
	// claim period already, and a scan of the group's pending lines costs
	// Redis more than taking a batch of new ones.
	if now := w.clk.Now(); cursor != "0-0" || now.Sub(scanned) >= w.poll() {
		msgs, next, err := q.c.XAutoClaim(ctx, &goredis.XAutoClaimArgs{Stream: q.keys.stream, Group: Group,
			Consumer: w.opt.Name, MinIdle: w.opt.ClaimAfter, Start: cursor, Count: int64(w.opt.Batch)}).Result()
		if err != nil {
			return false, err
		}
		w.mu.Lock()
		w.cursor = next
		if next == "0-0" {
			w.scanned = now
		}
		w.mu.Unlock()
		if w.add(msgs) > 0 {
			return false, nil
		}
		if next != "0-0" {
			return false, nil // more to look through
		}
	}
	streams, err := q.c.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: Group, Consumer: w.opt.Name,
		Streams: []string{q.keys.stream, ">"}, Count: int64(w.opt.Batch), Block: w.poll()}).Result()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return false, err
	}
	for _, s := range streams {
		if w.add(s.Messages) > 0 {
			return false, nil
		}
	}
	p, err := q.c.XPending(ctx, q.keys.stream, Group).Result()
	if err != nil {
		return false, err
	}
	w.mu.Lock()
	held := len(w.heldID)
	w.mu.Unlock()
	return p.Count == 0 && held == 0, nil
}

// add puts the messages not already held into buf, and returns how many.
// One this worker acknowledged lately is acknowledged again, not fetched
// (see remember).
func (w *Worker) add(msgs []goredis.XMessage) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if w.heldID[m.ID] || m.Values == nil {
			continue // claimed back from this worker itself: it has it already
		}
		if ok, seen := w.recent[m.ID]; seen {
			w.acks = append(w.acks, m.ID, ok)
			continue
		}
		w.heldID[m.ID] = true
		w.buf = append(w.buf, m)
		n++
	}
	return n
}

// Written lets go of the lines of recs, whose records are written to the
// output: a final record's line is acknowledged, a line whose record is
// coordinator (a lease lost, Redis gone) is put back in the queue at once,
// and a cancelled one is kept until Close puts it back. An acknowledgement
// that fails is tried again with the next.
func (w *Worker) Written(recs []*results.Record) {
	var ret []any
	w.mu.Lock()
	for _, r := range recs {
		k := lineKey{r.Input, r.Line}
		ids := w.held[k]
		if len(ids) == 0 {
			continue
		}
		kind := ""
		if r.Error != nil {
			kind = r.Error.Kind
		}
		if kind == results.KindCancelled {
			continue
		}
		id := ids[0]
		if len(ids) == 1 {
			delete(w.held, k)
		} else {
			w.held[k] = ids[1:]
		}
		delete(w.heldID, id)
		if kind == results.KindCoordinator {
			ret = append(ret, id)
			continue
		}
		ok := "0"
		if r.OK {
			ok = "1"
		}
		w.acks = append(w.acks, id, ok)
		w.remember(id, ok)
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), w.opt.Beat)
	defer cancel()
	w.flushAcks(ctx)
	if len(ret) > 0 {
		w.putBack(ctx, ret)
	}
}

// recentMax is how many acknowledged entries a worker remembers, some
// 600 KiB: a worker's memory stays flat in the queue's length. A line
// whose acknowledgement was lost and that the worker takes back after
// more than that many others (by the claim, a claim period later, at
// hundreds of lines a second) is fetched again.
const recentMax = 1 << 13

// remember keeps entry id, just acknowledged with ok, among the recent
// ones, forgetting the oldest past recentMax. An acknowledgement can be
// lost after Redis took it: a Sentinel failover drops the writes the old
// master took between its replica's promotion and the clients' switch
// (about a second). The entry is then still in the new master's stream,
// and this worker may take it again (by a claim once idle, or anew when
// its take was lost too): it acknowledges it again instead of fetching
// it, so that no worker records a line ok twice. Call with w.mu held.
func (w *Worker) remember(id, ok string) {
	if _, seen := w.recent[id]; seen {
		w.recent[id] = ok
		return
	}
	if len(w.recentIDs) < recentMax {
		w.recentIDs = append(w.recentIDs, id)
	} else {
		delete(w.recent, w.recentIDs[w.recentAt])
		w.recentIDs[w.recentAt] = id
		w.recentAt = (w.recentAt + 1) % recentMax
	}
	w.recent[id] = ok
}

// flushAcks sends the acknowledgements waiting; those that fail wait for
// the next try. Redis is called without w.mu held: Stats (a scrape) and
// the other goroutine do not wait for it.
func (w *Worker) flushAcks(ctx context.Context) bool {
	w.mu.Lock()
	acks := w.acks
	w.acks = nil
	w.mu.Unlock()
	if len(acks) == 0 {
		return true
	}
	q := w.q
	args := append([]any{Group}, acks...)
	if err := ackScript.Run(ctx, q.c, []string{q.keys.stream, q.keys.stats, q.keys.rate}, args...).Err(); err != nil {
		w.mu.Lock()
		w.acks = append(acks, w.acks...)
		w.mu.Unlock()
		return false
	}
	w.acked.Add(int64(len(acks) / 2))
	return true
}

// putBack puts the entries ids back in the queue, for any worker.
func (w *Worker) putBack(ctx context.Context, ids []any) error {
	q := w.q
	args := append([]any{Group, w.opt.Name}, ids...)
	n, err := returnScript.Run(ctx, q.c, []string{q.keys.stream}, args...).Int64()
	if err != nil {
		return fmt.Errorf("workqueue: putting lines back: %w", err)
	}
	w.returned.Add(n)
	return nil
}

// beats runs the heartbeat every Beat until Close.
func (w *Worker) beats(ctx context.Context) {
	defer close(w.beatDone)
	for w.wait(ctx, w.opt.Beat) == nil {
		bctx, cancel := context.WithTimeout(ctx, w.opt.Beat)
		_ = w.beat(bctx) // a beat that fails is tried again at the next
		cancel()
	}
}

// beat says the worker is alive for three beats, touches the lines it
// holds and forgets those it lost (see beatScript).
func (w *Worker) beat(ctx context.Context) error {
	q := w.q
	w.mu.Lock()
	args := make([]any, 0, 3+len(w.heldID))
	args = append(args, Group, w.opt.Name, w.opt.Beat.Milliseconds())
	for id := range w.heldID {
		args = append(args, id)
	}
	w.mu.Unlock()
	lost, err := beatScript.Run(ctx, q.c, []string{q.keys.stream, q.keys.workers, q.keys.rate}, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("workqueue: heartbeat: %w", err)
	}
	w.forget(lost)
	return nil
}

// forget drops from buf the lines of ids, which are no longer the
// worker's: after a pause (a stopped process, a Redis away) longer than
// the claim period, others took them; fetching them too would only
// duplicate their records. Lines already handed out are left to finish.
func (w *Worker) forget(ids []string) {
	if len(ids) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	gone := make(map[string]bool, len(ids))
	for _, id := range ids {
		gone[id] = true
	}
	kept := w.buf[:0]
	for _, m := range w.buf {
		if gone[m.ID] {
			delete(w.heldID, m.ID)
			continue
		}
		kept = append(kept, m)
	}
	clear(w.buf[len(kept):])
	w.buf = kept
}

// Close stops the heartbeat, puts back in the queue every line the worker
// holds whose record was not written (or was cancelled), and leaves the
// group: the worker no longer counts as alive. It uses ctx for the calls to
// Redis; what it could not do is left to the claim period: another worker
// takes the lines once they have been idle that long.
func (w *Worker) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.stopBeats()
	<-w.beatDone
	w.fillMu.Lock() // a take under way ends within a poll
	defer w.fillMu.Unlock()
	acked := w.flushAcks(ctx)
	w.mu.Lock()
	ids := make([]any, 0, len(w.heldID))
	for id := range w.heldID {
		ids = append(ids, id)
	}
	w.buf, w.held, w.heldID = nil, map[lineKey][]string{}, map[string]bool{}
	w.mu.Unlock()
	var err error
	if len(ids) > 0 {
		err = w.putBack(ctx, ids)
	}
	q := w.q
	if rerr := q.c.ZRem(ctx, q.keys.workers, w.opt.Name).Err(); rerr != nil && err == nil {
		err = fmt.Errorf("workqueue: leaving: %w", rerr)
	}
	if err == nil && acked {
		// Nothing of it pending: its name leaves the group's list too.
		if n, perr := q.c.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: q.keys.stream, Group: Group,
			Start: "-", End: "+", Count: 1, Consumer: w.opt.Name}).Result(); perr == nil && len(n) == 0 {
			_ = q.c.XGroupDelConsumer(ctx, q.keys.stream, Group, w.opt.Name).Err()
		}
	}
	return err
}
