package fetch

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
)

// MaxRecordedHeaders is the most bytes of response headers a record
// copies (Config.RecordHeaders): each value counts its length and its
// name's.
const MaxRecordedHeaders = 16 << 10

// TruncatedHeaders is the name under which a record's headers list the
// (lower-case) names of which some values were left out, past
// MaxRecordedHeaders. No header has it: a colon is not in a field name.
const TruncatedHeaders = ":truncated"

// responseFacts fills f with what resp, the final answer of an attempt of
// j tracked by tr, tells of itself beyond its status. The default facts
// cost no allocation for a plain http:// answer: their strings are the
// job's or the response's, and the remote address is formatted once per
// connection (see tracker.remoteAddr).
func (e *Engine) responseFacts(f *results.Facts, j *input.Line, tr *tracker, resp *http.Response) {
	f.FinalURL = j.Shown
	if n := len(f.Redirects); n > 0 {
		f.FinalURL = f.Redirects[n-1].URL
	}
	f.Proto = resp.Proto
	f.RemoteAddr = tr.remoteAddr()
	if v := resp.Header["Content-Type"]; len(v) > 0 {
		f.ContentType = v[0]
	}
	if v := resp.Header["Content-Length"]; len(v) > 0 && decimal(v[0]) {
		f.ContentLength = json.Number(v[0])
	}
	if resp.TLS != nil {
		f.TLS = tr.tlsFacts(resp.TLS)
	}
	if e.cfg.RecordAllHeaders || len(e.cfg.RecordHeaders) > 0 {
		f.Headers = recordHeaders(resp.Header, e.cfg.RecordHeaders, e.cfg.RecordAllHeaders)
	}
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

// decimal reports whether s is a decimal number as a record writes it:
// digits, without a leading zero.
func decimal(s string) bool {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// recordHeaders copies the headers of h that names lists (any case), or
// all of them, with lower-case names, at most MaxRecordedHeaders bytes:
// names in the order given (sorted, for all), the values of each in
// order. The first value that does not fit is left out, with every value
// after it; the names of which values were left out are listed under
// TruncatedHeaders.
func recordHeaders(h http.Header, names []string, all bool) results.Headers {
	keys := names
	if all {
		keys = make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	out := make(results.Headers, len(keys))
	left := MaxRecordedHeaders
	var cut []string
	for _, k := range keys {
		vs := h.Values(k)
		if len(vs) == 0 {
			continue
		}
		name := strings.ToLower(k)
		if _, ok := out[name]; ok {
			continue // named twice
		}
		var kept []string
		for i, v := range vs {
			if left < len(name)+len(v) {
				left = 0
				cut = append(cut, name)
				break
			}
			left -= len(name) + len(v)
			if i == 0 {
				kept = make([]string, 0, len(vs))
			}
			kept = append(kept, v)
		}
		if len(kept) > 0 {
			out[name] = kept
		}
	}
	if len(cut) > 0 {
		out[TruncatedHeaders] = cut
	}
	if len(out) == 0 {
		return nil
	}
	return out
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
	f := &results.TLS{
		Version:    tlsVersion(cs.Version),
		Cipher:     tls.CipherSuiteName(cs.CipherSuite),
		ALPN:       cs.NegotiatedProtocol,
		ServerName: cs.ServerName,
	}
	if len(cs.PeerCertificates) > 0 {
		leaf := cs.PeerCertificates[0]
		f.CertNotAfter = leaf.NotAfter.UTC().Format(time.RFC3339)
		f.CertIssuer = leaf.Issuer.String()
	}
	t.tlsState, t.tlsShown = cs, f
	return f
}

// tlsVersion names a TLS version as records do: TLS1.3.
func tlsVersion(v uint16) string {
	switch v {
	case tls.VersionTLS10:
		return "TLS1.0"
	case tls.VersionTLS11:
		return "TLS1.1"
	case tls.VersionTLS12:
		return "TLS1.2"
	case tls.VersionTLS13:
		return "TLS1.3"
	}
	return strings.ReplaceAll(tls.VersionName(v), " ", "")
}

// remoteConn is a connection net/http dials, with its remote address
// formatted once: the address of every record of an answer on it.
type remoteConn struct {
	net.Conn
	addr string
}

// remembered has the connections dial makes keep their remote address
// formatted (see remoteConn).
func remembered(dial dialFunc) dialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return c, err
		}
		return &remoteConn{Conn: c, addr: c.RemoteAddr().String()}, nil
	}
}

// connAddr is the remote address of c, a connection a request went on:
// through TLS (with the target, or with an https proxy, or both) to the
// connection that was dialled.
func connAddr(c net.Conn) string {
	for {
		switch x := c.(type) {
		case *remoteConn:
			return x.addr
		case *tls.Conn:
			c = x.NetConn()
		default: // a SOCKS connection net/http made of one dialled
			if a := c.RemoteAddr(); a != nil {
				return a.String()
			}
			return ""
		}
	}
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
		t.remoteShown = connAddr(t.remote)
	}
	t.remote = nil
	return t.remoteShown
}
