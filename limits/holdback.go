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
	s.draining = true
	s.dispatch()
}

// holdBack reports whether proxy i should not take a request with ahead
// requests before it, because the proxies faster than i would finish it
// sooner. Call with s.mu held.
func (s *Local) holdBack(i, ahead int, now time.Time) bool {
	est := s.proxies[i].est
	if est <= 0 {
		return false
	}
	var rate float64 // requests per second the faster proxies carry
	fastest := est
	for q := range s.proxies {
		qs := &s.proxies[q]
		if q == i || qs.est <= 0 || qs.est >= est || qs.probing || qs.rejected || qs.benchedUntil.After(now) {
			continue
		}
		c := s.budgets[qs.budget].nominal()
		rate += float64(c) / float64(s.members[qs.budget]) / qs.est.Seconds()
		fastest = min(fastest, qs.est)
	}
	if rate == 0 {
		return false
	}
	wait := float64(ahead+1)/rate + fastest.Seconds()
	return wait < est.Seconds()
}
