package facts

import (
	"crypto/tls"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
)

// TestHeaders: the headers named (any case, in the order given, a name
// given twice once) or all of them (sorted), with lower-case names, and
// the values past MaxHeaders left out and listed under Truncated.
func TestHeaders(t *testing.T) {
	big := strings.Repeat("b", MaxHeaders-len("x-big")-len("x-a")-1)
	h := http.Header{"X-A": {"1"}, "X-Big": {big, "over"}, "X-Later": {"2"}, "Set-Cookie": {"a=1", "b=2"}}
	for _, tc := range []struct {
		name  string
		names []string
		all   bool
		want  results.Headers
	}{
		{"named", []string{"set-cookie", "X-A", "x-a", "missing"}, false,
			results.Headers{"set-cookie": {"a=1", "b=2"}, "x-a": {"1"}}},
		{"none", []string{"missing"}, false, nil},
		{"all, cut past the bound", nil, true,
			results.Headers{"set-cookie": {"a=1", "b=2"}, "x-a": {"1"}, Truncated: {"x-big", "x-later"}}},
		{"the first value that fits", []string{"x-a", "x-big"}, false,
			results.Headers{"x-a": {"1"}, "x-big": {big}, Truncated: {"x-big"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Headers(h, tc.names, tc.all); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFill: the final URL is the last redirect's, and a Content-Length is
// taken only as a record writes a number.
func TestFill(t *testing.T) {
	for _, tc := range []struct {
		length string
		want   string
	}{{"120", "120"}, {"0", "0"}, {"012", ""}, {"-1", ""}, {"1e3", ""}, {"", ""}} {
		var f results.Facts
		f.Redirects = []results.Redirect{{Status: 301, URL: "http://b.test/"}}
		resp := &http.Response{Proto: "HTTP/1.1", Header: http.Header{"Content-Length": {tc.length}, "Content-Type": {"text/plain"}}}
		ts := &results.TLS{Version: "TLS1.3"}
		Fill(&f, "http://a.test/", resp, "127.0.0.1:80", ts, nil, false)
		if string(f.ContentLength) != tc.want || f.FinalURL != "http://b.test/" || f.Proto != "HTTP/1.1" ||
			f.RemoteAddr != "127.0.0.1:80" || f.ContentType != "text/plain" || f.TLS != ts || f.Headers != nil {
			t.Errorf("Content-Length %q: %+v, want length %q", tc.length, f, tc.want)
		}
	}
}

// TestConnAddr: the address of a connection is the one dialled, through
// TLS on it, formatted when it was remembered.
func TestConnAddr(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := Remember(a)
	if got, want := ConnAddr(tls.Client(c, &tls.Config{})), a.RemoteAddr().String(); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if got := ConnAddr(a); got != "pipe" {
		t.Errorf("a connection not remembered: %q, want its own address", got)
	}
	if tlsVersion(tls.VersionTLS13) != "TLS1.3" || tlsVersion(tls.VersionSSL30) != "SSLv3" {
		t.Errorf("tls versions: %s %s", tlsVersion(tls.VersionTLS13), tlsVersion(tls.VersionSSL30))
	}
}
