package fetch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/limits"
	"golang.org/x/sync/errgroup"
)

// ErrInterrupted is wrapped by Run's error when ctx was cancelled.
var ErrInterrupted = errors.New("fetch: interrupted")

// Run reads every input in order, fetches each URL line, writes one record
// per line taken to w, and returns the report. When ctx is cancelled Run
// stops taking lines, gives work in flight the grace period, records what is
// still unfinished as cancelled, and returns the report (Interrupted set)
// with an error wrapping ErrInterrupted and context.Canceled.
func (e *Engine) Run(ctx context.Context, inputs []input.Source, w RecordWriter) (*report.Report, error) {
	return e.run(ctx, inputs, nil, w)
}

// run is Run over inputs, or RunSource over src when it is not nil.
func (e *Engine) run(ctx context.Context, inputs []input.Source, src LineSource, w RecordWriter) (*report.Report, error) {
	start := e.clock().now()
	coll := newCollector(start, e.cfg.ReportHosts, e.cfg.ReportProxies, e.routes)
	coll.obs = e.cfg.Observer
	e.coll.Store(coll)
	defer e.coll.Store(nil)

	// Two stages run in g: fetch runs the jobs, write writes their
	// records. One that fails (only write can) ends stages, which stops
	// admitting and ends the work at once. The reader is a third stage
	// outside g: see read.
	g, stages := errgroup.WithContext(context.WithoutCancel(ctx))
	// admit ends on an interrupt (or a failed write): no line is taken and
	// no attempt starts after it. work ends the grace period later: the
	// attempts already under way may finish until then.
	admit, stopAdmitCause := context.WithCancelCause(ctx)
	stopAdmit := func() { stopAdmitCause(nil) }
	defer stopAdmit()
	defer context.AfterFunc(stages, stopAdmit)()
	e.halted.Store(nil)
	e.halt.Store(&stopAdmitCause)
	defer e.halt.Store(nil)
	work, cancelWork := context.WithCancel(stages)
	defer cancelWork()
	defer context.AfterFunc(admit, func() { e.grace(work, cancelWork) })()

	jobs := newJobQueue(min(e.cfg.Concurrency, maxJobsQueued), maxQueuedBytes)
	readDone := make(chan error, 1)
	go e.read(admit, inputs, src, jobs, readDone)

	records := make(chan *results.Record, min(e.cfg.Concurrency, maxRecordsWaiting))
	g.Go(func() error {
		defer close(records)
		e.fetch(admit, work, stages, jobs, records, coll)
		return nil
	})
	g.Go(func() error { return e.write(w, records, coll, &written{src: src}) })
	writeErr := g.Wait()
	cancelWork() // ends the grace timer
	e.transports.closeIdle()

	var readErr error
	readAll := false
	select {
	case readErr = <-readDone:
		readAll = readErr == nil
		if errors.Is(readErr, context.Canceled) {
			readErr = nil
		}
	default: // still blocked in a read
	}
	// Interrupted means something was left: unread input or a cancelled
	// record. A signal that lands while the last records are flushed
	// changes nothing.
	e.takeEvents(coll)
	rep := coll.report(millis(e.clock().since(start)))
	halted := e.halted.Load()
	interrupted := ctx.Err() != nil && (!readAll || rep.ByKind[results.KindCancelled] > 0)
	rep.Interrupted = interrupted && halted == nil
	if halted != nil {
		rep.Stopped = halted.stopped
	}
	switch {
	case writeErr != nil:
		return rep, writeErr
	case halted != nil:
		return rep, fmt.Errorf("fetch: %w", e.haltMessage(halted))
	case readErr != nil:
		return rep, readErr
	case interrupted:
		return rep, fmt.Errorf("%w: %w", ErrInterrupted, context.Canceled)
	}
	return rep, nil
}

// StoppedNoProxy is the report's "stopped" when the run stopped because no
// proxy could serve.
const StoppedNoProxy = "no usable proxy"

// StoppedCoordinator is the report's "stopped" when the run stopped because
// the coordinator (Redis) was unreachable for the pool wait.
const StoppedCoordinator = "coordinator unreachable"

// halting is why a run stopped admitting before its input ran out: the
// scheduler's error (a *limits.PoolError, or one wrapping
// limits.ErrCoordinatorDown) and the report's "stopped".
type halting struct {
	err     error
	stopped string
}

// haltFor returns the halting that err of Acquire calls for, or nil: a pool
// that cannot serve, or a coordinator gone for the pool wait.
func haltFor(err error) *halting {
	var pe *limits.PoolError
	switch {
	case errors.As(err, &pe):
		return &halting{err: pe, stopped: StoppedNoProxy}
	case errors.Is(err, limits.ErrCoordinatorDown):
		return &halting{err: err, stopped: StoppedCoordinator}
	}
	return nil
}

// stop stops admitting for h: the run ends as on an interrupt, and Run
// returns an error wrapping h's (limits.ErrNoUsableProxy or
// limits.ErrCoordinatorDown). The first cause is kept.
func (e *Engine) stop(h *halting) {
	if e.halted.CompareAndSwap(nil, h) {
		if stop := e.halt.Load(); stop != nil {
			(*stop)(h.err)
		}
	}
}

// poolError is the error of a pool that cannot serve, with the last failure
// of a proxy's own when there was one: "no usable proxy: 3 of 3 benched for
// 2m0s; last failure: connection refused".
type poolError struct {
	pe   *limits.PoolError
	last string
}

func (p *poolError) Error() string {
	if p.last == "" {
		return p.pe.Error()
	}
	return p.pe.Error() + "; last failure: " + p.last
}

func (p *poolError) Unwrap() error { return p.pe }

// haltMessage is the error that says why the run stopped: for a pool, with
// the last failure of a proxy's own.
func (e *Engine) haltMessage(h *halting) error {
	pe, ok := h.err.(*limits.PoolError)
	if !ok {
		return h.err
	}
	last := ""
	if l := e.lastFault.Load(); l != nil {
		last = *l
	}
	return &poolError{pe: pe, last: last}
}

// maxRecordsWaiting bounds the records finished but not yet written: a
// slow writer holds the workers up, whatever -c is.
const maxRecordsWaiting = 256

// grace lets the work in flight go on for the grace period once admitting
// has stopped, then ends it; StopNow, or the work ending by itself, cuts it
// short.
func (e *Engine) grace(work context.Context, end context.CancelFunc) {
	over, t := e.clock().after(e.cfg.Grace)
	defer t.Stop()
	select {
	case <-over:
	case <-e.stopNow:
	case <-work.Done():
	}
	end()
}

// maxJobsQueued bounds the jobs read ahead of the workers.
const maxJobsQueued = 64

// read is the reader stage: it streams the jobs of inputs (of src, when
// not nil) to jobs until admit ends, closes jobs, and sends its error (nil when every line was
// taken) to done. Run does not wait for it once admitting has stopped: a
// read from a pipe or a terminal may block for ever, and is left behind.
func (e *Engine) read(admit context.Context, inputs []input.Source, src LineSource, jobs *jobQueue, done chan<- error) {
	defer jobs.close()
	var err error
	if src != nil {
		err = readSource(admit, src, jobs)
	} else {
		err = readInputs(admit, inputs, e.cfg.Shard, e.cfg.Done, e.cfg.MaxRequestBody, &e.skipped, jobs)
	}
	if err == nil {
		err = jobs.drained(admit)
	}
	if err == nil {
		e.sched.Drain() // every line is taken: the scheduler may plan the tail
	}
	done <- err
}

// readInputs streams the URL lines of every input, in order, to jobs, the
// lines of other shards than shard passed over and those done lists
// counted in skipped, JSON request lines' bodies at most maxBody bytes. It
// stops early, returning ctx.Err(), when ctx is done. Memory does not grow
// with the length of the inputs.
func readInputs(ctx context.Context, inputs []input.Source, shard input.Shard, done *results.DoneSet, maxBody int64, skipped *atomic.Int64, jobs *jobQueue) error {
	for _, in := range inputs {
		s := input.NewScanner(in, shard, done)
		s.SetMaxRequestBody(maxBody)
		for s.Scan() {
			if s.Done() {
				skipped.Add(1)
				continue
			}
			if err := jobs.put(ctx, s.Line()); err != nil {
				return err
			}
		}
		if err := s.Err(); err != nil {
			return err
		}
	}
	return nil
}

// fetch is the fetching stage: it runs the jobs from jobs, at most
// Concurrency at once, and sends their records to records (dropping them
// once stages has ended: nothing writes them any more). Only a worker that
// is free takes a job, and none is taken once admit has ended; fetch
// returns when every worker has. Workers are started as they are needed:
// one more whenever every worker is busy, up to Concurrency, so that
// nothing is allocated per unit of Concurrency and a steady run starts no
// goroutine per job.
func (e *Engine) fetch(admit, work, stages context.Context, jobs *jobQueue, records chan<- *results.Record, coll *collector) {
	var (
		workers errgroup.Group
		idle    atomic.Int64             // workers waiting for a job
		busy    = make(chan struct{}, 1) // a worker took a job and none is left waiting
		ended   = make(chan struct{})    // no job will come: jobs is closed or admit ended
		endOnce sync.Once
	)
	worker := func() error { // counted idle when started
		tr := newTracker(&e.cfg, work) // for every attempt of this worker's
		defer tr.close()
		defer e.workers.add(tr)()
		for {
			j, ok := jobs.take(admit)
			if idle.Add(-1) == 0 && ok {
				select {
				case busy <- struct{}{}:
				default: // the spawner has not seen the last one yet
				}
			}
			if !ok {
				endOnce.Do(func() { close(ended) })
				return nil
			}
			e.inFlight.Add(1)
			rec := e.runJob(tr.parent, admit, j, tr, coll)
			e.inFlight.Add(-1)
			select {
			case records <- rec:
			case <-stages.Done():
			}
			idle.Add(1)
		}
	}
	defer workers.Wait()
	for started := 0; started < e.cfg.Concurrency; {
		if idle.Load() == 0 {
			idle.Add(1)
			workers.Go(worker)
			started++
		}
		select {
		case <-busy:
		case <-ended:
			return
		}
	}
}

// flushDelay is how long a record may wait in the writer's buffer: output
// is never older than that, and a fast run writes its records in large
// blocks instead of one write for every few records.
const flushDelay = 50 * time.Millisecond

// write is the writing stage: it counts each record from records and
// writes it to w, flushing w within flushDelay of a record, so that output
// is never stale, and once more when records is closed; src is told of
// the records once flushed. It returns w's first error: records can no
// longer be kept, and the run stops.
func (e *Engine) write(w RecordWriter, records <-chan *results.Record, coll *collector, src *written) error {
	flusher, _ := w.(interface{ Flush() error })
	clk := e.clock()
	var due <-chan struct{} // closed when buffered records are to be flushed; nil when none are
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case rec, ok := <-records:
			if !ok {
				if flusher != nil && due != nil {
					if err := flusher.Flush(); err != nil {
						return err
					}
				}
				src.flushed()
				return nil
			}
			coll.record(rec)
			if rec.OK {
				e.ok.Add(1)
			} else {
				e.failed.Add(1)
			}
			e.done.Add(1)
			if err := w.Write(rec); err != nil {
				return err
			}
			src.add(rec)
			if flusher == nil {
				src.flushed()
			} else if due == nil {
				due, timer = clk.after(flushDelay)
			}
		case <-due:
			due, timer = nil, nil
			if err := flusher.Flush(); err != nil {
				return err
			}
			src.flushed()
		}
	}
}
