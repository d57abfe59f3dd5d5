package proxystatus

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/sfv"
)

// TestPickProxyStatus: which member of a Proxy-Status field a record
// shows, and what of it; a field that is not a Structured Field list, or
// is too long, is ignored whole.
func TestPickProxyStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   *results.ProxyStatus // nil: ignored
	}{
		{"a name alone", []string{"gw"}, &results.ProxyStatus{Proxy: "gw"}},
		{"a string name", []string{`"ExampleCDN"`}, &results.ProxyStatus{Proxy: "ExampleCDN"}},
		{"error and details", []string{`gw; error=dns_timeout; details="no answer from 10.0.0.53"`},
			&results.ProxyStatus{Proxy: "gw", Error: "dns_timeout", Details: "no answer from 10.0.0.53"}},
		{"other parameters are passed over", []string{`gw;next-hop=origin.example;rcode=NXDOMAIN;error=dns_error;info-code=3`},
			&results.ProxyStatus{Proxy: "gw", Error: "dns_error"}},
		// RFC 9209 section 2: the first member is closest to the origin.
		{"the member that failed, nearest the origin, over those that carried its answer",
			[]string{`exit-node; error=connection_refused, gateway`}, &results.ProxyStatus{Proxy: "exit-node", Error: "connection_refused"}},
		{"the first error of two", []string{"a; error=connection_timeout", "b; error=proxy_internal_error"},
			&results.ProxyStatus{Proxy: "a", Error: "connection_timeout"}},
		{"without an error, the last member: the proxy that answered", []string{"origin-cdn, gw"}, &results.ProxyStatus{Proxy: "gw"}},
		{"lines are one list", []string{"origin-cdn", "gw"}, &results.ProxyStatus{Proxy: "gw"}},
		{"an error that is not a token is dropped", []string{`gw; error="dns_timeout"`}, &results.ProxyStatus{Proxy: "gw"}},
		{"details that are not a string are dropped", []string{`gw; error=dns_error; details=42`}, &results.ProxyStatus{Proxy: "gw", Error: "dns_error"}},
		{"a key given twice keeps its last value", []string{`gw; error=dns_error; error=connection_refused`},
			&results.ProxyStatus{Proxy: "gw", Error: "connection_refused"}},
		{"a name that is a number", []string{`42; error=dns_error`}, &results.ProxyStatus{Error: "dns_error"}},
		{"an error longer than any of RFC 9209's", []string{"gw; error=" + strings.Repeat("e", maxProxyError+1)}, &results.ProxyStatus{Proxy: "gw"}},
		{"empty", []string{""}, nil},
		{"a trailing comma", []string{"gw,"}, nil},
		{"an inner list", []string{"(a b); error=dns_error"}, nil},
		{"an unclosed string", []string{`gw; details="x`}, nil},
		{"a control byte in a string", []string{"gw; details=\"a\x01\""}, nil},
		{"an upper-case key", []string{"gw; Error=dns_error"}, nil},
		{"garbage", []string{"<html>"}, nil},
		{"too long", []string{"gw; details=\"" + strings.Repeat("d", maxProxyStatusHeader) + "\""}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := pick(tc.values)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestReadProxySays: what an answer's headers mean to fetch, with the
// status that gives them one: Proxy-Status's error first, squid's
// X-Squid-Error without it; nothing on a success or on the proxy's word on
// credentials.
func TestReadProxySays(t *testing.T) {
	type m = Meaning
	for _, tc := range []struct {
		name   string
		code   int
		header http.Header
		want   Meaning
		what   string
	}{
		{"dns_timeout", 504, ps("gw; error=dns_timeout"), m{results.KindDNS, results.PhaseDNS, Unreached}, "dns_timeout"},
		{"dns_error", 502, ps("gw; error=dns_error; rcode=NXDOMAIN"), m{results.KindDNS, results.PhaseDNS, Unreached}, "dns_error"},
		{"connection_refused", 502, ps("gw; error=connection_refused"), m{results.KindRefused, results.PhaseConnect, Unreached}, "connection_refused"},
		{"connection_timeout", 504, ps("gw; error=connection_timeout"), m{results.KindTimeout, results.PhaseConnect, Unreached}, "connection_timeout"},
		{"destination_unavailable", 503, ps("gw; error=destination_unavailable"), m{results.KindRefused, results.PhaseConnect, Unreached}, "destination_unavailable"},
		{"tls_certificate_error", 502, ps("gw; error=tls_certificate_error"), m{results.KindTLS, results.PhaseTLS, Unreached}, "tls_certificate_error"},
		{"connection_terminated", 502, ps("gw; error=connection_terminated"), m{results.KindReset, results.PhaseHeaders, Target}, "connection_terminated"},
		{"http_response_timeout", 504, ps("gw; error=http_response_timeout"), m{results.KindTimeout, results.PhaseHeaders, Target}, "http_response_timeout"},
		{"http_response_body_size", 502, ps("gw; error=http_response_body_size"), m{results.KindTooLarge, results.PhaseBody, Target}, "http_response_body_size"},
		{"http_request_denied", 403, ps("gw; error=http_request_denied"), m{results.KindProxy, results.PhaseProxy, Policy}, "http_request_denied"},
		{"proxy_internal_error", 500, ps("gw; error=proxy_internal_error"), m{results.KindProxy, results.PhaseProxy, Proxy}, "proxy_internal_error"},
		{"proxy_loop_detected", 502, ps("gw; error=proxy_loop_detected"), m{results.KindProxy, results.PhaseProxy, Proxy}, "proxy_loop_detected"},
		{"an error fetch does not know", 502, ps("gw; error=quantum_flux"), m{}, "quantum_flux"},
		{"http_request_error: the origin's 4xx", 400, ps("gw; error=http_request_error"), m{}, "http_request_error"},
		{"an error on a success means nothing", 200, ps("gw; error=dns_timeout"), m{}, ""},
		{"nor on a 407", 407, ps("gw; error=proxy_configuration_error"), m{}, ""},
		{"squid: refused", 503, sq("ERR_CONNECT_FAIL 111"), m{results.KindRefused, results.PhaseConnect, Unreached}, "X-Squid-Error ERR_CONNECT_FAIL 111"},
		{"squid: connect timeout", 504, sq("ERR_CONNECT_FAIL 110"), m{results.KindTimeout, results.PhaseConnect, Unreached}, "X-Squid-Error ERR_CONNECT_FAIL 110"},
		{"squid: dns", 503, sq("ERR_DNS_FAIL 0"), m{results.KindDNS, results.PhaseDNS, Unreached}, "X-Squid-Error ERR_DNS_FAIL"},
		{"squid 5: no path (a name that does not resolve)", 500, sq("ERR_CANNOT_FORWARD 0"), m{results.KindDNS, results.PhaseDNS, Unreached}, "X-Squid-Error ERR_CANNOT_FORWARD"},
		{"squid: read timeout", 504, sq("ERR_READ_TIMEOUT 0"), m{results.KindTimeout, results.PhaseHeaders, Target}, "X-Squid-Error ERR_READ_TIMEOUT"},
		{"squid: read error", 502, sq("ERR_READ_ERROR 104"), m{results.KindReset, results.PhaseHeaders, Target}, "X-Squid-Error ERR_READ_ERROR 104"},
		{"squid: denied", 403, sq("ERR_ACCESS_DENIED 0"), m{results.KindProxy, results.PhaseProxy, Policy}, "X-Squid-Error ERR_ACCESS_DENIED"},
		{"squid: its own failure", 503, sq("ERR_SHUTTING_DOWN 0"), m{results.KindProxy, results.PhaseProxy, Proxy}, "X-Squid-Error ERR_SHUTTING_DOWN"},
		{"squid: a code fetch does not know", 503, sq("ERR_FTP_FAILURE 0"), m{}, ""},
		{"squid: not a code", 503, sq("<script>"), m{}, ""},
		{"Proxy-Status wins over squid's", 502, http.Header{"Proxy-Status": {"squid; error=connection_timeout"}, "X-Squid-Error": {"ERR_READ_ERROR 0"}},
			m{results.KindTimeout, results.PhaseConnect, Unreached}, "connection_timeout"},
		{"a Proxy-Status without an error leaves squid's", 503, http.Header{"Proxy-Status": {"squid"}, "X-Squid-Error": {"ERR_CONNECT_FAIL 111"}},
			m{results.KindRefused, results.PhaseConnect, Unreached}, "X-Squid-Error ERR_CONNECT_FAIL 111"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Read(tc.header, tc.code)
			if s.Meaning != tc.want || s.What != tc.what {
				t.Errorf("%+v %q, want %+v %q", s.Meaning, s.What, tc.want, tc.what)
			}
		})
	}
}

func ps(v string) http.Header { return http.Header{"Proxy-Status": {v}} }
func sq(v string) http.Header { return http.Header{"X-Squid-Error": {v}} }

// maxMessage and cutMark stand for the engine's bound on a record's
// error message (see Fit): at most maxMessage bytes, marked cut.
const (
	maxMessage = 200
	cutMark    = "…(cut)"
)

// boundMessage cuts s as the engine's own does a message of ASCII.
func boundMessage(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-len(cutMark)] + cutMark
}

// TestFitProxyStatus: what a record shows of a member is redacted, then
// bounded.
func TestFitProxyStatus(t *testing.T) {
	redact := func(s string) string { return strings.ReplaceAll(s, "s3cret", "***") }
	long := strings.Repeat("x", 190) + "s3cret" + strings.Repeat("y", 1000)
	got := Fit(&results.ProxyStatus{Proxy: "gw-s3cret" + strings.Repeat("n", 500), Error: "dns_error", Details: long}, redact, boundMessage)
	if strings.Contains(got.Proxy+got.Details, "s3cret") || strings.Contains(got.Details, "s3c") {
		t.Errorf("a credential shows: %+v", got)
	}
	if len(got.Proxy) != maxProxyName || !strings.HasPrefix(got.Proxy, "gw-***") {
		t.Errorf("proxy %q (%d bytes), want it cut to %d", got.Proxy, len(got.Proxy), maxProxyName)
	}
	if len(got.Details) > maxMessage || !strings.HasSuffix(got.Details, cutMark) {
		t.Errorf("details of %d bytes %q, want at most %d, marked cut", len(got.Details), got.Details, maxMessage)
	}
}

// FuzzProxyStatus: whatever a proxy sends as Proxy-Status, reading it
// never panics, a member is picked only from a field that parses, and
// what a record shows of it is bounded (the round trip of the parse is
// sfv's FuzzParseList).
func FuzzProxyStatus(f *testing.F) {
	for _, s := range []string{
		`gw; error=dns_timeout; details="no \"answer\""`,
		`a;x=1;y=-1.5;z=?0;w=:AAE=:;v=*tok/en:1, "b c";error=connection_refused`,
		"origin, gw", "", "(a b)", `gw; details="x`, "gw,", "-999999999999999, 999999999999.999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, ok := sfv.ParseList(s)
		if ps := pick([]string{s}); ps != nil {
			if !ok {
				t.Fatalf("picked %+v from a field that does not parse", ps)
			}
			fit := Fit(ps, func(s string) string { return s }, boundMessage)
			if len(fit.Proxy) > maxProxyName || len(fit.Error) > maxProxyError || len(fit.Details) > maxMessage ||
				!utf8.ValidString(fit.Proxy+fit.Error+fit.Details) {
				t.Fatalf("unbounded: %+v", fit)
			}
		}
	})
}
