// Package proxystatus reads what a proxy says in its answer, its one job:
// a Proxy-Status header (RFC 9209), or squid's X-Squid-Error when there is
// none. Read gives the Proxy-Status member a record shows and what fetch
// makes of the proxy's error (the kind and phase of the record's error,
// and whose failure it is); Fit makes the member fit to write. The engine
// applies what it reads to an attempt.
//
// A proxy that answers that it could not reach the target (a name that
// does not resolve, a refused connection) did its job: the failure is the
// target's, recorded with the kind and phase it would have had without the
// proxy, and it neither benches the proxy nor slows it down. Both headers
// are untrusted input: every value taken from them is bounded, and
// redacted before it is written.
package proxystatus

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/sfv"
)

// Bounds on what is taken from a proxy's answer.
const (
	maxProxyStatusHeader = 4 << 10 // a longer Proxy-Status (its lines together) is ignored whole
	maxProxyName         = 128     // bytes of the proxy's name kept
	maxProxyError        = 64      // a longer error type is not one of RFC 9209's, and is dropped
	maxSquidError        = 64      // bytes of X-Squid-Error read
)

// Side is whose failure a proxy's answer reports.
type Side uint8

// The sides.
const (
	Unknown   Side = iota // fetch does not know the error: the answer counts as it would without it
	Unreached             // the target could not be reached (dns, refused, connect timeout, tls): the target's, and news that it is down
	Target                // the target failed after it was reached: the target's
	Proxy                 // the proxy failed on its own (an internal error, its configuration, a loop): the proxy's
	Policy                // the proxy would not serve the request (denied, a prohibited address): neither's
)

// Meaning is what fetch makes of an error a proxy reports: the kind and
// phase of the record's error, and whose failure it is.
type Meaning struct {
	Kind, Phase string // the record's error's: a results.Kind*, a results.Phase*
	Side        Side
}

// Says is what a proxy said in one answer. The zero value says
// nothing.
type Says struct {
	Status  *results.ProxyStatus // the Proxy-Status member taken, as sent (within maxProxyStatusHeader); nil without one: see Fit
	What    string               // the error as the message quotes it: "dns_timeout", "X-Squid-Error ERR_CONNECT_FAIL 111"
	Meaning Meaning              // the zero Meaning (Side Unknown) when fetch does not know the error
}

// Read reads what the proxy says in the header h of its answer
// with status code. Proxy-Status is taken whatever the status; an error
// is given a meaning only on an answer that is a failure (status 400 or
// more, but not 401 or 407, which are the proxy's own word on the
// credentials), and squid's header is read only then, when there is no
// Proxy-Status error.
func Read(h http.Header, code int) Says {
	var s Says
	if v := h["Proxy-Status"]; len(v) > 0 {
		s.Status = pick(v)
	}
	failed := code >= 400 && code != http.StatusUnauthorized && code != http.StatusProxyAuthRequired
	if !failed {
		return s
	}
	if s.Status != nil && s.Status.Error != "" {
		s.What = s.Status.Error
		s.Meaning = errorMeaning(s.Status.Error)
		return s
	}
	if v := h["X-Squid-Error"]; len(v) > 0 {
		s.What, s.Meaning = squidMeaning(v[0])
	}
	return s
}

// Known reports whether fetch knows what the proxy's error means.
func (s *Says) Known() bool { return s.Meaning.Side != Unknown }

// pick returns the member of a Proxy-Status field (its lines,
// values) that a record shows, or nil when the field does not parse as a
// Structured Field list (RFC 8941) or is longer than maxProxyStatusHeader.
//
// RFC 9209 section 2: each intermediary that handles a response appends
// its member, so the first member is the intermediary closest to the
// origin and the last the one closest to fetch. The member taken is the
// first with an error parameter: the intermediary that failed, nearest to
// the target, whose word the ones after it only carried on. When no member
// has an error, it is the last: the proxy that answered fetch.
func pick(values []string) *results.ProxyStatus {
	n := 0
	for _, v := range values {
		n += len(v) + 2
	}
	if n > maxProxyStatusHeader+2 {
		return nil
	}
	members, ok := sfv.ParseList(strings.Join(values, ", "))
	if !ok || len(members) == 0 {
		return nil
	}
	m := &members[len(members)-1]
	for i := range members {
		if members[i].Param("error") != nil {
			m = &members[i]
			break
		}
	}
	ps := &results.ProxyStatus{}
	if m.Value.Type == sfv.String || m.Value.Type == sfv.Token {
		ps.Proxy = m.Value.S
	}
	if e := m.Param("error"); e != nil && e.Type == sfv.Token && len(e.S) <= maxProxyError {
		ps.Error = e.S
	}
	if d := m.Param("details"); d != nil && d.Type == sfv.String {
		ps.Details = d.S
	}
	return ps
}

// Fit returns ps fit for a record: each value redacted by redact
// (credentials removed), then bounded. Structured Field strings and
// tokens are ASCII, so a cut anywhere leaves valid UTF-8; details, which
// is written as a message is, is bounded by message, as the record's
// error message is.
func Fit(ps *results.ProxyStatus, redact, message func(string) string) *results.ProxyStatus {
	return &results.ProxyStatus{
		Proxy:   cutBytes(redact(ps.Proxy), maxProxyName),
		Error:   cutBytes(redact(ps.Error), maxProxyError),
		Details: message(redact(ps.Details)),
	}
}

// cutBytes returns s cut to at most n bytes.
func cutBytes(s string, n int) string { return s[:min(len(s), n)] }

// errorMeaning is what an error type of RFC 9209 section 2.3 means to
// fetch. The contract names some: dns_* as dns, connection_refused as
// refused, connection_timeout as a timeout in phase connect; the others
// by what the RFC says of them. An error fetch does not know (a new type,
// http_request_error, which is a 4xx on the origin's behalf) has no
// meaning: the answer is taken as it would be without it.
func errorMeaning(typ string) Meaning {
	switch typ {
	case "dns_timeout", "dns_error",
		"destination_not_found": // no next hop for the name
		return Meaning{results.KindDNS, results.PhaseDNS, Unreached}
	case "connection_refused",
		"destination_unavailable",   // the next hop is known to be down
		"destination_ip_unroutable": // no route to its address
		return Meaning{results.KindRefused, results.PhaseConnect, Unreached}
	case "connection_timeout":
		return Meaning{results.KindTimeout, results.PhaseConnect, Unreached}
	case "tls_protocol_error", "tls_certificate_error", "tls_alert_received":
		return Meaning{results.KindTLS, results.PhaseTLS, Unreached}
	case "connection_terminated", // closed before any of the answer came
		"http_response_incomplete":
		return Meaning{results.KindReset, results.PhaseHeaders, Target}
	case "connection_write_timeout":
		return Meaning{results.KindTimeout, results.PhaseRequest, Target}
	case "connection_read_timeout", "http_response_timeout":
		return Meaning{results.KindTimeout, results.PhaseHeaders, Target}
	case "http_response_header_section_size", "http_response_header_size":
		return Meaning{results.KindTooLarge, results.PhaseHeaders, Target}
	case "http_response_body_size", "http_response_trailer_section_size", "http_response_trailer_size":
		return Meaning{results.KindTooLarge, results.PhaseBody, Target}
	case "http_response_transfer_coding", "http_response_content_coding":
		return Meaning{results.KindOther, results.PhaseBody, Target}
	case "http_protocol_error", "http_upgrade_failed":
		return Meaning{results.KindOther, results.PhaseHeaders, Target}
	case "http_request_denied", "destination_ip_prohibited":
		return Meaning{results.KindProxy, results.PhaseProxy, Policy}
	case "proxy_internal_error", "proxy_configuration_error", "proxy_loop_detected",
		"proxy_internal_response",  // it answered itself, without trying the target
		"connection_limit_reached": // its own limit on connections
		return Meaning{results.KindProxy, results.PhaseProxy, Proxy}
	}
	return Meaning{}
}

// squidMeaning reads squid's X-Squid-Error value ("ERR_CONNECT_FAIL
// 111": the error page's name and the errno) and says what it means, as
// for the Proxy-Status error of the same meaning. Squid 5.7 answers a
// name that does not resolve with ERR_READ_ERROR 0 (502) to a plain
// request and ERR_CANNOT_FORWARD 0 (500) to a CONNECT, never
// ERR_DNS_FAIL: the first is taken as the read error it says it is; the
// second, "no path to the destination" from a proxy with no parent, as a
// name that does not resolve.
func squidMeaning(v string) (what string, m Meaning) {
	v = strings.TrimSpace(cutBytes(v, maxSquidError))
	code, errno, _ := strings.Cut(v, " ")
	if !strings.HasPrefix(code, "ERR_") || strings.Trim(code[4:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
		return "", Meaning{}
	}
	n, _ := strconv.Atoi(strings.TrimSpace(errno))
	what = "X-Squid-Error " + code
	if n != 0 {
		what += " " + strconv.Itoa(n)
	}
	switch code {
	case "ERR_DNS_FAIL", "ERR_CANNOT_FORWARD", "ERR_URN_RESOLVE":
		return what, Meaning{results.KindDNS, results.PhaseDNS, Unreached}
	case "ERR_CONNECT_FAIL":
		if n == 110 { // ETIMEDOUT
			return what, Meaning{results.KindTimeout, results.PhaseConnect, Unreached}
		}
		return what, Meaning{results.KindRefused, results.PhaseConnect, Unreached}
	case "ERR_SECURE_CONNECT_FAIL":
		return what, Meaning{results.KindTLS, results.PhaseTLS, Unreached}
	case "ERR_READ_ERROR", "ERR_ZERO_SIZE_OBJECT":
		return what, Meaning{results.KindReset, results.PhaseHeaders, Target}
	case "ERR_WRITE_ERROR":
		return what, Meaning{results.KindReset, results.PhaseRequest, Target}
	case "ERR_READ_TIMEOUT", "ERR_LIFETIME_EXP":
		return what, Meaning{results.KindTimeout, results.PhaseHeaders, Target}
	case "ERR_INVALID_RESP":
		return what, Meaning{results.KindOther, results.PhaseHeaders, Target}
	case "ERR_ACCESS_DENIED", "ERR_CACHE_ACCESS_DENIED", "ERR_FORWARDING_DENIED", "ERR_CONFLICT_HOST", "ERR_TOO_BIG":
		return what, Meaning{results.KindProxy, results.PhaseProxy, Policy}
	case "ERR_GATEWAY_FAILURE", "ERR_SHUTTING_DOWN", "ERR_SOCKET_FAILURE", "ERR_ICAP_FAILURE", "ERR_NO_RELAY":
		return what, Meaning{results.KindProxy, results.PhaseProxy, Proxy}
	}
	return "", Meaning{}
}
