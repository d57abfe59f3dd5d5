package redis

import (
	"strconv"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// held is a lease this process holds.
type held struct {
	id, proxy, budget, host string
	epoch                   string    // the epoch it was taken or last renewed in
	lastOK                  time.Time // client clock: when its last successful acquire or renewal was sent
	lost                    chan struct{}
	gone                    bool // lost or finished; under Scheduler.mu
}

// orphan is a lease released in the background (releaseOrphans) until
// that succeeds or it has expired anyway: one whose acquire or release
// failed and may or may not have run, or that was lost. A failed release
// keeps its outcome, so that Redis still learns it.
type orphan struct {
	at    time.Time // since when
	proxy string    // "" when not known (an acquire that failed)
	o     limits.Outcome
}

// orphan remembers it as an orphan, from now unless it is one already.
func (s *Scheduler) orphan(it releaseItem) {
	s.mu.Lock()
	if _, ok := s.orphans[it.id]; !ok {
		s.orphans[it.id] = orphan{at: s.now(), proxy: it.proxy, o: it.o}
	}
	s.mu.Unlock()
}

// release gives lease h back with outcome o and its Retry-After ra.
func (s *Scheduler) release(h *held, o limits.Outcome, ra time.Duration) {
	s.renewMu.RLock() // a renewal batch that includes h has finished
	s.mu.Lock()
	gone := h.gone
	h.gone = true
	delete(s.held, h.id)
	s.mu.Unlock()
	s.renewMu.RUnlock()
	if gone { // lost: Redis has dropped it already, or will at its expiry
		s.wake()
		return
	}
	s.releaseNow(releaseItem{id: h.id, proxy: h.proxy, budget: h.budget, host: h.host, o: o, ra: ra})
	s.wake()
}

// lose marks h lost: the attempt holding it is to be cancelled. Call with
// s.mu held.
func (s *Scheduler) lose(h *held) {
	if h.gone {
		return
	}
	h.gone = true
	delete(s.held, h.id)
	close(h.lost)
	s.orphans[h.id] = orphan{at: s.now(), proxy: h.proxy}
}

// heartbeat renews the held leases every TTL/3, more often while renewals
// fail, and releases orphans.
func (s *Scheduler) heartbeat() {
	defer s.wg.Done()
	t := time.NewTimer(s.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.expire()
		next := s.ttl / 3
		if !s.renewAll() {
			next = s.ttl/16 + time.Duration(s.rand()%uint64(s.ttl/16))
			if d := s.untilExpiry(); d < next {
				next = max(d, time.Millisecond) // lose them on time even if Redis stays away
			}
		}
		s.releaseOrphans()
		t.Reset(next)
	}
}

const renewBatch = 200

// renewAll renews every held lease and reports whether Redis answered.
// Leases Redis says are lost, and leases whose renewal keeps failing until
// their last successful one is almost TTL old, are lost: their Lost
// channel is closed.
func (s *Scheduler) renewAll() bool {
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	s.mu.Lock()
	hs := make([]*held, 0, len(s.held))
	for _, h := range s.held {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	ok := true
	for first := true; first || len(hs) > 0; first = false { // once with none: the process's presence
		n := min(renewBatch, len(hs))
		if !s.renew(hs[:n]) {
			ok = false
		}
		hs = hs[n:]
	}
	return ok
}

func (s *Scheduler) renew(hs []*held) bool {
	for range 2 { // a second time after a reset
		args := []any{s.id, strconv.Itoa(len(hs))}
		s.mu.Lock()
		for _, h := range hs {
			args = append(args, h.id, h.epoch, h.proxy, h.budget, h.host)
		}
		s.mu.Unlock()
		sent := s.now()
		v, err := s.run(s.base, s.scripts.renew, args...)
		if err != nil {
			s.expire()
			return false
		}
		r := decodeRenew(v, len(hs))
		if r.reset {
			if s.setup(s.base, true, s.opTimeout) != nil {
				return false
			}
			continue
		}
		s.mu.Lock()
		for i, h := range hs {
			if r.held[i] {
				h.lastOK, h.epoch = sent, r.epoch
			} else {
				s.lose(h)
			}
		}
		s.mu.Unlock()
		return true
	}
	return false
}

// lostAfter is how long after its last successful renewal was sent a
// lease counts as lost when renewals fail: Redis set its expiry TTL after
// it received that renewal, so this errs on the early side, and the margin
// covers a renewal's timeout.
func (s *Scheduler) lostAfter() time.Duration { return s.ttl - s.ttl/4 }

// expire loses the leases whose renewals have failed for too long.
func (s *Scheduler) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, h := range s.held {
		if now.Sub(h.lastOK) >= s.lostAfter() {
			s.lose(h)
		}
	}
}

// untilExpiry is how long until expire would lose the first held lease.
func (s *Scheduler) untilExpiry() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	d := time.Duration(1<<63 - 1)
	for _, h := range s.held {
		d = min(d, s.lostAfter()-now.Sub(h.lastOK))
	}
	return d
}

func (s *Scheduler) releaseOrphans() {
	s.mu.Lock()
	items := make([]releaseItem, 0, len(s.orphans))
	for id, or := range s.orphans {
		if s.now().Sub(or.at) > 2*s.ttl { // expired long since: acquires sweep it
			delete(s.orphans, id)
			continue
		}
		items = append(items, releaseItem{id: id, proxy: or.proxy, o: or.o})
	}
	s.mu.Unlock()
	for len(items) > 0 {
		n := min(len(items), releaseMax)
		if s.callRelease(items[:n]) != nil {
			return
		}
		s.mu.Lock()
		for _, it := range items[:n] {
			delete(s.orphans, it.id)
		}
		s.mu.Unlock()
		items = items[n:]
	}
}
