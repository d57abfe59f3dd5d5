package h1

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// written returns what writeRequest writes for req with auth, and what
// net/http's Request.Write (WriteProxy when proxied) writes for req with
// auth's value set as its Proxy-Authorization, with their errors.
func written(req *http.Request, proxied bool, auth ProxyAuth) (ours, theirs string, oursErr, theirsErr error) {
	var a, b bytes.Buffer
	wa, wb := bufio.NewWriter(&a), bufio.NewWriter(&b)
	header := req.Header.Clone()
	oursErr = writeRequest(wa, req, proxied, auth)
	wa.Flush()
	if !maps.EqualFunc(header, req.Header, slices.Equal) {
		panic("writeRequest changed the request's header")
	}
	if auth.set {
		r := *req
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(auth.user+":"+auth.pass)))
		req = &r
	}
	if proxied {
		theirsErr = req.WriteProxy(wb)
	} else {
		theirsErr = req.Write(wb)
	}
	wb.Flush()
	return a.String(), b.String(), oursErr, theirsErr
}

// TestWriteRequestAsNetHTTP: what writeRequest writes is what net/http
// writes, byte for byte, direct and through a proxy, both for requests it
// writes itself and for those it leaves to net/http; with a proxy's
// credentials, what net/http writes with them set in the header, in place
// of any Proxy-Authorization the request has (names that sort before and
// after it, none, long credentials).
func TestWriteRequestAsNetHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, method, url, host string
		header                  http.Header
		close                   bool
		plain                   bool // writeRequest writes it itself
	}{
		{name: "engine's", method: "GET", url: "http://127.0.0.1:8080/b/1?size=1024",
			header: http.Header{"User-Agent": {"fetch/0.1"}, "Accept": {"*/*"}}, plain: true},
		{name: "no method, no path", url: "http://a.example", header: http.Header{}, plain: true},
		{name: "HEAD, empty query", method: "HEAD", url: "http://a.example/x?", header: http.Header{"Accept": {"*/*"}}, plain: true},
		{name: "headers sorted, several values", url: "http://a.example/p",
			header: http.Header{"X-B": {"2", "3"}, "Accept": {"*/*"}, "X-A": {""}, "Proxy-Authorization": {"Basic dTpw"}, "Empty": {}}, plain: true},
		{name: "no User-Agent", url: "http://a.example/", header: http.Header{"User-Agent": {""}}, plain: true},
		{name: "User-Agent with no value", url: "http://a.example/", header: http.Header{"User-Agent": {}}, plain: true},
		{name: "path escaped", url: "http://a.example/a%20b/c%2Fd?q=%20", header: http.Header{}, plain: true},
		{name: "Host header", url: "http://127.0.0.1:9/x", host: "b.example:80", header: http.Header{}, plain: true},
		{name: "IPv6", url: "http://[::1]:8080/x", header: http.Header{}, plain: true},
		{name: "excluded headers", url: "http://a.example/", header: http.Header{"Host": {"evil"}, "Content-Length": {"5"}, "Trailer": {"X"}}, plain: true},
		{name: "zone", url: "http://[fe80::1%25eth0]:80/", header: http.Header{}},
		{name: "tab and obs-text inside a value", url: "http://a.example/", header: http.Header{"X-A": {"a\tcaf\xc3\xa9"}}, plain: true},
		{name: "value to clean", url: "http://a.example/", header: http.Header{"X-A": {" a\r\nb "}}},
		{name: "User-Agent to clean", url: "http://a.example/", header: http.Header{"User-Agent": {"a\nb"}}},
		{name: "invalid name", url: "http://a.example/", header: http.Header{"X A": {"1"}}},
		{name: "POST", method: "POST", url: "http://a.example/", header: http.Header{}},
		{name: "no header", url: "http://a.example/", plain: true},
		{name: "POST, no header", method: "POST", url: "http://a.example/"},
		{name: "name not canonical", url: "http://a.example/", header: http.Header{"proxy-authorization": {"Basic dTpw"}, "Accept": {"*/*"}}, plain: true},
		{name: "close", url: "http://a.example/", header: http.Header{}, close: true},
		{name: "invalid host", url: "http://a.example/", host: "a b", header: http.Header{}},
		{name: "opaque", url: "http:opaque?x", header: http.Header{}},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		req := &http.Request{Method: tc.method, URL: u, Host: tc.host, Header: tc.header, Close: tc.close}
		if req.Host == "" {
			req.Host = u.Host
		}
		var keys [maxPlainHeaders]string
		if _, _, plain := plainRequest(req, &keys); plain != tc.plain {
			t.Errorf("%s: written by writeRequest itself: %v, want %v", tc.name, plain, tc.plain)
		}
		for _, proxied := range []bool{false, true} {
			for _, auth := range []ProxyAuth{{}, {user: "user-session-7", pass: "pw", set: true}, {user: "ü", set: true},
				{user: strings.Repeat("u", 300), pass: strings.Repeat("p", 200), set: true}} {
				ours, theirs, oursErr, theirsErr := written(req, proxied, auth)
				if ours != theirs || (oursErr == nil) != (theirsErr == nil) {
					t.Errorf("%s (proxied %v, credentials %v): writeRequest wrote\n%q (%v)\nnet/http\n%q (%v)", tc.name, proxied, auth.set, ours, oursErr, theirs, theirsErr)
				}
			}
		}
	}
}

// TestWriteRequestManyHeaders: past maxPlainHeaders names, net/http
// writes the request, the same.
func TestWriteRequestManyHeaders(t *testing.T) {
	h := http.Header{}
	for i := range maxPlainHeaders + 1 {
		h.Set("X-"+string(rune('A'+i)), "v")
	}
	req := &http.Request{Method: "GET", URL: mustURL(t, "a.example:80"), Header: h}
	var keys [maxPlainHeaders]string
	if _, _, plain := plainRequest(req, &keys); plain {
		t.Error("more names than keys holds, and written by writeRequest")
	}
	if ours, theirs, _, _ := written(req, true, ProxyAuth{user: "u", pass: "p", set: true}); ours != theirs {
		t.Errorf("writeRequest wrote\n%q\nnet/http\n%q", ours, theirs)
	}
}

// FuzzWriteRequest: for any request h1 may send, writeRequest writes what
// net/http writes, and fails when it fails.
func FuzzWriteRequest(f *testing.F) {
	f.Add("GET", "http://127.0.0.1:8080/b/1?size=1024", "", "Accept", "*/*", "fetch/0.1", false)
	f.Add("", "http://a.example/a%20b?", "b.example", "X-A", " v ", "", true)
	f.Add("HEAD", "http://[::1]:80/", "", "Proxy-Authorization", "Basic dTpw", "x\ny", true)
	f.Fuzz(func(t *testing.T, method, raw, host, key, value, ua string, proxied bool) {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "http" {
			return
		}
		if host == "" {
			host = u.Host
		}
		req := &http.Request{Method: method, URL: u, Host: host, Header: http.Header{key: {value}, "User-Agent": {ua}}}
		for _, auth := range []ProxyAuth{{}, {user: key, pass: value, set: true}} {
			ours, theirs, oursErr, theirsErr := written(req, proxied, auth)
			if ours != theirs || (oursErr == nil) != (theirsErr == nil) {
				t.Errorf("writeRequest wrote\n%q (%v)\nnet/http\n%q (%v)", ours, oursErr, theirs, theirsErr)
			}
		}
	})
}

// BenchmarkWriteRequest: a request as the engine sends it through a
// proxy, written by writeRequest and by net/http's WriteProxy; and with
// the proxy's credentials given to writeRequest (as h1 has them from the
// route), not in the request's header.
func BenchmarkWriteRequest(b *testing.B) {
	u, _ := url.Parse("http://127.0.0.1:8080/b/123?size=1024")
	req := &http.Request{Method: "GET", URL: u, Host: u.Host,
		Header: http.Header{"User-Agent": {"fetch/0.1"}, "Accept": {"*/*"}, "Proxy-Authorization": {"Basic dTpw"}}}
	bare := &http.Request{Method: "GET", URL: u, Host: u.Host, Header: http.Header{"User-Agent": {"fetch/0.1"}, "Accept": {"*/*"}}}
	for _, bc := range []struct {
		name  string
		write func(*bufio.Writer) error
	}{
		{"fetch", func(w *bufio.Writer) error { return writeRequest(w, req, true, ProxyAuth{}) }},
		{"fetch-credentials", func(w *bufio.Writer) error {
			return writeRequest(w, bare, true, ProxyAuth{user: "user-session-12345", pass: "pw", set: true})
		}},
		{"net-http", func(w *bufio.Writer) error { return req.WriteProxy(w) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := bufio.NewWriterSize(io.Discard, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.write(w); err != nil {
					b.Fatal(err)
				}
				w.Flush()
			}
		})
	}
}
