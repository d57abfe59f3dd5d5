package limits

import (
	"errors"
	"fmt"
	"time"
)

// ErrHostBanned is wrapped by the error of Acquire for a host that has
// banned every proxy that could serve it (see HostBannedError).
var ErrHostBanned = errors.New("host banned every proxy")

// HostBannedError is the error of Acquire for a request whose host has
// banned every proxy that could serve it: every proxy not rejected has had
// a Banned outcome from the host with no Success since of an attempt
// through it to the host begun after the ban. From then
// on, for the rest of the run, the host's waiting requests and every later
// Acquire for it fail at once with it; other hosts go on.
type HostBannedError struct {
	Host    string
	Proxies int // how many proxies it banned: every one that could serve it
}

func (e *HostBannedError) Error() string {
	return fmt.Sprintf("%s banned every proxy that could serve it (%d)", e.Host, e.Proxies)
}

func (e *HostBannedError) Unwrap() error { return ErrHostBanned }

// RetryAfterWindow is how close together Retry-After answers from one host
// through distinct proxies must come for the host to wait as a whole: two
// or more within it hold every proxy's attempts to that host until the
// time the latest gave (at most Pushback.RetryAfterMax).
const RetryAfterWindow = time.Minute

// maxBannedHosts bounds the hosts whose bans Local keeps (see hostBans):
// when that many are kept, one is forgotten to make room, as hostdown does
// in package fetch.
const maxBannedHosts = 1 << 16

// raNote is a Retry-After a host gave through a proxy.
type raNote struct {
	proxy int32
	at    time.Time
	until time.Time
}

// learnHost updates what the scheduler keeps of host as a whole from the
// outcome of an attempt through proxy p granted at granted: the proxies it
// has banned with no success since (a host that has banned every proxy not
// rejected fails its requests from then on), and its Retry-After answers
// (two or more through distinct proxies within RetryAfterWindow make the
// host wait). Only a success of an attempt begun after a proxy's ban lifts
// it, as only such outcomes undo pushback. ra is the attempt's
// Retry-After, 0 for none. Call with s.mu held.
func (s *Local) learnHost(p int, host string, o Outcome, now, granted time.Time, ra time.Duration) {
	switch o {
	case Banned:
		by := s.hostBans[host]
		if by == nil {
			if len(s.hostBans) >= maxBannedHosts {
				for h := range s.hostBans {
					delete(s.hostBans, h)
					break
				}
			}
			by = map[int32]time.Time{}
			s.hostBans[host] = by
		}
		by[int32(p)] = now
		s.checkBanned(host, by)
	case Success:
		if len(s.hostBans) > 0 {
			if at, ok := s.hostBans[host][int32(p)]; ok && !granted.Before(at) {
				by := s.hostBans[host]
				delete(by, int32(p))
				if len(by) == 0 {
					delete(s.hostBans, host)
				}
			}
		}
	case PushedBack:
		if ra > 0 && s.pushback.RetryAfterMax > 0 {
			s.noteRetryAfter(int32(p), host, now, ra)
		}
	}
}

// usable is how many proxies could serve a host: those not rejected,
// benched ones included (they come back). Call with s.mu held.
func (s *Local) usable() int { return len(s.proxies) - s.rejectedN }

// checkBanned fails host for the rest of the run when by, the proxies it
// has banned with no success since, is every proxy that could serve it:
// its waiting requests get a *HostBannedError now, later ones at once.
// Call with s.mu held.
func (s *Local) checkBanned(host string, by map[int32]time.Time) {
	n := 0
	for p := range by {
		if !s.proxies[p].rejected {
			n++
		}
	}
	if n < s.usable() || n == 0 {
		return
	}
	delete(s.hostBans, host)
	s.hostDead[host] = n
	for w := s.waiters.head; w != nil; {
		next := w.next
		if w.req.Host == host {
			s.waiters.remove(w)
			w.err = &HostBannedError{Host: host, Proxies: n}
			w.ch <- nil
		}
		w = next
	}
}

// recheckBans looks again at every host with bans once a proxy has left the
// run: the proxies that could serve them are fewer. Call with s.mu held.
func (s *Local) recheckBans() {
	for host, by := range s.hostBans {
		s.checkBanned(host, by)
	}
}

// hostBanned returns the error for a request to host when it has banned
// every proxy, else nil. Call with s.mu held.
func (s *Local) hostBanned(host string) error {
	if len(s.hostDead) == 0 {
		return nil
	}
	if n, ok := s.hostDead[host]; ok {
		return &HostBannedError{Host: host, Proxies: n}
	}
	return nil
}

// noteRetryAfter notes that host answered through proxy p with a
// Retry-After of ra; when two or more proxies were told so within
// RetryAfterWindow, the host waits as a whole until the latest one's time,
// at most Pushback.RetryAfterMax from now. Call with s.mu held.
func (s *Local) noteRetryAfter(p int32, host string, now time.Time, ra time.Duration) {
	until := now.Add(min(ra, s.pushback.RetryAfterMax))
	notes := s.raNotes[host][:0]
	for _, n := range s.raNotes[host] { // the recent ones of other proxies
		if n.proxy != p && now.Sub(n.at) < RetryAfterWindow {
			notes = append(notes, n)
		}
	}
	notes = append(notes, raNote{proxy: p, at: now, until: until})
	s.raNotes[host] = notes
	if len(notes) < 2 {
		return
	}
	if u, ok := s.hostUntil[host]; !ok || until.After(u) {
		s.hostUntil[host] = until
	}
}

// hostWait returns how long host must wait for its Retry-After, 0 when it
// need not. Call with s.mu held.
func (s *Local) hostWait(host string, now time.Time) time.Duration {
	if len(s.hostUntil) == 0 {
		return 0
	}
	u, ok := s.hostUntil[host]
	if !ok {
		return 0
	}
	if !u.After(now) {
		delete(s.hostUntil, host)
		return 0
	}
	return u.Sub(now)
}

// sweepHosts forgets Retry-After answers older than the window and host
// waits that are over. Call with s.mu held.
func (s *Local) sweepHostWaits(now time.Time) {
	for host, notes := range s.raNotes {
		if now.Sub(notes[len(notes)-1].at) >= RetryAfterWindow {
			delete(s.raNotes, host)
		}
	}
	for host, u := range s.hostUntil {
		if !u.After(now) {
			delete(s.hostUntil, host)
		}
	}
}

// pickWhy counts what a pick set aside, to tell a request that waited out
// its deadline what it waited for.
type pickWhy struct {
	paced, banned int // proxies set aside by their pair's pushback; of them, those the host banned
}

// waitCause says what a request for req waits for now, in the words of
// WaitError.Waiting. Call with s.mu held.
func (s *Local) waitCause(req Request, now time.Time) string {
	if d := s.hostWait(req.Host, now); d > 0 {
		return fmt.Sprintf("a Retry-After from %s held every proxy (%s more)", req.Host, d.Round(time.Millisecond))
	}
	h := s.hosts[req.Host]
	if h != nil && s.host.Concurrency > 0 && h.inFlight >= s.host.Concurrency {
		return fmt.Sprintf("the host's concurrency (%d in flight to %s)", h.inFlight, req.Host)
	}
	if h != nil && h.limiter.WaitAt(now) > 0 {
		return "the host's rate (" + req.Host + ")"
	}
	if s.global.WaitAt(now) > 0 {
		return "the global rate"
	}
	if s.healthyN == 0 && len(s.proxies) > 0 {
		return "a usable proxy: " + s.poolState(now).state()
	}
	if s.roomy == 0 {
		return "a proxy's or pool's concurrency (every one full)"
	}
	why := &pickWhy{}
	s.why = why
	p, wait := s.pick(req, now, 0)
	s.why = nil
	switch {
	case why.banned > 0 && why.banned == why.paced:
		return fmt.Sprintf("bans by %s (%d of %d proxies banned it and are slowed)", req.Host, why.banned, s.usable())
	case why.paced > 0:
		return fmt.Sprintf("pushback from %s (%d proxies slowed, %d of them banned)", req.Host, why.paced, why.banned)
	case p < 0 && wait > 0:
		return "a proxy's or pool's rate"
	case p < 0:
		return "a proxy's or pool's concurrency"
	}
	return "its turn behind other requests"
}

// notePaced counts proxy i, set aside by its pair's pushback, in the pick's
// pickWhy, when one is asked for. Call with s.mu held.
func (s *Local) notePaced(i int, host string) {
	if s.why == nil {
		return
	}
	s.why.paced++
	if _, ok := s.hostBans[host][int32(i)]; ok {
		s.why.banned++
	}
}
