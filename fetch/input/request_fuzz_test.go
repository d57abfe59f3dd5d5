package input

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzRequestLine builds a JSON request line from its parts, the header
// value and the body marked (hdrMark, bodyMark), and reads it back (with
// bodies of at most 64 bytes). An invalid line's message and shown URL
// never hold a marker; a valid line gives back what it was made of: the
// URL as ParseTarget reads it, the method, the header under its canonical
// name, the body, id and meta. With raw set the parts are laid out as
// given, not encoded, so that any text starting with "{" is read too: it
// must give one line, either valid or invalid.
func FuzzRequestLine(f *testing.F) {
	f.Add("http://a.example/x", "POST", "X-Tag", "v", []byte("body"), false, `"id-1"`, `{"k":[1,2]}`, false)
	f.Add("https://u:p@a.example:8443/x?q=1", "", "content-type", "a/b", []byte{0, 1, 0xff}, true, `17`, `null`, false)
	f.Add("http://a/", "GET /", "Bad Name", "\r\nX: 1", []byte(strings.Repeat("x", 70)), false, `true`, `[`, false)
	f.Add("ftp://a/", "M", "Content-Length", "\x00", []byte{}, true, ``, strings.Repeat("1", 5000), false)
	f.Add(`http://a/","body":"`, `PUT`, `X`, `","body":"`, []byte(`\"`), false, `"`, `}`, true)
	f.Add(`http://a/`, `PUT`, `X`, `v`, []byte(`{}`), false, `1`, `{}`, true)
	f.Fuzz(func(t *testing.T, u, method, name, value string, body []byte, b64 bool, id, meta string, raw bool) {
		value = hdrMark + value
		body = append([]byte(bodyMark), body...)
		line := requestLine(u, method, name, value, body, b64, id, meta, raw)
		if bytes.ContainsAny(line, "\r\n") {
			return // not one line
		}
		ls := linesOf(t, string(line)+"\n", 64)
		if len(ls) != 1 {
			t.Fatalf("%d lines of %q", len(ls), line)
		}
		l := ls[0]
		if (l.URL == nil) == (l.Invalid == "") {
			t.Fatalf("%q: url %v and invalid %q: want exactly one", line, l.URL, l.Invalid)
		}
		// A marker the other parts hold by chance may be shown.
		others := u + method + name + id + meta
		for _, m := range []string{hdrMark, bodyMark} {
			if !strings.Contains(others, m) && (strings.Contains(l.Invalid, m) || strings.Contains(l.Shown, m)) {
				t.Fatalf("%q: message %q, shown %q: %s in it", line, l.Invalid, l.Shown, m)
			}
		}
		if l.Invalid != "" || raw {
			return
		}
		want, _, why := ParseTarget(strings.TrimSpace(jsonRoundTrip(u)))
		if why != "" || l.URL.String() != want.String() {
			t.Fatalf("%q: url %v, want %v (%s)", line, l.URL, want, why)
		}
		r := l.Request
		if r.Method != jsonRoundTrip(method) {
			t.Errorf("method %q, want %q", r.Method, method)
		}
		if got := r.Header.Values(name); len(got) != 1 || got[0] != jsonRoundTrip(value) {
			t.Errorf("header %q = %q, want [%q]", http.CanonicalHeaderKey(name), got, value)
		}
		wantBody := body
		if !b64 {
			wantBody = []byte(jsonRoundTrip(string(body)))
		}
		if !bytes.Equal(r.Body, wantBody) {
			t.Errorf("body %q, want %q", r.Body, wantBody)
		}
		for _, p := range []struct {
			name      string
			got, want []byte
		}{{"id", r.ID, compactOrNil(id, true)}, {"meta", r.Meta, compactOrNil(meta, false)}} {
			if !bytes.Equal(p.got, p.want) {
				t.Errorf("%s %s, want %s", p.name, p.got, p.want)
			}
		}
	})
}

// requestLine lays out a JSON request line: each part JSON-encoded, or
// with raw as given between quotes; an empty method, id or meta left out.
func requestLine(u, method, name, value string, body []byte, b64 bool, id, meta string, raw bool) []byte {
	str := func(s string) string {
		if raw {
			return `"` + s + `"`
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	var b strings.Builder
	b.WriteString(`{"url":` + str(u))
	if method != "" {
		b.WriteString(`,"method":` + str(method))
	}
	b.WriteString(`,"header":{` + str(name) + `:` + str(value) + `}`)
	if b64 {
		b.WriteString(`,"body_base64":` + str(base64.StdEncoding.EncodeToString(body)))
	} else {
		b.WriteString(`,"body":` + str(string(body)))
	}
	if id != "" {
		b.WriteString(`,"id":` + id)
	}
	if meta != "" {
		b.WriteString(`,"meta":` + meta)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// jsonRoundTrip is s as JSON carries it: invalid UTF-8 replaced.
func jsonRoundTrip(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// compactOrNil is raw compacted, or nil when it is empty (or null, with
// nullIsNone: an id of null is none, a meta of null is copied).
func compactOrNil(raw string, nullIsNone bool) []byte {
	var b bytes.Buffer
	if raw == "" || json.Compact(&b, []byte(raw)) != nil || nullIsNone && b.String() == "null" {
		return nil
	}
	return b.Bytes()
}
