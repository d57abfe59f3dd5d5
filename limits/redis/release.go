package redis

import (
	"strconv"
	"time"

	"github.com/fetch-dev/fetch/limits"
)

// releaseItem is a lease to give back: its id, its proxy's and budget's
// names and its host ("" when not known: the script then reads them), its
// outcome and its Retry-After (0 none).
type releaseItem struct {
	id, proxy, budget, host string
	o                       limits.Outcome
	ra                      time.Duration
}

// releaseMax is the most releases one call carries.
const releaseMax = 64

// releaseNow gives it back to Redis by group commit (see groupCommit) and
// returns once its call has returned. The leases of a call that failed,
// and of the calls skipped behind it, are orphans, released in the
// background when Redis answers again (a release waits for at most the
// call in flight, as it did alone).
func (s *Scheduler) releaseNow(it releaseItem) {
	s.releases.send(it, s.callRelease, func(items []releaseItem, _ error) {
		for _, it := range items {
			s.orphan(it)
		}
	})
}

// callRelease runs the release script for items: each lease's counts are
// given back, and a health change it brings is noted. A lease of a call
// that failed is an orphan, released again in the background (with its
// outcome, from when it first became one); the error is the call's.
func (s *Scheduler) callRelease(items []releaseItem) error {
	args := make([]any, 0, 6*len(items))
	for _, it := range items {
		args = append(args, it.id, strconv.Itoa(int(it.o)), strconv.FormatInt(it.ra.Microseconds(), 10))
		if it.proxy != "" && it.budget != "" && it.host != "" {
			args = append(args, it.proxy, it.budget, it.host)
		} else {
			args = append(args, "", "", "")
		}
	}
	v, err := s.run(s.uncancelled(), s.scripts.release, args...)
	if err != nil {
		for _, it := range items {
			s.orphan(it)
		}
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, it := range items {
		if r := decodeRelease(v, i); r.state != "" && it.proxy != "" {
			s.event(s.plan.proxies[it.proxy], r.state, r.cooldown)
		}
	}
	return nil
}
