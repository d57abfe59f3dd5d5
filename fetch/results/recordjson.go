package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// errBadFloat is the error of a record holding NaN or an infinity, which
// JSON cannot carry (encoding/json fails on them too).
var errBadFloat = errors.New("unsupported value: NaN or an infinity")

// appendRecord appends r as one JSON object, byte for byte what
// encoding/json's Encoder with SetEscapeHTML(false) writes (without its
// newline): the fields in Record's order, omitempty honoured, strings
// escaped as it escapes them and numbers formatted as it formats them. It
// is the writer's hot path: it allocates nothing. TestAppendRecord checks
// it against encoding/json.
func appendRecord(b []byte, r *Record) ([]byte, error) {
	var err error
	b = append(b, `{"url":`...)
	b = appendJSONString(b, r.URL)
	b = append(b, `,"input":`...)
	b = appendJSONString(b, r.Input)
	b = append(b, `,"line":`...)
	b = strconv.AppendInt(b, int64(r.Line), 10)
	b = append(b, `,"ok":`...)
	b = strconv.AppendBool(b, r.OK)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	if r.Proxy != "" {
		b = append(b, `,"proxy":`...)
		b = appendJSONString(b, r.Proxy)
	}
	if r.Pool != "" {
		b = append(b, `,"pool":`...)
		b = appendJSONString(b, r.Pool)
	}
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, r.Bytes, 10)
	if b, err = appendOutcome(b, r.ElapsedMS, &r.Phases, r.Error); err != nil {
		return b, err
	}
	b = append(b, `,"tries":`...)
	if r.Tries == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Tries {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendTry(b, &r.Tries[i]); err != nil {
				return b, err
			}
		}
		b = append(b, ']')
	}
	if r.File != "" {
		b = append(b, `,"file":`...)
		b = appendJSONString(b, r.File)
	}
	if len(r.ID) > 0 {
		b = append(b, `,"id":`...)
		if b, err = appendRaw(b, r.ID); err != nil {
			return b, err
		}
	}
	if len(r.Meta) > 0 {
		b = append(b, `,"meta":`...)
		if b, err = appendRaw(b, r.Meta); err != nil {
			return b, err
		}
	}
	if b, err = appendFacts(b, &r.Facts); err != nil {
		return b, err
	}
	if ps := r.ProxyStatus; ps != nil {
		b = append(b, `,"proxy_status":{"proxy":`...)
		b = appendJSONString(b, ps.Proxy)
		b = appendOptString(b, `,"error":`, ps.Error)
		b = appendOptString(b, `,"details":`, ps.Details)
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendFacts appends the facts that are known, each with its leading
// comma, in Facts' order.
func appendFacts(b []byte, f *Facts) ([]byte, error) {
	b = appendOptString(b, `,"final_url":`, f.FinalURL)
	if len(f.Redirects) > 0 {
		b = append(b, `,"redirects":[`...)
		for i, r := range f.Redirects {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"status":`...)
			b = strconv.AppendInt(b, int64(r.Status), 10)
			b = append(b, `,"url":`...)
			b = appendJSONString(b, r.URL)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendOptString(b, `,"proto":`, f.Proto)
	b = appendOptString(b, `,"remote_addr":`, f.RemoteAddr)
	b = appendOptString(b, `,"content_type":`, f.ContentType)
	if f.ContentLength != "" {
		if !IsDecimal(string(f.ContentLength)) {
			return b, fmt.Errorf("content_length %q: not a decimal number", string(f.ContentLength))
		}
		b = append(b, `,"content_length":`...)
		b = append(b, f.ContentLength...)
	}
	if t := f.TLS; t != nil {
		b = append(b, `,"tls":{"version":`...)
		b = appendJSONString(b, t.Version)
		b = append(b, `,"cipher":`...)
		b = appendJSONString(b, t.Cipher)
		b = appendOptString(b, `,"alpn":`, t.ALPN)
		b = appendOptString(b, `,"server_name":`, t.ServerName)
		b = appendOptString(b, `,"cert_not_after":`, t.CertNotAfter)
		b = appendOptString(b, `,"cert_issuer":`, t.CertIssuer)
		b = append(b, '}')
	}
	if len(f.Headers) > 0 {
		b = append(b, `,"headers":`...)
		b = f.Headers.appendJSON(b)
	}
	b = appendOptString(b, `,"sha256":`, f.SHA256)
	return b, nil
}

// appendJSON appends h as encoding/json writes a map: names sorted, a
// nil list as null.
func (h Headers) appendJSON(b []byte) []byte {
	b = append(b, '{')
	for i, k := range slices.Sorted(maps.Keys(h)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		vs := h[k]
		if vs == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vs {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// IsDecimal reports whether s can be a record's content_length: a JSON
// number without sign, fraction or exponent (digits, no leading zero).
func IsDecimal(s string) bool {
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

// appendOptString appends key and s when s is not empty (omitempty).
func appendOptString(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, key...)
	return appendJSONString(b, s)
}

// appendRaw appends raw JSON compacted, as encoding/json writes a
// json.RawMessage; it fails on raw that is not JSON, as encoding/json does.
func appendRaw(b []byte, raw []byte) ([]byte, error) {
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return b, err
	}
	return buf.Bytes(), nil
}

func appendTry(b []byte, t *Try) ([]byte, error) {
	b = append(b, '{')
	if t.Proxy != "" {
		b = append(b, `"proxy":`...)
		b = appendJSONString(b, t.Proxy)
		b = append(b, ',')
	}
	if t.Pool != "" {
		b = append(b, `"pool":`...)
		b = appendJSONString(b, t.Pool)
		b = append(b, ',')
	}
	b = append(b, `"status":`...)
	b = strconv.AppendInt(b, int64(t.Status), 10)
	b, err := appendOutcome(b, t.ElapsedMS, &t.Phases, t.Error)
	if err != nil {
		return b, err
	}
	return append(b, '}'), nil
}

// appendOutcome appends the fields a record and a try share, in their
// order: elapsed_ms, phases, error.
func appendOutcome(b []byte, elapsedMS float64, phases *PhaseTimes, e *Error) ([]byte, error) {
	b = append(b, `,"elapsed_ms":`...)
	b, err := appendJSONFloat(b, elapsedMS)
	if err != nil {
		return b, err
	}
	b = append(b, `,"phases":`...)
	if b, err = phases.appendJSON(b); err != nil {
		return b, err
	}
	b = append(b, `,"error":`...)
	return appendError(b, e), nil
}

func appendError(b []byte, e *Error) []byte {
	if e == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"phase":`...)
	b = appendJSONString(b, e.Phase)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, e.Kind)
	b = append(b, `,"message":`...)
	b = appendJSONString(b, e.Message)
	return append(b, '}')
}

// appendJSON appends the phases as MarshalJSON writes them, each in 'f'
// format whatever its size.
func (p *PhaseTimes) appendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	first := true
	for i, seen := range p.seen {
		if !seen {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, Phases[i]...) // a phase's name needs no escaping
		b = append(b, '"', ':')
		v := p.ms[i]
		if h, ok := appendHundredths(b, v); ok {
			b = h
			continue
		}
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return b, errBadFloat
		}
		b = strconv.AppendFloat(b, v, 'f', -1, 64)
	}
	return append(b, '}'), nil
}

// PhaseIndex is the position of phase k in Phases (IndexInput to
// IndexBody), or -1 when k is not a phase.
func PhaseIndex(k string) int {
	switch k {
	case PhaseInput:
		return IndexInput
	case PhaseQueue:
		return IndexQueue
	case PhaseDNS:
		return IndexDNS
	case PhaseConnect:
		return IndexConnect
	case PhaseProxy:
		return IndexProxy
	case PhaseTLS:
		return IndexTLS
	case PhaseRequest:
		return IndexRequest
	case PhaseHeaders:
		return IndexHeaders
	case PhaseBody:
		return IndexBody
	}
	return noPhase
}

// appendJSONFloat formats f as encoding/json formats a float64.
func appendJSONFloat(b []byte, f float64) ([]byte, error) {
	if b, ok := appendHundredths(b, f); ok {
		return b, nil
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, errBadFloat
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// clean up e-09 to e-9, as encoding/json does
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendHundredths appends f as strconv.AppendFloat(b, f, 'f', -1, 64)
// does when f is a whole number of hundredths from 0 up to 1e13, as every
// time millis makes is, and reports whether it was. Such a float is the
// one nearest to k/100 for a k below 1e15, and the shortest decimal that
// gives it back is k/100 itself, trailing zeros cut: formatting k as an
// integer costs a fifth of the general shortest-decimal search.
func appendHundredths(b []byte, f float64) ([]byte, bool) {
	if !(f >= 0 && f < 1e13) || math.Signbit(f) {
		return b, false
	}
	k := math.Round(f * 100)
	if k/100 != f {
		return b, false
	}
	n := int64(k)
	b = strconv.AppendInt(b, n/100, 10)
	if r := n % 100; r != 0 {
		b = append(b, '.', byte('0'+r/10))
		if r%10 != 0 {
			b = append(b, byte('0'+r%10))
		}
	}
	return b, true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes a string
// without HTML escaping: `"` and `\` escaped, control characters as \b \f
// \n \r \t or \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
