package fetch

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/fetch-dev/fetch/fetch/results"
)

// What a proxy says in its answer: a Proxy-Status header (RFC 9209), or
// squid's X-Squid-Error when there is none. A proxy that answers that it
// could not reach the target (a name that does not resolve, a refused
// connection) did its job: the failure is the target's, recorded with the
// kind and phase it would have had without the proxy, and it neither
// benches the proxy nor slows it down. Both headers are untrusted input:
// every value taken from them is bounded, and redacted before it is
// written.

// Bounds on what is taken from a proxy's answer.
const (
	maxProxyStatusHeader = 4 << 10 // a longer Proxy-Status (its lines together) is ignored whole
	maxProxyName         = 128     // bytes of the proxy's name kept
	maxProxyError        = 64      // a longer error type is not one of RFC 9209's, and is dropped
	maxSquidError        = 64      // bytes of X-Squid-Error read
)

// side is whose failure a proxy's answer reports.
type side uint8

const (
	sideUnknown   side = iota // fetch does not know the error: the answer counts as it would without it
	sideUnreached             // the target could not be reached (dns, refused, connect timeout, tls): the target's, and news that it is down
	sideTarget                // the target failed after it was reached: the target's
	sideProxy                 // the proxy failed on its own (an internal error, its configuration, a loop): the proxy's
	sidePolicy                // the proxy would not serve the request (denied, a prohibited address): neither's
)

// meaning is what fetch makes of an error a proxy reports: the kind and
// phase of the record's error, and whose failure it is.
type meaning struct {
	kind, phase string
	side        side
}

// proxySays is what a proxy said in one answer. The zero value says
// nothing.
type proxySays struct {
	status  *results.ProxyStatus // the Proxy-Status member taken, as sent (within maxProxyStatusHeader); nil without one
	what    string               // the error as the message quotes it: "dns_timeout", "ERR_CONNECT_FAIL 111"
	meaning meaning
}

// readProxySays reads what the proxy says in the header h of its answer
// with status code. Proxy-Status is taken whatever the status; an error
// is given a meaning only on an answer that is a failure (status 400 or
// more, but not 401 or 407, which are the proxy's own word on the
// credentials), and squid's header is read only then, when there is no
// Proxy-Status error.
func readProxySays(h http.Header, code int) proxySays {
	var s proxySays
	if v := h["Proxy-Status"]; len(v) > 0 {
		s.status = pickProxyStatus(v)
	}
	failed := code >= 400 && code != http.StatusUnauthorized && code != http.StatusProxyAuthRequired
	if !failed {
		return s
	}
	if s.status != nil && s.status.Error != "" {
		s.what = s.status.Error
		s.meaning = proxyErrorMeaning(s.status.Error)
		return s
	}
	if v := h["X-Squid-Error"]; len(v) > 0 {
		s.what, s.meaning = squidErrorMeaning(v[0])
	}
	return s
}

// known reports whether fetch knows what the proxy's error means.
func (s *proxySays) known() bool { return s.meaning.side != sideUnknown }

// pickProxyStatus returns the member of a Proxy-Status field (its lines,
// values) that a record shows, or nil when the field does not parse as a
// Structured Field list (RFC 8941) or is longer than maxProxyStatusHeader.
//
// RFC 9209 section 2: each intermediary that handles a response appends
// its member, so the first member is the intermediary closest to the
// origin and the last the one closest to fetch. The member taken is the
// first with an error parameter: the intermediary that failed, nearest to
// the target, whose word the ones after it only carried on. When no member
// has an error, it is the last: the proxy that answered fetch.
func pickProxyStatus(values []string) *results.ProxyStatus {
	n := 0
	for _, v := range values {
		n += len(v) + 2
	}
	if n > maxProxyStatusHeader+2 {
		return nil
	}
	members, ok := parseSFList(strings.Join(values, ", "))
	if !ok || len(members) == 0 {
		return nil
	}
	m := &members[len(members)-1]
	for i := range members {
		if members[i].param("error") != nil {
			m = &members[i]
			break
		}
	}
	ps := &results.ProxyStatus{}
	if m.value.typ == sfString || m.value.typ == sfToken {
		ps.Proxy = m.value.s
	}
	if e := m.param("error"); e != nil && e.typ == sfToken && len(e.s) <= maxProxyError {
		ps.Error = e.s
	}
	if d := m.param("details"); d != nil && d.typ == sfString {
		ps.Details = d.s
	}
	return ps
}

// fitProxyStatus returns ps fit for a record: each value redacted by
// redact (credentials removed), then bounded. Structured Field strings
// and tokens are ASCII, so a cut anywhere leaves valid UTF-8; details,
// which is written as a message is, is bounded as one (boundMessage).
func fitProxyStatus(ps *results.ProxyStatus, redact func(string) string) *results.ProxyStatus {
	return &results.ProxyStatus{
		Proxy:   cutBytes(redact(ps.Proxy), maxProxyName),
		Error:   cutBytes(redact(ps.Error), maxProxyError),
		Details: boundMessage(redact(ps.Details)),
	}
}

// cutBytes returns s cut to at most n bytes.
func cutBytes(s string, n int) string { return s[:min(len(s), n)] }

// proxyErrorMeaning is what an error type of RFC 9209 section 2.3 means to
// fetch. The contract names some: dns_* as dns, connection_refused as
// refused, connection_timeout as a timeout in phase connect; the others
// by what the RFC says of them. An error fetch does not know (a new type,
// http_request_error, which is a 4xx on the origin's behalf) has no
// meaning: the answer is taken as it would be without it.
func proxyErrorMeaning(typ string) meaning {
	switch typ {
	case "dns_timeout", "dns_error",
		"destination_not_found": // no next hop for the name
		return meaning{results.KindDNS, results.PhaseDNS, sideUnreached}
	case "connection_refused",
		"destination_unavailable",   // the next hop is known to be down
		"destination_ip_unroutable": // no route to its address
		return meaning{results.KindRefused, results.PhaseConnect, sideUnreached}
	case "connection_timeout":
		return meaning{results.KindTimeout, results.PhaseConnect, sideUnreached}
	case "tls_protocol_error", "tls_certificate_error", "tls_alert_received":
		return meaning{results.KindTLS, results.PhaseTLS, sideUnreached}
	case "connection_terminated", // closed before any of the answer came
		"http_response_incomplete":
		return meaning{results.KindReset, results.PhaseHeaders, sideTarget}
	case "connection_write_timeout":
		return meaning{results.KindTimeout, results.PhaseRequest, sideTarget}
	case "connection_read_timeout", "http_response_timeout":
		return meaning{results.KindTimeout, results.PhaseHeaders, sideTarget}
	case "http_response_header_section_size", "http_response_header_size":
		return meaning{results.KindTooLarge, results.PhaseHeaders, sideTarget}
	case "http_response_body_size", "http_response_trailer_section_size", "http_response_trailer_size":
		return meaning{results.KindTooLarge, results.PhaseBody, sideTarget}
	case "http_response_transfer_coding", "http_response_content_coding":
		return meaning{results.KindOther, results.PhaseBody, sideTarget}
	case "http_protocol_error", "http_upgrade_failed":
		return meaning{results.KindOther, results.PhaseHeaders, sideTarget}
	case "http_request_denied", "destination_ip_prohibited":
		return meaning{results.KindProxy, results.PhaseProxy, sidePolicy}
	case "proxy_internal_error", "proxy_configuration_error", "proxy_loop_detected",
		"proxy_internal_response",  // it answered itself, without trying the target
		"connection_limit_reached": // its own limit on connections
		return meaning{results.KindProxy, results.PhaseProxy, sideProxy}
	}
	return meaning{}
}

// squidErrorMeaning reads squid's X-Squid-Error value ("ERR_CONNECT_FAIL
// 111": the error page's name and the errno) and says what it means, as
// for the Proxy-Status error of the same meaning. Squid 5.7 answers a
// name that does not resolve with ERR_READ_ERROR 0 (502) to a plain
// request and ERR_CANNOT_FORWARD 0 (500) to a CONNECT, never
// ERR_DNS_FAIL: the first is taken as the read error it says it is; the
// second, "no path to the destination" from a proxy with no parent, as a
// name that does not resolve.
func squidErrorMeaning(v string) (what string, m meaning) {
	v = strings.TrimSpace(cutBytes(v, maxSquidError))
	code, errno, _ := strings.Cut(v, " ")
	if !strings.HasPrefix(code, "ERR_") || strings.Trim(code[4:], "ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != "" {
		return "", meaning{}
	}
	n, _ := strconv.Atoi(strings.TrimSpace(errno))
	what = "X-Squid-Error " + code
	if n != 0 {
		what += " " + strconv.Itoa(n)
	}
	switch code {
	case "ERR_DNS_FAIL", "ERR_CANNOT_FORWARD", "ERR_URN_RESOLVE":
		return what, meaning{results.KindDNS, results.PhaseDNS, sideUnreached}
	case "ERR_CONNECT_FAIL":
		if n == 110 { // ETIMEDOUT
			return what, meaning{results.KindTimeout, results.PhaseConnect, sideUnreached}
		}
		return what, meaning{results.KindRefused, results.PhaseConnect, sideUnreached}
	case "ERR_SECURE_CONNECT_FAIL":
		return what, meaning{results.KindTLS, results.PhaseTLS, sideUnreached}
	case "ERR_READ_ERROR", "ERR_ZERO_SIZE_OBJECT":
		return what, meaning{results.KindReset, results.PhaseHeaders, sideTarget}
	case "ERR_WRITE_ERROR":
		return what, meaning{results.KindReset, results.PhaseRequest, sideTarget}
	case "ERR_READ_TIMEOUT", "ERR_LIFETIME_EXP":
		return what, meaning{results.KindTimeout, results.PhaseHeaders, sideTarget}
	case "ERR_INVALID_RESP":
		return what, meaning{results.KindOther, results.PhaseHeaders, sideTarget}
	case "ERR_ACCESS_DENIED", "ERR_CACHE_ACCESS_DENIED", "ERR_FORWARDING_DENIED", "ERR_CONFLICT_HOST", "ERR_TOO_BIG":
		return what, meaning{results.KindProxy, results.PhaseProxy, sidePolicy}
	case "ERR_GATEWAY_FAILURE", "ERR_SHUTTING_DOWN", "ERR_SOCKET_FAILURE", "ERR_ICAP_FAILURE", "ERR_NO_RELAY":
		return what, meaning{results.KindProxy, results.PhaseProxy, sideProxy}
	}
	return "", meaning{}
}

// heard puts what a proxy said in its answer (answered: its status line,
// "502 Bad Gateway") into res: the Proxy-Status member for the record, and
// when fetch knows what its error means, the attempt's error, as the
// target's failure or the proxy's. It reports whether it set the error.
// An error res already has other than the proxy's refusal (a deadline
// that ran out with the answer) is kept.
func (e *Engine) heard(res *result, says *proxySays, answered string) bool {
	if ps := says.status; ps != nil {
		res.proxyStatus = fitProxyStatus(ps, e.redactor.String)
	}
	if !says.known() || (res.err != nil && res.err.Kind != results.KindProxy) {
		return false
	}
	m := says.meaning
	msg := "proxy answered " + answered + ": " + says.what
	if ps := says.status; ps != nil && ps.Details != "" && says.what == ps.Error {
		msg += " (" + ps.Details + ")"
	}
	res.err = e.newError(m.phase, m.kind, msg)
	res.said = m.side
	res.targetSide = m.side == sideUnreached || m.side == sideTarget
	return true
}

// A Structured Field list (RFC 8941 section 3.1) of items with parameters,
// as Proxy-Status is: what fetch needs of RFC 8941, parsed as its section
// 4.2 says, so that a field that does not parse is ignored whole. Inner
// lists, and RFC 9651's dates and display strings, fail the parse: RFC
// 9209 has no use for them.

// sfType is the type of a bare item.
type sfType uint8

const (
	sfInteger sfType = iota + 1
	sfDecimal
	sfString
	sfToken
	sfBytes
	sfBoolean
)

// sfItem is a bare item. s is a string's or token's value, or a byte
// sequence's base64 as sent; n an integer, a decimal in thousandths, or a
// boolean's 0 or 1.
type sfItem struct {
	typ sfType
	s   string
	n   int64
}

// sfParam is one parameter of a member.
type sfParam struct {
	key   string
	value sfItem
}

// sfMember is a member of a list: an item and its parameters, in order.
type sfMember struct {
	value  sfItem
	params []sfParam
}

// param returns the value of the parameter key, or nil.
func (m *sfMember) param(key string) *sfItem {
	for i := range m.params {
		if m.params[i].key == key {
			return &m.params[i].value
		}
	}
	return nil
}

// parseSFList parses s as a list of items with parameters; ok is false
// when it does not parse.
func parseSFList(s string) (members []sfMember, ok bool) {
	p := sfParser{s: s}
	p.skip(" ")
	for p.more() {
		var m sfMember
		if m.value, ok = p.bareItem(); !ok {
			return nil, false
		}
		if m.params, ok = p.params(); !ok {
			return nil, false
		}
		members = append(members, m)
		p.skip(" \t")
		if !p.more() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
		p.skip(" \t")
		if !p.more() {
			return nil, false // a trailing comma
		}
	}
	return members, true
}

// sfParser reads s from i.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) more() bool { return p.i < len(p.s) }

// skip passes any of the bytes in set.
func (p *sfParser) skip(set string) {
	for p.more() && strings.IndexByte(set, p.s[p.i]) >= 0 {
		p.i++
	}
}

// params parses the parameters after an item. A key given twice keeps its
// first place and its last value.
func (p *sfParser) params() ([]sfParam, bool) {
	var ps []sfParam
	for p.more() && p.s[p.i] == ';' {
		p.i++
		p.skip(" ")
		key, ok := p.key()
		if !ok {
			return nil, false
		}
		v := sfItem{typ: sfBoolean, n: 1}
		if p.more() && p.s[p.i] == '=' {
			p.i++
			if v, ok = p.bareItem(); !ok {
				return nil, false
			}
		}
		dup := false
		for j := range ps {
			if ps[j].key == key {
				ps[j].value, dup = v, true
			}
		}
		if !dup {
			ps = append(ps, sfParam{key, v})
		}
	}
	return ps, true
}

// key parses a key: lcalpha or "*", then lcalpha, DIGIT, "_", "-", "." or
// "*".
func (p *sfParser) key() (string, bool) {
	start := p.i
	if !p.more() || !(isLower(p.s[p.i]) || p.s[p.i] == '*') {
		return "", false
	}
	for p.i++; p.more(); p.i++ {
		c := p.s[p.i]
		if !isLower(c) && !isDigit(c) && strings.IndexByte("_-.*", c) < 0 {
			break
		}
	}
	return p.s[start:p.i], true
}

// bareItem parses a bare item.
func (p *sfParser) bareItem() (sfItem, bool) {
	if !p.more() {
		return sfItem{}, false
	}
	switch c := p.s[p.i]; {
	case c == '-' || isDigit(c):
		return p.number()
	case c == '"':
		return p.str()
	case c == '*' || isAlpha(c):
		return p.token(), true
	case c == ':':
		return p.bytes()
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return sfItem{typ: sfBoolean, n: int64(p.s[p.i-1] - '0')}, true
		}
	}
	return sfItem{}, false
}

// number parses an integer (at most 15 digits) or a decimal (at most 12
// digits, a point and 1 to 3 digits).
func (p *sfParser) number() (sfItem, bool) {
	neg := p.s[p.i] == '-'
	if neg {
		p.i++
	}
	var whole, frac int64
	digits, fracDigits, point := 0, 0, false
	for ; p.more(); p.i++ {
		c := p.s[p.i]
		if c == '.' && !point && digits > 0 {
			if digits > 12 {
				return sfItem{}, false
			}
			point = true
			continue
		}
		if !isDigit(c) {
			break
		}
		if point {
			frac = frac*10 + int64(c-'0')
			fracDigits++
		} else {
			whole = whole*10 + int64(c-'0')
			digits++
		}
		if digits > 15 || fracDigits > 3 {
			return sfItem{}, false
		}
	}
	if digits == 0 || (point && fracDigits == 0) {
		return sfItem{}, false
	}
	it := sfItem{typ: sfInteger, n: whole}
	if point {
		for range 3 - fracDigits {
			frac *= 10
		}
		it = sfItem{typ: sfDecimal, n: whole*1000 + frac}
	}
	if neg {
		it.n = -it.n
	}
	return it, true
}

// str parses a string: printable ASCII between quotes, with \" and \\.
func (p *sfParser) str() (sfItem, bool) {
	var b strings.Builder
	for p.i++; p.more(); p.i++ {
		switch c := p.s[p.i]; {
		case c == '\\':
			p.i++
			if !p.more() || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return sfItem{}, false
			}
			b.WriteByte(p.s[p.i])
		case c == '"':
			p.i++
			return sfItem{typ: sfString, s: b.String()}, true
		case c < 0x20 || c > 0x7e:
			return sfItem{}, false
		default:
			b.WriteByte(c)
		}
	}
	return sfItem{}, false // no closing quote
}

// token parses a token: ALPHA or "*", then tchar, ":" or "/".
func (p *sfParser) token() sfItem {
	start := p.i
	for p.i++; p.more() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/'); p.i++ {
	}
	return sfItem{typ: sfToken, s: p.s[start:p.i]}
}

// bytes parses a byte sequence: base64 between colons, kept as sent.
func (p *sfParser) bytes() (sfItem, bool) {
	start := p.i + 1
	for p.i++; p.more(); p.i++ {
		c := p.s[p.i]
		if c == ':' {
			p.i++
			return sfItem{typ: sfBytes, s: p.s[start : p.i-1]}, true
		}
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '/' && c != '=' {
			return sfItem{}, false
		}
	}
	return sfItem{}, false
}

func isLower(c byte) bool { return 'a' <= c && c <= 'z' }
func isAlpha(c byte) bool { return isLower(c) || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isTchar reports whether c is a tchar of RFC 9110 section 5.6.2.
func isTchar(c byte) bool {
	return isAlpha(c) || isDigit(c) || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
