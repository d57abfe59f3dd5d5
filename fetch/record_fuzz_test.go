package fetch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// FuzzRecordSecrets runs fuzzed URL lines through the whole engine, from
// the input line to the JSON record, and checks that no password given in
// the line ever appears in the record: not in the URL shown, not in any
// message. Every request goes to a loopback proxy port that is closed, so
// nothing leaves the machine and each attempt fails at once.
//
// A password counts as given when the line holds it as user information:
// the line does not parse (then everything before its last "@" could be
// user information), or it parses with user information. A line such as
// "http://u:123/x@h/" parses as host u, port 123, path /x@h/: it is fetched
// as such, and its record shows what was fetched.
func FuzzRecordSecrets(f *testing.F) {
	closed := closedPort(f)
	proxy, err := url.Parse("http://" + closed)
	if err != nil {
		f.Fatal(err)
	}
	cfg := fetch.DefaultConfig()
	cfg.Retries = 0
	cfg.ProxyMaxFailures = 0 // every line reaches the proxy
	cfg.Proxies = []proxies.Proxy{{Scheme: proxy.Scheme, Host: proxy.Host, User: proxy.User, ID: proxies.Identity(proxy), From: "fuzz", Line: 1}}
	e, err := fetch.New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })

	for _, seed := range [][3]string{
		{"http://", "S3CRETpw", "@127.0.0.1:1/"},
		{"http://user:", "S3CRET/x", "@127.0.0.1:1/"},
		{"https://u:", "p?w#x", "@h:99999/"},
		{"//u:", "S3CRETpw", "@h/"},
		{"u:", "S3CRETpw", "@h/"},
		{"http://u:", "S3CRETpw", "@[::1/x"},
		{"http://u:", "S3CRETpw", "@127.0.0.2:9/p"}, // valid: sent to the proxy
		{"http://u:", "S3CRET%zz", "@h/"},
		{"http://u:", "S3CRET\x00", "@h/"},
		{"\ufeffhttp://u:", "S3CRET pw", "@h/ x"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, before, password, after string) {
		if len(password) < 4 || strings.ContainsAny(password, "\r\n") || inOtherText(password, before+after) {
			return // too short to tell from other text, or not one line
		}
		line := before + password + after
		if strings.ContainsAny(line, "\r\n") || len(line) > input.MaxLineBytes {
			return
		}
		trimmed := strings.TrimSpace(strings.TrimPrefix(line, "\ufeff"))
		if trimmed == "" || strings.HasPrefix(trimmed, "#") || !strings.Contains(trimmed, password) {
			return // skipped, or the password was trimmed away
		}
		if !strings.Contains(trimmed[strings.Index(trimmed, password)+len(password):], "@") {
			return // no "@" after it: not user information by any reading
		}
		if u, err := url.Parse(trimmed); err == nil && u.Host != "" && !inUserinfo(u, password) {
			return // a URL whose user information does not hold it (see above)
		}
		var out bytes.Buffer
		w := results.NewJSONLWriter(&out)
		if _, err := e.Run(context.Background(), []input.Source{{Name: "fuzz.txt", R: strings.NewReader(line + "\n")}}, w); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.Len() == 0 {
			t.Fatalf("no record for %q", line)
		}
		var rec results.Record
		if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
			t.Fatalf("record %q: %v", out.Bytes(), err)
		}
		texts := []string{rec.URL, rec.Proxy}
		if rec.Error != nil {
			texts = append(texts, rec.Error.Message)
		}
		for _, try := range rec.Tries {
			if try.Error != nil {
				texts = append(texts, try.Error.Message)
			}
		}
		for _, text := range texts {
			for _, form := range recordForms(password) {
				if strings.Contains(text, form) {
					t.Fatalf("line %q: the record holds the password (as %q) in %q", line, form, text)
				}
			}
		}
	})
}

// inOtherText reports whether the rest of the line, as it is or as a record
// may write it, holds a form of pw by itself: percent-encoding "\xe0000" as
// "%E0000" makes "0000" appear where it was not given.
func inOtherText(pw, rest string) bool {
	for _, text := range append([]string{rest, url.PathEscape(rest), url.QueryEscape(rest)}, recordForms(rest)...) {
		for _, form := range recordForms(pw) {
			if strings.Contains(text, form) {
				return true
			}
		}
	}
	return strings.Contains(rest, pw)
}

// inUserinfo reports whether pw is part of u's user information.
func inUserinfo(u *url.URL, pw string) bool {
	if u.User == nil {
		return false
	}
	p, _ := u.User.Password()
	return strings.Contains(u.User.Username()+":"+p, pw)
}

// recordForms are the ways a password may be written in a JSON record: as
// it is, percent-encoded, and JSON-escaped.
func recordForms(pw string) []string {
	forms := []string{pw, url.PathEscape(pw), url.QueryEscape(pw), url.UserPassword("u", pw).String()[2:]}
	if b, err := json.Marshal(pw); err == nil {
		forms = append(forms, strings.Trim(string(b), `"`))
	}
	var keep []string
	for _, f := range forms {
		if len(f) >= 4 {
			keep = append(keep, f)
		}
	}
	return keep
}

// closedPort returns a loopback address on which nothing listens.
func closedPort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
