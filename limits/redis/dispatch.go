package redis

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// hostTime is when a host's next rate token comes due: us on the Redis
// clock, at on the client's.
type hostTime struct {
	us int64
	at time.Time
}

type waiter struct {
	req  limits.Request
	ch   chan grant // buffered 1
	done bool       // granted, failed or cancelled; under Scheduler.mu
	why  string     // what Redis last told it it waits for; under Scheduler.mu
	// err: the last call made for it failed, and no later one answered; under Scheduler.mu.
	err error // its wait's error names it, whatever another call (a give-back) did since
}

type grant struct {
	l   *limits.Lease
	err error
}

// dispatcher serves the local queue of waiters.
func (s *Scheduler) dispatcher() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	backoff := time.Duration(0)
	for {
		wait, failed := s.pass()
		if failed {
			backoff = min(max(backoff*2, 20*time.Millisecond), 2*time.Second)
			wait = backoff/2 + time.Duration(s.rand()%uint64(backoff))
		} else {
			backoff = 0
		}
		if wait != 0 {
			if !failed && (wait < 0 || wait > s.poll) {
				wait = pollWait(wait, s.poll, s.rand())
			}
			t.Reset(wait)
			select {
			case <-s.stop:
				return
			case <-s.kick:
			case <-t.C:
			}
			t.Stop()
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// pollWait is how long the dispatcher sleeps when a pass says that the
// next is due in wait (-1: only on a wake-up) and wait is longer than a
// poll: a poll drawn by r within [poll/2, 3poll/2), so that it asks again
// for other processes' releases in case their pub/sub message is missed,
// but never past wait, when a rate's token comes due.
func pollWait(wait, poll time.Duration, r uint64) time.Duration {
	p := poll/2 + time.Duration(r%uint64(poll))
	if wait >= 0 && wait < p {
		return wait
	}
	return p
}

// batchMax is how many waiters one acquire call tries at most: enough
// that one round trip starts what a release or a rate's tokens allow, few
// enough that the script holds Redis briefly.
const batchMax = 16

// late is acquire.lua's LATE: an ask at most this late is charged on its
// schedule, so one call may start that much of a rate's tokens.
const late = 10 * time.Millisecond

// hostBatch is how many waiters of one host one acquire call asks for at
// most under cfg's host limits: one more than may start at most (the host
// rate's burst and the tokens of a late ask, or the host concurrency cap),
// so that the call also tells the host to wait, and at most batchMax;
// batchMax without host limits.
func hostBatch(cfg limits.Config) int {
	n := batchMax
	if h := cfg.Host; !h.Rate.IsZero() {
		n = max(h.Burst, 1) + int(math.Ceil(float64(late)*h.Rate.N/float64(h.Rate.Per)))
	}
	if c := cfg.Host.Concurrency; c > 0 {
		n = min(n, c)
	}
	return min(n+1, batchMax)
}

// pass tries the waiters in order once, batchMax to an acquire call. It
// returns how long until the next pass is due (0: at once, -1: on a
// wake-up or poll), and whether Redis failed.
func (s *Scheduler) pass() (time.Duration, bool) {
	s.mu.Lock()
	live := s.waiters[:0]
	for _, w := range s.waiters {
		if !w.done {
			live = append(live, w)
		}
	}
	clear(s.waiters[len(live):])
	s.waiters = live
	ws := append([]*waiter(nil), live...)
	s.mu.Unlock()
	if len(ws) == 0 {
		return -1, false
	}
	if d := s.untilRate(); d > 0 {
		return d, false
	}
	// wakeAt: when the next pass is due, the soonest of the waits told,
	// each from when it was told (a pass makes calls one after another);
	// zero for none.
	var wakeAt time.Time
	soonAt := func(t time.Time) {
		if wakeAt.IsZero() || t.Before(wakeAt) {
			wakeAt = t
		}
	}
	soon := func(d time.Duration) {
		if d >= 0 {
			soonAt(s.now().Add(d))
		}
	}
	next := func() time.Duration {
		if wakeAt.IsZero() {
			return -1
		}
		return max(wakeAt.Sub(s.now()), 0)
	}
	all := ws
	failed := func(err error) (time.Duration, bool) {
		if errors.Is(err, ErrConflict) || errors.Is(err, limits.ErrNoUsableProxy) {
			// the namespace was taken over with other limits, or every proxy is out: nothing will pass
			s.fail(all, err)
		} else if dead := s.gone(); dead != nil {
			s.fail(all, dead) // Redis gone for the pool wait: the run stops
		}
		return 0, true
	}
	var blocked map[string]bool
	batch := make([]*waiter, 0, batchMax)
	reqs := make([]limits.Request, 0, batchMax)
	hostDue := make([]int64, 0, batchMax)
	// With host limits, a round asks for at most s.hostBatch waiters of a
	// host, and those behind them (later) in a round after: a host whose
	// limits let few start must not fill calls with waiters that would be
	// told to wait while other hosts' waiters wait behind them.
	var asked map[string]int
	if s.hostBatch < batchMax {
		asked = map[string]int{}
	}
	var later []*waiter
	for len(ws) > 0 || len(later) > 0 {
		if len(ws) == 0 { // a round is over: those held back, of hosts all of whose asks passed
			ws, later = later, nil
			clear(asked)
		}
		// The next waiters not done, whose hosts were not told to wait
		// and whose hosts' rate tokens have come due.
		batch, reqs, hostDue = batch[:0], reqs[:0], hostDue[:0]
		s.mu.Lock()
		now := s.now()
		for len(ws) > 0 && len(batch) < batchMax {
			w := ws[0]
			ws = ws[1:]
			if w.done || blocked[w.req.Host] {
				continue
			}
			hn := s.hostNext[w.req.Host]
			if hn.at.After(now) {
				soonAt(hn.at)
				continue
			}
			if asked != nil {
				if asked[w.req.Host] >= s.hostBatch {
					later = append(later, w)
					continue
				}
				asked[w.req.Host]++
			}
			hostDue = append(hostDue, hn.us)
			batch = append(batch, w)
			reqs = append(reqs, w.req)
		}
		due := s.dueUs
		s.mu.Unlock()
		if len(batch) == 0 {
			continue
		}
		c := s.callAcquire(s.base, reqs, hostDue, due)
		if c.err != nil {
			s.noteCall(batch, c.err)
			return failed(c.err)
		}
		for i, w := range batch[:len(c.replies)] {
			r := s.reply(s.base, c, i, w.req, true)
			switch {
			case errors.Is(r.err, limits.ErrHostBanned): // this host only: the others go on
				s.mu.Lock()
				if !w.done {
					s.unqueue(w)
					w.ch <- grant{err: r.err}
				}
				s.mu.Unlock()
			case r.err != nil:
				s.noteCall(batch[i:], r.err)
				return failed(r.err)
			case r.lease != nil:
				s.mu.Lock()
				if w.done {
					s.mu.Unlock()
					r.lease.Release()
					continue
				}
				s.unqueue(w)
				w.ch <- grant{l: r.lease}
				s.mu.Unlock()
			case r.host:
				s.mu.Lock()
				w.why, w.err = r.why, nil
				s.mu.Unlock()
				if blocked == nil {
					blocked = map[string]bool{}
				}
				blocked[w.req.Host] = true
				soon(r.wait)
			default:
				s.mu.Lock()
				for _, w := range batch[i:] { // those behind are told the same
					w.why, w.err = r.why, nil
				}
				s.mu.Unlock()
				soon(r.wait)
				return next(), false // nothing can start: those behind would be told the same
			}
		}
		if d := s.untilRate(); d > 0 { // a grant's reply told of the global rate's next token
			soon(d)
			return next(), false
		}
	}
	return next(), false
}

// unqueue marks w done: granted, failed or cancelled. A host's schedule
// ends with its last waiter. Call with s.mu held.
func (s *Scheduler) unqueue(w *waiter) {
	w.done = true
	s.nwait--
	if !s.hostRated {
		return
	}
	h := w.req.Host
	if n := s.hostWait[h] - 1; n > 0 {
		s.hostWait[h] = n
		return
	}
	delete(s.hostWait, h)
	delete(s.hostNext, h)
}

// untilRate returns how long until rateAt: before it, no ask can pass.
func (s *Scheduler) untilRate() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rateAt.Sub(s.now())
}

// fail ends waiters with err.
func (s *Scheduler) fail(ws []*waiter, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !errors.Is(err, limits.ErrNoUsableProxy) && !errors.Is(err, limits.ErrCoordinator) {
		err = fmt.Errorf("%w: %w", limits.ErrCoordinator, err)
	}
	for _, w := range ws {
		if !w.done {
			s.unqueue(w)
			w.ch <- grant{err: err}
		}
	}
}

// listen wakes the dispatcher on other processes' releases.
func (s *Scheduler) listen() {
	defer s.wg.Done()
	ch := s.ps.Channel()
	for {
		select {
		case <-s.stop:
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			s.mu.Lock()
			n := s.nwait
			s.mu.Unlock()
			if n > 0 {
				s.wake()
			}
		}
	}
}
