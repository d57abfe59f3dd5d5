package limits

import "time"

// Drain tells the scheduler that no request will come but those already
// waiting or in flight: the input has run out. From then on a waiting
// request is held back from a slow proxy that could start it now when the
// faster proxies, at the pace they have shown, would finish it and every
// request ahead of it sooner than the slow one would. Without this the last
// requests of a run go to whichever proxy is free, and the slowest proxy's
// latency is added to the end of the run.
func (s *Local) Drain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.draining {
		s.draining = true
		s.reindex() // fastest first from now on
	}
	s.dispatch()
}

// holdBack reports whether proxy i should not take a request with ahead
// requests before it, because the proxies faster than i would finish it
// sooner: the requests ahead of it and it, at the rate the faster proxies
// carry together (each its share of its budget's nominal capacity over its
// estimated time per attempt), plus the fastest one's time, come to less
// than i's own time. The faster proxies' rate is kept incrementally (see
// holdTree), so this costs O(log) of the number of pace buckets, not a scan
// of the pool. Call with s.mu held.
func (s *Local) holdBack(i, ahead int, now time.Time) bool {
	est := s.proxies[i].est
	if est <= 0 {
		return false
	}
	b := holdBucket(est)
	rate, n := s.hold.below(b)
	if n == 0 || rate <= 0 {
		return false
	}
	fastest := min(holdFloor(s.hold.first()), est)
	wait := float64(ahead+1)/rate + fastest.Seconds()
	return wait < est.Seconds()
}
