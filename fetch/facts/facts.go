// Package facts makes the facts a record gives of a response beyond its
// status (results.Facts), its one job: the final URL, the protocol, the
// remote address, the content type and length, the TLS connection, and
// the headers --record-headers copies, within MaxHeaders. The engine
// holds what it keeps per attempt (the redirects followed, the remote
// address and the TLS facts made last) and hands them in.
package facts

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
)

// MaxHeaders is the most bytes of response headers a record copies
// (--record-headers): each value counts its length and its name's.
const MaxHeaders = 16 << 10

// Truncated is the name under which a record's headers list the
// (lower-case) names of which some values were left out, past
// MaxHeaders. No header has it: a colon is not in a field name.
const Truncated = ":truncated"

// Fill fills f, whose Redirects are already set, with what resp, the
// final answer to a request for the URL shown, tells of itself beyond its
// status: remote is the address of the connection it came on and tf the
// facts of its TLS connection (nil without one: see TLS); headers and all are
// --record-headers (see Headers). The default facts cost no allocation:
// their strings are the caller's or the response's.
func Fill(f *results.Facts, shown string, resp *http.Response, remote string, tf *results.TLS, headers []string, all bool) {
	f.FinalURL = shown
	if n := len(f.Redirects); n > 0 {
		f.FinalURL = f.Redirects[n-1].URL
	}
	f.Proto = resp.Proto
	f.RemoteAddr = remote
	if v := resp.Header["Content-Type"]; len(v) > 0 {
		f.ContentType = v[0]
	}
	if v := resp.Header["Content-Length"]; len(v) > 0 && results.IsDecimal(v[0]) {
		f.ContentLength = json.Number(v[0])
	}
	f.TLS = tf
	if all || len(headers) > 0 {
		f.Headers = Headers(resp.Header, headers, all)
	}
}

// Headers copies the headers of h that names lists (any case), or
// all of them, with lower-case names, at most MaxHeaders bytes:
// names in the order given (sorted, for all), the values of each in
// order. The first value that does not fit is left out, with every value
// after it; the names of which values were left out are listed under
// Truncated.
func Headers(h http.Header, names []string, all bool) results.Headers {
	keys := names
	if all {
		keys = make([]string, 0, len(h))
		for k := range h {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	out := make(results.Headers, len(keys))
	left := MaxHeaders
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
		out[Truncated] = cut
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// TLS returns the facts of the TLS connection whose state is cs.
func TLS(cs *tls.ConnectionState) *results.TLS {
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
// formatted once: the address of every record of an answer on it (see
// Remember).
type remoteConn struct {
	net.Conn
	addr string
}

// Remember returns c, a connection just dialled, keeping its remote
// address formatted for ConnAddr.
func Remember(c net.Conn) net.Conn { return &remoteConn{Conn: c, addr: c.RemoteAddr().String()} }

// Remembered has the connections dial makes keep their remote address
// formatted (see Remember).
func Remembered(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return c, err
		}
		return Remember(c), nil
	}
}

// ConnAddr is the remote address of c, a connection a request went on:
// through TLS (with the target, or with an https proxy, or both) to the
// connection that was dialled (formatted once when it was Remembered).
func ConnAddr(c net.Conn) string {
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
