package fetch

import (
	"net/http"
	"sync/atomic"

	"github.com/fetch-dev/fetch/fetch/errkind"
)

// renewFailures is how many failed round trips a transport serves before
// it is replaced by a fresh one (see renewing).
const renewFailures = 8192

// renewing is an http.RoundTripper on a transport that it replaces with a
// fresh one every renewFailures failed round trips. Every net/http round
// trip of the engine goes through one, which types the errors net/http
// gives no type (see errkind.Std).
//
// net/http keeps a request that waited for a connection to a host in that
// host's queue of waiters until a connection to the host becomes idle
// (golang/go#50798). A host that never answers never has one, so each
// failing host keeps its waiter, about 500 bytes, for the life of the
// transport: a crawl of 300,000 dead domains held 480 MiB. Replacing the
// transport lets those queues go with it, so what they hold is bounded by
// renewFailures waiters. Requests in flight finish on the transport they
// started on; its idle connections are closed, as are the ones it gets
// back afterwards (CloseIdleConnections), so a renewal costs at most the
// idle connections of the moment, redialled once.
type renewing struct {
	build    func() *http.Transport
	every    int64
	cur      atomic.Pointer[http.Transport]
	failures atomic.Int64
	renewals atomic.Int64 // for tests
}

func newRenewing(every int64, build func() *http.Transport) *renewing {
	r := &renewing{build: build, every: every}
	r.cur.Store(build())
	return r
}

func (r *renewing) RoundTrip(req *http.Request) (*http.Response, error) {
	tr := r.cur.Load()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		if r.failures.Add(1)%r.every == 0 && r.cur.CompareAndSwap(tr, r.build()) {
			r.renewals.Add(1)
			tr.CloseIdleConnections()
		}
		err = errkind.Std(err)
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of the current
// transport (the replaced ones closed theirs when they were replaced).
func (r *renewing) CloseIdleConnections() { r.cur.Load().CloseIdleConnections() }
