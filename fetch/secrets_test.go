package fetch_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

const (
	proxyUser  = "alice-proxyuser"
	proxyPass  = "pr0xy-s3cret"
	targetUser = "bob-targetuser"
	targetPass = "t4rget-s3cret"
)

// secretForms are the ways the credentials could show up in text.
func secretForms() []string {
	var forms []string
	for _, s := range []string{proxyUser, proxyPass, targetUser, targetPass} {
		forms = append(forms, s, url.QueryEscape(s))
	}
	return append(forms,
		base64.StdEncoding.EncodeToString([]byte(proxyUser+":"+proxyPass)),
		base64.StdEncoding.EncodeToString([]byte(targetUser+":"+targetPass)))
}

func noSecrets(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range secretForms() {
		if strings.Contains(text, s) {
			t.Errorf("%s shows %q:\n%s", what, s, text)
		}
	}
}

// TestSecrets fetches URLs with user information through credentialed
// proxies of every kind, with the right and the wrong password, and checks
// that no user name or password shows in the records, the report or the
// names of saved files, and that the proxy's credentials never reach the
// target.
func TestSecrets(t *testing.T) {
	plain := startTarget(t, fetchtest.TargetOptions{})
	secure := startTarget(t, fetchtest.TargetOptions{TLS: true})
	withCreds := func(raw, user, pass string) string {
		u, _ := url.Parse(raw)
		u.User = url.UserPassword(user, pass)
		return u.String()
	}
	tp, ts := withCreds(plain.URL, targetUser, targetPass), withCreds(secure.URL, targetUser, targetPass)
	lines := []string{
		tp + "/echo",
		ts + "/echo",
		tp + "/fail?status=503",
		tp + "/big?size=5000", // too_large: a body error
		withCreds("http://127.0.0.1:1", targetUser, targetPass) + "/x", // refused
		"ftp://" + targetUser + ":" + targetPass + "@127.0.0.1/x",      // invalid
		"//" + targetUser + ":" + targetPass + "@127.0.0.1/x",          // invalid, scheme-relative
		"http://" + targetUser + ":" + targetPass + "@127.0.0.1:bad/x", // unparsable
	}
	type proxyCase struct {
		name, kind string
		tls        bool
		password   string // what the client sends; the proxy wants proxyPass
	}
	cases := []proxyCase{
		{name: "direct"},
		{name: "http right password", kind: "http", password: proxyPass},
		{name: "http wrong password", kind: "http", password: "wr0ng-pass"},
		{name: "https right password", kind: "http", tls: true, password: proxyPass},
		{name: "https wrong password", kind: "http", tls: true, password: "wr0ng-pass"},
		{name: "socks5 right password", kind: "socks5", password: proxyPass},
		{name: "socks5 wrong password", kind: "socks5", password: "wr0ng-pass"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := fetch.DefaultConfig()
			cfg.Retries = 0
			cfg.MaxBody = 1000
			cfg.SaveDir = t.TempDir()
			roots := x509.NewCertPool()
			roots.AppendCertsFromPEM(secure.CertPEM)
			if c.kind != "" {
				px := startProxy(t, c.kind, fetchtest.ProxyOptions{User: proxyUser, Password: proxyPass, TLS: c.tls})
				roots.AppendCertsFromPEM(px.CertPEM)
				cfg.Proxies = []proxies.Proxy{proxyOf(t, withCreds(px.URL, proxyUser, c.password), nil)}
			}
			cfg.RootCAs = roots
			e, err := fetch.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			jw := results.NewJSONLWriter(&out)
			rep, err := e.Run(context.Background(), []input.Source{{Name: "urls.txt", R: strings.NewReader(strings.Join(lines, "\n"))}}, jw)
			stopped := errors.Is(err, limits.ErrNoUsableProxy) // a wrong password: the proxy is rejected
			if err != nil && !stopped {
				t.Fatal(err)
			}
			if err != nil {
				noSecrets(t, "the run's error", err.Error())
			}
			if err := jw.Flush(); err != nil {
				t.Fatal(err)
			}
			repJSON, err := json.Marshal(rep)
			if err != nil {
				t.Fatal(err)
			}
			noSecrets(t, "records", out.String())
			noSecrets(t, "report", string(repJSON))
			if n := strings.Count(out.String(), "\n"); n != len(lines) && !(stopped && n > 0 && n <= len(lines)) {
				t.Errorf("%d records for %d lines", strings.Count(out.String(), "\n"), len(lines))
			}
			entries, err := os.ReadDir(cfg.SaveDir)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, en := range entries {
				names = append(names, en.Name())
			}
			noSecrets(t, "saved file names", strings.Join(names, "\n"))

			saved := 0
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var r results.Record
				if err := json.Unmarshal([]byte(line), &r); err != nil {
					t.Fatal(err)
				}
				if r.Line <= 2 && (c.password == proxyPass || c.kind == "") && !r.OK {
					t.Errorf("line %d: %+v", r.Line, r.Error)
				}
				if r.File == "" {
					continue
				}
				saved++
				if !strings.HasSuffix(r.URL, "/echo") {
					continue
				}
				b, err := os.ReadFile(r.File)
				if err != nil {
					t.Fatal(err)
				}
				var echo fetchtest.Echo
				if err := json.Unmarshal(b, &echo); err != nil {
					t.Fatal(err)
				}
				if v := echo.Header.Get("Proxy-Authorization"); v != "" {
					t.Errorf("line %d: the target got Proxy-Authorization %q", r.Line, v)
				}
				// The target's own credentials are for the target (as
				// curl sends them); the proxy's never are.
				for _, s := range []string{proxyUser, proxyPass, base64.StdEncoding.EncodeToString([]byte(proxyUser + ":" + proxyPass))} {
					if bytes.Contains(b, []byte(s)) {
						t.Errorf("line %d: the target saw %q: %s", r.Line, s, b)
					}
				}
			}
			if (c.password == proxyPass || c.kind == "") && saved != 2 {
				t.Errorf("%d files saved, want 2", saved)
			}
		})
	}
}

// TestAuthorizationNotCarriedToAnotherHost sends -H Authorization (and a
// Cookie) and URL credentials to a page that redirects to another host:
// the other host (another name, or only another port) gets none of them, as
// curl does without --location-trusted. A redirect within the same host
// keeps the header.
func TestAuthorizationNotCarriedToAnotherHost(t *testing.T) {
	t1 := startTarget(t, fetchtest.TargetOptions{})
	t2 := startTarget(t, fetchtest.TargetOptions{})
	_, port2, _ := strings.Cut(strings.TrimPrefix(t2.URL, "http://"), ":")
	cases := []struct {
		name, line string
		keep       bool
	}{
		{"same host", t1.URL + "/redirect?to=" + url.QueryEscape(t1.URL+"/echo"), true},
		{"relative", t1.URL + "/redirect?to=/echo", true},
		{"other port", t1.URL + "/redirect?to=" + url.QueryEscape(t2.URL+"/echo"), false},
		{"other name", t1.URL + "/redirect?to=" + url.QueryEscape("http://localhost:"+port2+"/echo"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, mode := range []string{"header", "userinfo"} {
				cfg := fetch.DefaultConfig()
				cfg.Retries = 0
				cfg.Insecure = true
				cfg.SaveDir = t.TempDir()
				line := c.line
				if mode == "header" {
					cfg.Header = http.Header{"Authorization": {"Bearer t0ken-xyz"}, "Cookie": {"session=c00kie"}}
				} else {
					line = strings.Replace(line, "http://", "http://"+targetUser+":"+targetPass+"@", 1)
				}
				recs, _ := run(t, cfg, line)
				r := recs[1]
				if !r.OK {
					t.Fatalf("%s: %+v", mode, r.Error)
				}
				b, err := os.ReadFile(r.File)
				if err != nil {
					t.Fatal(err)
				}
				var echo fetchtest.Echo
				if err := json.Unmarshal(b, &echo); err != nil {
					t.Fatal(err)
				}
				got := echo.Header.Get("Authorization") != ""
				// URL credentials go with the URL: a relative redirect
				// keeps them, an absolute one to the same host need not.
				if got != c.keep && (mode == "header" || got) {
					t.Errorf("%s: Authorization at %s: %q, want kept=%v", mode, echo.Host, echo.Header.Get("Authorization"), c.keep)
				}
				if mode == "header" && (echo.Header.Get("Cookie") != "") != c.keep {
					t.Errorf("Cookie at %s: %q, want kept=%v", echo.Host, echo.Header.Get("Cookie"), c.keep)
				}
				if filepath.Dir(r.File) != cfg.SaveDir {
					t.Errorf("file %s outside %s", r.File, cfg.SaveDir)
				}
			}
		})
	}
}
