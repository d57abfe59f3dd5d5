package input

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// DefaultMaxRequestBody is the largest body a JSON request line may carry
// unless the Scanner is told another (--max-request-body).
const DefaultMaxRequestBody = 1 << 20

// MaxMetaBytes is the most bytes a JSON request line's "meta" may take,
// encoded compactly.
const MaxMetaBytes = 4 << 10

// jsonLineRoom is what a JSON request line may hold beyond its body (see
// maxJSONLine): the URL, the header, id and meta.
const jsonLineRoom = 64 << 10

// maxJSONLine is the longest JSON request line read whole when bodies may
// be maxBody bytes long: twice the body, room for its base64 form or for
// escapes in its text, and jsonLineRoom for the rest. A longer line is
// read to its end without being held, and is invalid.
func maxJSONLine(maxBody int64) int {
	return int(min(2*maxBody+jsonLineRoom, 1<<30))
}

// Request is what a JSON request line asks for beyond its URL. Every field
// may be empty: the run's method, its header, no body. It is not changed
// once parsed, and may be shared by every attempt of its line.
type Request struct {
	Method string      // "" for the run's (-X)
	Header http.Header // canonical names; each replaces the run's header of that name
	Body   []byte      // sent with every attempt, and again on a 307 or 308; nil for none
	ID     []byte      // "id" as compact JSON (a string or a number), or nil
	Meta   []byte      // "meta" as compact JSON, or nil
}

// Size is about how many bytes r holds: its body and header, for the
// engine's bound on the lines it reads ahead of its workers.
func (r *Request) Size() int {
	if r == nil {
		return 0
	}
	n := len(r.Body) + len(r.ID) + len(r.Meta) + len(r.Method)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	return n
}

// jsonFields are the names a JSON request line may hold.
var jsonFields = []string{"url", "method", "header", "body", "body_base64", "id", "meta"}

// parseJSONLine fills j from s, a JSON request line (trimmed), with bodies
// of at most maxBody bytes: its URL, or why it is invalid. A message names
// the field at fault and never quotes a header value or the body. The URL
// shown, the id and the meta are kept for the record even when the line
// is invalid, when they themselves are valid.
func parseJSONLine(j *Line, s []byte, maxBody int64) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(s, &fields); err != nil {
		j.Invalid = "JSON request line: " + jsonSyntax(err)
		return
	}
	r := &Request{}
	j.Request = r
	u, host, why := j.target(fields)
	if raw, ok := fields["id"]; ok && !isNull(raw) {
		if raw[0] != '"' && raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
			j.Invalid = `JSON request line: "id" is not a string or a number`
			return
		}
		r.ID = compact(raw)
	}
	if raw, ok := fields["meta"]; ok {
		m := compact(raw)
		if len(m) > MaxMetaBytes {
			j.Invalid = fmt.Sprintf(`JSON request line: "meta" is longer than %d bytes`, MaxMetaBytes)
			return
		}
		r.Meta = m
	}
	for k := range fields {
		if !slices.Contains(jsonFields, k) {
			j.Invalid = "JSON request line: unknown field " + quoteName(k) +
				" (want url, method, header, body, body_base64, id, meta)"
			return
		}
	}
	if why == "" {
		why = r.parse(fields, maxBody)
	}
	if why != "" {
		j.Invalid = "JSON request line: " + why
		return
	}
	j.URL, j.Host = u, host
}

// target reads the "url" of fields: the URL to fetch and its host:port,
// or why there is none. It sets j.Shown, also for a URL that is not
// fetched: user information removed, as for a plain line.
func (j *Line) target(fields map[string]json.RawMessage) (u *url.URL, host, why string) {
	raw, ok := fields["url"]
	var s string
	switch {
	case !ok || isNull(raw):
		return nil, "", `"url" is missing`
	case json.Unmarshal(raw, &s) != nil:
		return nil, "", `"url" is not a string`
	}
	s = strings.TrimSpace(s)
	if len(s) > MaxLineBytes {
		j.Shown = longShown(s[:keptOfLong], strings.Contains(s[keptOfLong:], "@"))
		return nil, "", fmt.Sprintf(`"url" is longer than %d bytes`, MaxLineBytes)
	}
	u, host, why = ParseTarget(s)
	if why != "" {
		j.Shown = redactLine(s)
		return nil, "", `"url": ` + why
	}
	shown := *u
	shown.User = nil
	j.Shown = shown.String()
	return u, host, ""
}

// parse reads the method, header and body of fields into r, or says what
// is wrong with them.
func (r *Request) parse(fields map[string]json.RawMessage, maxBody int64) string {
	if raw, ok := fields["method"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &r.Method) != nil {
			return `"method" is not a string`
		}
		if !IsToken(r.Method) {
			r.Method = ""
			return `"method" is not a method name such as GET`
		}
	}
	if raw, ok := fields["header"]; ok && !isNull(raw) {
		if why := r.parseHeader(raw); why != "" {
			return why
		}
	}
	text, hasText := fields["body"]
	b64, hasB64 := fields["body_base64"]
	hasText, hasB64 = hasText && !isNull(text), hasB64 && !isNull(b64)
	switch {
	case hasText && hasB64:
		return `"body" and "body_base64" are both given (want one)`
	case hasText:
		var s string
		if json.Unmarshal(text, &s) != nil {
			return `"body" is not a string`
		}
		if int64(len(s)) > maxBody {
			return fmt.Sprintf(`"body" is longer than %d bytes (--max-request-body)`, maxBody)
		}
		if s != "" {
			r.Body = []byte(s)
		}
	case hasB64:
		var s string
		if json.Unmarshal(b64, &s) != nil {
			return `"body_base64" is not a string`
		}
		if int64(base64.StdEncoding.DecodedLen(len(s))) > maxBody+2 {
			return fmt.Sprintf(`"body_base64" is longer than %d bytes decoded (--max-request-body)`, maxBody)
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return `"body_base64" is not standard base64`
		}
		if int64(len(b)) > maxBody {
			return fmt.Sprintf(`"body_base64" is longer than %d bytes decoded (--max-request-body)`, maxBody)
		}
		if len(b) > 0 {
			r.Body = b
		}
	}
	return ""
}

// parseHeader reads a JSON request line's "header" into r.Header.
func (r *Request) parseHeader(raw json.RawMessage) string {
	var fields map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &fields) != nil {
		return `"header" is not an object`
	}
	r.Header = make(http.Header, len(fields))
	for name, v := range fields {
		if !IsToken(name) {
			return `"header" has a name that is not a header name`
		}
		key := http.CanonicalHeaderKey(name)
		switch key {
		case "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			return fmt.Sprintf(`"header" %s: fetch sets it (not a request line's to give)`, key)
		}
		var vs []string
		if len(v) > 0 && v[0] == '[' {
			if json.Unmarshal(v, &vs) != nil {
				return fmt.Sprintf(`"header" %s: value is not a string or a list of strings`, key)
			}
		} else {
			var s string
			if json.Unmarshal(v, &s) != nil {
				return fmt.Sprintf(`"header" %s: value is not a string or a list of strings`, key)
			}
			vs = []string{s}
		}
		for _, s := range vs {
			if !validHeaderValue(s) {
				return fmt.Sprintf(`"header" %s: value holds a line break or another control character`, key)
			}
		}
		// Two names of one canonical form: their values together, in no
		// order JSON promises.
		r.Header[key] = slices.Clip(append(r.Header[key], vs...))
	}
	return ""
}

// IsToken reports whether s is an HTTP token (RFC 9110), the syntax of a
// method and of a header name.
func IsToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return s != ""
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range []byte("!#$%&'*+-.^_`|~") {
		t[c] = true
	}
	return t
}()

// validHeaderValue reports whether v may be sent as a header value: no
// control character but a tab (RFC 9110's field-value).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// isNull reports whether raw is JSON's null.
func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// compact is raw, valid JSON, compacted into a new slice.
func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	json.Compact(&b, raw) // raw was checked by Unmarshal
	return b.Bytes()
}

// quoteName quotes a field name for a message, at most 32 bytes of it.
func quoteName(k string) string {
	if len(k) > 32 {
		k = k[:32] + "..."
	}
	return strconv.Quote(k)
}

// jsonSyntax says where a line that is not JSON went wrong, without
// quoting it.
func jsonSyntax(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.As(err, &te):
		return "not a JSON object"
	}
	return "not valid JSON"
}

// inShard reports whether the line kept (see readLine) is in the
// Scanner's shard. A JSON request line is known by its "url" as written
// (trimmed), as a plain line is by its text, so that a line whose method,
// header or body changes stays in its shard; a JSON line without a string
// "url" by its text.
func (s *Scanner) inShard(kept []byte, long bool, first int) bool {
	if s.shard.N <= 1 {
		return true
	}
	text := kept
	if first == '{' && !long {
		var v struct {
			URL json.RawMessage `json:"url"`
		}
		var u string
		if json.Unmarshal(kept, &v) == nil && json.Unmarshal(v.URL, &u) == nil {
			text = []byte(u)
		}
	}
	return s.shard.takes(s.in.Name, s.n, text)
}
