package fetch

import (
	"crypto/tls"
	"net/http"
	"slices"

	"github.com/fetch-dev/fetch/fetch/facts"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// MaxRecordedHeaders is the most bytes of response headers a record
// copies (Config.RecordHeaders): each value counts its length and its
// name's.
const MaxRecordedHeaders = facts.MaxHeaders

// TruncatedHeaders is the name under which a record's headers list the
// (lower-case) names of which some values were left out, past
// MaxRecordedHeaders. No header has it: a colon is not in a field name.
const TruncatedHeaders = facts.Truncated

// responseFacts fills f with what resp, the final answer of an attempt of
// j tracked by tr, tells of itself beyond its status (see facts.Fill). The
// default facts cost no allocation for a plain http:// answer: their
// strings are the job's or the response's, and the remote address is
// formatted once per connection (see tracker.remoteAddr).
func (e *Engine) responseFacts(f *results.Facts, j *input.Line, tr *tracker, resp *http.Response) {
	remote := tr.remoteAddr()
	var tf *results.TLS
	if resp.TLS != nil {
		tf = tr.tlsFacts(resp.TLS)
	}
	facts.Fill(f, j.Shown, resp, remote, tf, e.cfg.RecordHeaders, e.cfg.RecordAllHeaders)
}

// redirects returns the redirects the attempt's client followed (see
// follow.Client.Hops), nil for none, and forgets them.
func (t *tracker) redirects() []results.Redirect {
	if len(t.hops) == 0 {
		return nil
	}
	r := slices.Clone(t.hops)
	clear(t.hops)
	t.hops = t.hops[:0]
	return r
}

// tlsFacts returns the facts of the TLS connection whose state is cs.
// net/http gives every answer on a connection the same state, so the
// facts are made once for the last connection the tracker saw, and shared
// by the records of its answers (a record is never changed once filled).
func (t *tracker) tlsFacts(cs *tls.ConnectionState) *results.TLS {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tlsState == cs {
		return t.tlsShown
	}
	f := facts.TLS(cs)
	t.tlsState, t.tlsShown = cs, f
	return f
}

// Remote is the HTTP/1.1 client's word of the remote address of the
// connection the attempt's exchange goes on (see h1.RemoteHooks).
func (t *tracker) Remote(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.done {
		t.remote, t.remoteShown = nil, addr
	}
}

// remoteAddr is the address of the connection the attempt's last request
// went on: the target's, or its proxy's.
func (t *tracker) remoteAddr() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.remoteShown == "" && t.remote != nil {
		t.remoteShown = facts.ConnAddr(t.remote)
	}
	t.remote = nil
	return t.remoteShown
}
