package limits

import "time"

// Pushback configures the slowing of a proxy-host pair after the target
// answers 429 or 503 through it, or bans it (the PushedBack and Banned
// outcomes, which count alike), in the spirit of
// Scrapy's AutoThrottle and of TCP's congestion window. It has two steps.
// First it narrows the window: the first pushback caps the pair's attempts
// in flight at half of what the proxy had in flight, and each further one
// halves that window again. Then, once the window is down to one, it spaces
// starts: the pair's attempts start Delay apart, doubling with each further
// pushback up to Max. Each success of an attempt begun after the last
// pushback undoes one step: it halves the spacing (gone below Delay/4), then
// widens the window by one; a window as wide as the proxy's attempts in
// flight at the first pushback means the pair is back to full speed. Other
// proxies and other hosts are not affected. The zero value never slows.
//
// RetryAfterMax is about the host as a whole, whatever Delay: when a host
// answers 429 or 503 with a Retry-After (Lease.RetryAfter) through two or
// more distinct proxies within RetryAfterWindow, every proxy's attempts to
// that host wait until the time the latest answer gave, at most
// RetryAfterMax after it; 0 never makes a host wait as a whole.
type Pushback struct {
	Delay         time.Duration // the first spacing of starts; 0: never slow down
	Max           time.Duration // the widest spacing
	RetryAfterMax time.Duration // the longest a host waits as a whole for a Retry-After; 0: never
}

// pairKey names a proxy-host pair slowed by pushback.
type pairKey struct {
	proxy int
	host  string
}

type pairState struct {
	window   int           // attempts in flight allowed; at least 1
	full     int           // the proxy's attempts in flight when first pushed back: the window to get back to
	inFlight int           // attempts in flight granted since the pair was slowed
	spacing  time.Duration // between attempt starts, once window is 1
	next     time.Time     // earliest next start
	pushedAt time.Time     // the last pushback that counted
}

// learnPushback updates the pushback of the pair of proxy p and host from
// the outcome of an attempt granted at granted. Only attempts begun after the
// pair's last pushback count: those in flight at a pushback would otherwise
// each deepen it or, succeeding, undo it. Call with s.mu held.
func (s *Local) learnPushback(p int, host string, o Outcome, now, granted time.Time) {
	if s.pushback.Delay <= 0 {
		return
	}
	k := pairKey{p, host}
	pr := s.pairs[k]
	fresh := pr == nil || granted.After(pr.pushedAt)
	switch {
	case (o == PushedBack || o == Banned) && fresh:
		if pr == nil {
			// The proxy's attempts in flight, this one included, stand in
			// for the pair's: the window starts at half of them.
			inFlight := int(s.proxies[p].inFlight)
			pr = &pairState{window: max(inFlight/2, 1), full: max(inFlight, 2)}
			s.pairs[k] = pr
		} else if pr.window > 1 {
			pr.window = max(pr.window/2, 1)
		} else {
			pr.spacing = max(pr.spacing*2, s.pushback.Delay)
			if s.pushback.Max > 0 {
				pr.spacing = min(pr.spacing, s.pushback.Max)
			}
		}
		pr.pushedAt = now
		pr.next = now.Add(pr.spacing)
	case o == Success && pr != nil && fresh:
		if pr.spacing > 0 {
			if pr.spacing /= 2; pr.spacing < s.pushback.Delay/4 {
				pr.spacing = 0
			}
			break
		}
		if pr.window++; pr.window >= pr.full {
			delete(s.pairs, k)
		}
	}
}

// sweepPairs forgets the proxy-host pairs left alone for longer than the
// widest pushback. Call with s.mu held.
func (s *Local) sweepPairs(now time.Time) {
	forget := max(s.pushback.Max, s.pushback.Delay)
	for k, pr := range s.pairs {
		if pr.inFlight <= 0 && now.Sub(pr.next) > forget {
			delete(s.pairs, k)
		}
	}
}
