package fetch

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
)

// maxFailingHosts bounds the hosts hostFailures keeps: only hosts whose
// count is not zero are kept, and when that many are, one is forgotten
// (it starts again from zero) to make room for another.
const maxFailingHosts = 1 << 16

// hostFailures counts, per target host, the attempts in a row that failed
// before any response, for --host-max-failures. A host whose count reaches
// max is down: its other URLs are skipped. Any response forgets the host.
// The zero max never counts. It is safe for concurrent use.
type hostFailures struct {
	max     int
	mu      sync.Mutex
	n       map[string]int // hosts with a count above zero
	failing atomic.Int32   // len(n): while no host fails, nothing takes the lock
}

func newHostFailures(max int) *hostFailures {
	return &hostFailures{max: max, n: map[string]int{}}
}

// down reports whether host is down, and its count.
func (h *hostFailures) down(host string) (int, bool) {
	if h.max <= 0 || h.failing.Load() == 0 {
		return 0, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n[host]
	return n, n >= h.max
}

// failed counts an attempt to host that failed before any response.
func (h *hostFailures) failed(host string) {
	if h.max <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.n[host]; !ok && len(h.n) >= maxFailingHosts {
		h.evict()
	}
	h.n[host]++
	h.failing.Store(int32(len(h.n)))
}

// evict forgets one host, one that is not down if it finds one soon.
// Call with h.mu held.
func (h *hostFailures) evict() {
	tries := 0
	for host, n := range h.n {
		if n < h.max || tries >= 16 {
			delete(h.n, host)
			return
		}
		tries++
	}
}

// answered notes that host answered: its count starts over.
func (h *hostFailures) answered(host string) {
	if h.max <= 0 || h.failing.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.n, host)
	h.failing.Store(int32(len(h.n)))
}

// tracked is how many hosts h keeps, for tests.
func (h *hostFailures) tracked() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n)
}

// skippedError is the error of a URL whose host is down.
func (e *Engine) skippedError(host string, n int) *results.Error {
	return e.newError(results.PhaseQueue, results.KindSkipped, fmt.Sprintf(
		"skipped: %d attempts in a row to %s failed before any response (--host-max-failures %d)", n, host, e.cfg.HostMaxFailures))
}

// hostBannedError is the error of a URL whose host has banned every proxy
// that could serve it (err wraps a *limits.HostBannedError): kind banned,
// phase queue, as a skipped host's, and --resume takes the line again.
func (e *Engine) hostBannedError(err error) *results.Error {
	var hb *limits.HostBannedError
	errors.As(err, &hb)
	what := fmt.Sprintf("all %d proxies that could serve it", hb.Proxies)
	if hb.Proxies == 1 {
		what = "the one proxy that could serve it"
	}
	if len(e.routes) == 1 && !e.routes[0].proxy() {
		what = "direct requests"
	}
	return e.newError(results.PhaseQueue, results.KindBanned, fmt.Sprintf(
		"banned: %s banned %s, with no success since (--ban-status, --ban-match)", hb.Host, what))
}

// noResponse reports whether res, an attempt through rt, failed before any
// response from its target, in a way that says the host is down: direct,
// a failed dns, connect (refused or timed out) or TLS handshake; through a
// proxy, only the proxy saying it could not reach the target. sawByte is
// whether any byte of a response arrived.
func noResponse(rt *route, res result, sawByte bool) bool {
	if res.err == nil || res.status != 0 || sawByte {
		return false
	}
	if rt.proxy() {
		return res.targetSide
	}
	switch res.err.Kind {
	case results.KindDNS, results.KindRefused, results.KindTLS:
		return true
	case results.KindTimeout:
		switch res.err.Phase {
		case results.PhaseDNS, results.PhaseConnect, results.PhaseTLS:
			return true
		}
	}
	return false
}
