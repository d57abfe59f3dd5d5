package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// Acquire implements limits.Scheduler. It waits, within ctx, for a lease
// that every limit shared in the namespace allows. While Redis is
// unreachable it keeps waiting (fail closed); if ctx ends then, the error
// wraps both limits.ErrCoordinator and ctx.Err().
func (s *Scheduler) Acquire(ctx context.Context, req limits.Request) (*limits.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-req.Stop:
		return nil, context.Canceled
	default:
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, limits.ErrClosed
	}
	if s.dead != nil {
		s.mu.Unlock()
		return nil, s.dead
	}
	fast := s.nwait == 0 && s.down == nil && !s.now().Before(s.notBefore)
	s.mu.Unlock()
	why := ""
	var lastErr error
	if fast {
		// Not cancelled by ctx: a call cut short may have taken a lease.
		// None waits: charged when it reaches Redis, as in limits.Local.
		r := s.try(req)
		if errors.Is(r.err, limits.ErrHostBanned) {
			return nil, r.err
		}
		if r.lease != nil {
			if ctx.Err() != nil {
				r.lease.Release()
				return nil, ctx.Err()
			}
			return r.lease, nil
		}
		why = r.why
		if unanswered(r.err) {
			lastErr = r.err
		}
	}
	w := &waiter{req: req, ch: make(chan grant, 1), why: why, err: lastErr}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, limits.ErrClosed
	}
	s.waiters = append(s.waiters, w)
	s.nwait++
	if s.hostRated {
		s.hostWait[req.Host]++
	}
	s.mu.Unlock()
	if s.onQueued != nil {
		s.onQueued()
	}
	s.wake()
	var stopped error // context.Canceled when req.Stop ended the wait
	select {
	case g := <-w.ch:
		return g.l, g.err
	case <-req.Stop:
		stopped = context.Canceled
	case <-ctx.Done():
	}
	s.mu.Lock()
	taken := w.done
	if !taken {
		s.unqueue(w)
	}
	why, lastErr = w.why, w.err
	s.mu.Unlock()
	if taken { // a grant raced with the cancellation: give it back
		if g := <-w.ch; g.l != nil {
			g.l.Release()
		}
	}
	if stopped != nil {
		return nil, stopped
	}
	return nil, s.waitErr(ctx, req.Host, why, lastErr)
}

// result is the outcome of one acquire script.
type result struct {
	lease *limits.Lease
	wait  time.Duration // before trying again; -1: until a release
	host  bool          // the host is what is limited: other hosts may go
	why   string        // what it waits for (acquire.lua's word)
	err   error
}

// ask is an acquire that found none of its process waiting, on its way
// to Redis (see try).
type ask struct {
	req limits.Request
	res result
}

// try asks Redis once for req, one of the acquires that find none of the
// process waiting (the fast path): those that come while the call before
// is on its way go in one call (groupCommit), each charged its rate tokens
// when the call reaches Redis.
func (s *Scheduler) try(req limits.Request) result {
	a := &ask{req: req}
	s.asks.send(a, s.callAsks, func(as []*ask, err error) {
		for _, a := range as {
			a.res = result{err: err}
		}
	})
	return a.res
}

// callAsks runs the acquire script once for as, in order. Those behind
// the one told that nothing can start (or that Redis lost its data, or
// that the pool cannot serve) are not tried, and are told the same.
func (s *Scheduler) callAsks(as []*ask) error {
	reqs := make([]limits.Request, len(as))
	for i, a := range as {
		reqs[i] = a.req
	}
	ctx := s.uncancelled() // a call cut short may have taken leases
	c := s.callAcquire(ctx, reqs, nil, 0)
	if c.err != nil {
		for _, a := range as {
			a.res = result{err: c.err}
		}
		return c.err
	}
	var last result
	for i, a := range as {
		if i < len(c.replies) {
			a.res = s.reply(ctx, c, i, a.req, false)
			last = a.res
		} else {
			a.res = result{wait: last.wait, host: last.host, why: last.why, err: last.err}
		}
	}
	return nil
}

// usArg is a time in µs as the scripts take it: "" for none (0).
func usArg(us int64) string {
	if us <= 0 {
		return ""
	}
	return strconv.FormatInt(us, 10)
}

// acquireCall is one run of the acquire script for one or more requests.
type acquireCall struct {
	ids     []string       // the lease ids, one a request
	replies []acquireReply // a reply for each request tried, in order
	sent    time.Time
	err     error
	due     int64   // the logical time sent for the global and proxy rates (µs), 0 for none
	hostDue []int64 // the same for each request's host rate
}

// callAcquire runs the acquire script once for reqs, in order, which it tries
// until one is told that nothing can start; due is the logical time
// (dueUs) to charge their global and proxy rate tokens from when it is a
// little before now, 0 for none, and hostDue[i] the same for the host rate
// of reqs[i] (nil: none for any; see acquire.lua). On an error every id is
// an orphan: the call may have run.
func (s *Scheduler) callAcquire(ctx context.Context, reqs []limits.Request, hostDue []int64, due int64) acquireCall {
	c := acquireCall{ids: make([]string, len(reqs)), due: due, hostDue: hostDue}
	args := make([]any, 0, 2+4*len(reqs))
	args = append(args, strconv.Itoa(len(reqs)), usArg(due))
	for i, req := range reqs {
		var avoid []string
		for _, p := range req.Avoid {
			if p >= 0 && p < len(s.plan.pnames) {
				avoid = append(avoid, s.plan.pnames[p])
			}
		}
		var hd int64
		if i < len(hostDue) {
			hd = hostDue[i]
		}
		c.ids[i] = newID()
		args = append(args, c.ids[i], req.Host, strings.Join(avoid, "\n"), usArg(hd))
	}
	c.sent = s.now()
	run := s.run
	if s.replicas > 0 {
		run = s.runConfirmed
	}
	v, err := run(ctx, s.scripts.acquire, args...)
	if err == nil && (len(v) == 0 || len(v) > len(reqs)) {
		err = fmt.Errorf("limits/redis: %d replies to %d requests", len(v), len(reqs))
	}
	if err != nil {
		for _, id := range c.ids {
			s.orphan(releaseItem{id: id})
		}
		c.err = err
		return c
	}
	for _, r := range v {
		rv, ok := r.([]any)
		if !ok {
			rv = []any{r}
		}
		c.replies = append(c.replies, decodeAcquire(rv))
	}
	return c
}

// reply reads the i-th reply of c, for req; queued says whether req is a
// waiter of the local queue. Call it for a call's replies in order, each
// before the grant of the one before is handed over.
func (s *Scheduler) reply(ctx context.Context, c acquireCall, i int, req limits.Request, queued bool) result {
	r, id, sent := c.replies[i], c.ids[i], c.sent
	switch r.kind {
	case "":
		return result{err: r.err}
	case "reset":
		if err := s.setup(ctx, true, s.opTimeout); err != nil {
			return result{err: err}
		}
		s.mu.Lock()
		clear(s.hostNext) // of tokens Redis no longer has
		s.mu.Unlock()
		return result{wait: 0}
	case "wait":
		d := time.Duration(-1)
		s.mu.Lock()
		if r.waitUs >= 0 {
			d = time.Duration(r.waitUs) * time.Microsecond
			if !r.hostOnly {
				s.notBefore = sent.Add(d)
			}
			if r.hard {
				s.rateAt = sent.Add(d)
			}
			// The reply to an Acquire that found none waiting does not
			// set the queue's time, or its host's, when waiters that came
			// meanwhile have one: theirs is the dispatcher's, taken in
			// from calls that may have run after this one.
			_, hostTimed := s.hostNext[req.Host]
			switch {
			case r.now <= 0:
			case !r.hostOnly:
				if queued || s.nwait == 0 || s.dueUs == 0 {
					s.dueUs = r.now + r.waitUs
				}
			case !s.hostRated:
			case queued && s.hostWait[req.Host] > 0, !queued && (s.hostWait[req.Host] == 0 || !hostTimed):
				s.hostNext[req.Host] = hostTime{us: r.now + r.waitUs, at: sent.Add(d)}
			}
		}
		s.mu.Unlock()
		if s.onWait != nil {
			s.onWait(waitTrace{sent: sent, ran: r.now, waitUs: r.waitUs, hard: r.hard, hostOnly: r.hostOnly})
		}
		return result{wait: d, host: r.hostOnly, why: r.why}
	case "banned":
		return result{err: &limits.HostBannedError{Host: req.Host, Proxies: r.bannedBy}}
	case "dead":
		return result{err: &limits.PoolError{Total: r.total, Rejected: r.rejected, Benched: r.total - r.rejected,
			For: time.Duration(r.deadFor) * time.Microsecond}}
	}
	h := &held{id: id, proxy: r.proxy, budget: r.budget, host: req.Host, epoch: r.epoch,
		lastOK: sent, lost: make(chan struct{})}
	pi, bi := s.plan.proxies[h.proxy], s.plan.budgets[h.budget]
	var l *limits.Lease
	l = limits.NewLease(pi, bi, func(o limits.Outcome) { s.release(h, o, l.RetryAfter) })
	l.ProxyInFlight, l.HostInFlight = r.proxyInFlight, r.hostInFlight
	l.Lost = h.lost
	s.mu.Lock()
	s.held[id] = h
	s.epoch = h.epoch
	if r.probe {
		s.event(pi, "probing", 0)
	}
	// The schedule goes on only while others wait (see dueUs).
	if queued {
		s.dueUs = 0
		if r.next > 0 && s.nwait > 1 {
			s.dueUs = r.next
		}
		// Without a host rate there is no next: the host's next ask is
		// charged when it arrives.
		delete(s.hostNext, req.Host)
		if r.hostNext > 0 && s.hostWait[req.Host] > 1 {
			s.hostNext[req.Host] = hostTime{us: r.hostNext, at: sent.Add(time.Duration(r.hostNext-r.now) * time.Microsecond)}
		}
	}
	if r.global > r.now {
		s.rateAt = sent.Add(time.Duration(r.global-r.now) * time.Microsecond)
		if s.notBefore.Before(s.rateAt) {
			s.notBefore = s.rateAt
		}
	}
	s.mu.Unlock()
	if s.onGrant != nil {
		g := grantTrace{proxy: pi, host: req.Host, sent: c.sent, ran: r.now, charged: r.charged,
			due: c.due, global: r.global, queued: queued}
		if g.charged == 0 {
			g.charged = r.now // no rate charged: the time it ran
		}
		if i < len(c.hostDue) {
			g.hostDue = c.hostDue[i]
		}
		s.onGrant(g)
	}
	return result{lease: l}
}
