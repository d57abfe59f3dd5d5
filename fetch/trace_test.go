package fetch

import (
	"context"
	"net/http/httptrace"
	"testing"
	"time"
)

// TestTrackerIgnoresLateHooks replays the hooks of a request that was given
// an idle connection while its own dial went on: the dial's hooks come after
// GotConn, and a WroteRequest may come after the headers. Neither may move
// the attempt back a phase or restart the header timer during the body.
func TestTrackerIgnoresLateHooks(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HeaderTimeout = 20 * time.Millisecond
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tr := newTracker(&cfg, true, cancel)
	ct := tr.clientTrace()

	ct.GetConn("example.com:80")
	ct.ConnectStart("tcp", "127.0.0.1:80")
	ct.GotConn(httptrace.GotConnInfo{Reused: true})
	ct.ConnectDone("tcp", "127.0.0.1:80", nil) // the background dial ends
	ct.TLSHandshakeStart()
	if got := tr.current(); got != PhaseRequest {
		t.Fatalf("after late dial hooks: phase %s, want request", got)
	}
	ct.WroteRequest(httptrace.WroteRequestInfo{})
	if got := tr.current(); got != PhaseHeaders {
		t.Fatalf("after WroteRequest: phase %s, want headers", got)
	}
	tr.gotHeaders()
	ct.WroteRequest(httptrace.WroteRequestInfo{}) // late
	if got := tr.current(); got != PhaseBody {
		t.Fatalf("after a late WroteRequest: phase %s, want body", got)
	}
	time.Sleep(3 * cfg.HeaderTimeout)
	if c := context.Cause(ctx); c != nil {
		t.Errorf("attempt cancelled during the body: %v", c)
	}
	phase, phases := tr.finish()
	if phase != PhaseBody {
		t.Errorf("finished in %s, want body", phase)
	}
	if _, ok := phases[PhaseTLS]; ok {
		t.Errorf("a late TLS hook was counted: %v", phases)
	}
}
