// Package renew bounds what net/http keeps for hosts that never answer,
// its one job: a round tripper on an http.Transport that it replaces
// with a fresh one every so many failed round trips (Transport).
package renew

import (
	"net/http"
	"sync/atomic"
)

// Transport is an http.RoundTripper on a transport that it replaces with
// a fresh one every so many failed round trips (see New). Every net/http
// round trip of the engine goes through one, which hands the errors to
// the engine's mapErr (it types those net/http gives no type: see
// errkind.Std).
//
// net/http keeps a request that waited for a connection to a host in that
// host's queue of waiters until a connection to the host becomes idle
// (golang/go#50798). A host that never answers never has one, so each
// failing host keeps its waiter, about 500 bytes, for the life of the
// transport: a crawl of 300,000 dead domains held 480 MiB. Replacing the
// transport lets those queues go with it, so what they hold is bounded by
// its every waiters. Requests in flight finish on the transport they
// started on; its idle connections are closed, as are the ones it gets
// back afterwards (CloseIdleConnections), so a renewal costs at most the
// idle connections of the moment, redialled once.
type Transport struct {
	build    func() *http.Transport
	mapErr   func(error) error
	every    int64
	cur      atomic.Pointer[http.Transport]
	failures atomic.Int64
	renewals atomic.Int64 // for tests
}

// New returns a Transport on the transports build makes, each replaced
// after every failed round trips (every > 0); the error of each failed
// round trip is returned as mapErr returns it.
func New(every int64, build func() *http.Transport, mapErr func(error) error) *Transport {
	r := &Transport{build: build, mapErr: mapErr, every: every}
	r.cur.Store(build())
	return r
}

// RoundTrip sends req on the current transport.
func (r *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tr := r.cur.Load()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		if r.failures.Add(1)%r.every == 0 && r.cur.CompareAndSwap(tr, r.build()) {
			r.renewals.Add(1)
			tr.CloseIdleConnections()
		}
		err = r.mapErr(err)
	}
	return resp, err
}

// CloseIdleConnections closes the idle connections of the current
// transport (the replaced ones closed theirs when they were replaced).
func (r *Transport) CloseIdleConnections() { r.cur.Load().CloseIdleConnections() }
