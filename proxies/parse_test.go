package proxies_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// summary is the part of a Proxy the tests compare.
type summary struct {
	ID          string
	Pool        string
	Concurrency int
	Rate        limits.Rate
	RateSet     bool
	Burst       int
	Source      string
}

func summarize(ps []proxies.Proxy) []summary {
	var out []summary
	for _, p := range ps {
		out = append(out, summary{p.ID, p.Pool, p.Concurrency, p.Rate, p.RateSet, p.Burst, p.Source()})
	}
	return out
}

func equalSummaries(a, b []summary) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseSampleFile(t *testing.T) {
	const name = "testdata/proxies.txt"
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps, err := proxies.Parse(name, f)
	if err != nil {
		t.Fatal(err)
	}
	want := []summary{
		{ID: "http://10.0.0.1:3128", Source: name + ":3"},
		{ID: "http://10.0.0.2:3128#" + userHash("alice:s3cret"), Concurrency: 8, Rate: limits.Rate{N: 10, Per: time.Second}, RateSet: true, Burst: 2, Source: name + ":4"},
		{ID: "https://proxy.example.com:443", Rate: limits.Rate{N: 5, Per: 2 * time.Second}, RateSet: true, Source: name + ":5"},
		{ID: "socks5://[2001:db8::1]:1080", Pool: "eu", Source: name + ":6"},
		{ID: "socks5h://socks.example.com:1080#" + userHash("bob"), Pool: "eu", Concurrency: 16, Source: name + ":7"},
		{ID: "socks5://socks.example.com:1081", Pool: "eu", Source: name + ":8"},
	}
	if got := summarize(ps); !equalSummaries(got, want) {
		t.Errorf("Parse(%s):\n got %+v\nwant %+v", name, got, want)
	}
	if pass, _ := ps[1].User.Password(); pass != "s3cret" {
		t.Errorf("password = %q, want it kept in the URL", pass)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []summary
	}{
		{"empty", "", nil},
		{"only comments and blanks", "# a\n\n  \t\n   # b\n", nil},
		{"no final newline", "http://p.example", []summary{{ID: "http://p.example:80", Source: "f:1"}}},
		{"line numbers count blanks and comments", "\n# c\n\nhttp://p.example\n", []summary{{ID: "http://p.example:80", Source: "f:4"}}},
		{"crlf", "# c\r\nhttp://p.example:1\r\nhttp://q.example:1 concurrency=3\r\n", []summary{
			{ID: "http://p.example:1", Source: "f:2"},
			{ID: "http://q.example:1", Concurrency: 3, Source: "f:3"},
		}},
		{"bom", "\ufeffhttp://p.example:1\n", []summary{{ID: "http://p.example:1", Source: "f:1"}}},
		{"bom before comment", "\ufeff# c\nhttp://p.example:1\n", []summary{{ID: "http://p.example:1", Source: "f:2"}}},
		{"surrounding white space and tabs", " \t http://p.example:1 \t concurrency=2\t\n", []summary{{ID: "http://p.example:1", Concurrency: 2, Source: "f:1"}}},
		{"concurrency", "http://p.example:1 concurrency=7", []summary{{ID: "http://p.example:1", Concurrency: 7, Source: "f:1"}}},
		{"rate per second", "http://p.example:1 rate=10/s", []summary{{ID: "http://p.example:1", Rate: limits.Rate{N: 10, Per: time.Second}, RateSet: true, Source: "f:1"}}},
		{"rate per duration", "http://p.example:1 rate=5/2s", []summary{{ID: "http://p.example:1", Rate: limits.Rate{N: 5, Per: 2 * time.Second}, RateSet: true, Source: "f:1"}}},
		// rate=0 means what --proxy-rate 0 means: no limit, over the flag's.
		{"rate zero is unlimited", "http://p.example:1 rate=0", []summary{{ID: "http://p.example:1", RateSet: true, Source: "f:1"}}},
		{"rate unlimited", "http://p.example:1 rate=unlimited", []summary{{ID: "http://p.example:1", RateSet: true, Source: "f:1"}}},
		{"burst", "http://p.example:1 burst=4", []summary{{ID: "http://p.example:1", Burst: 4, Source: "f:1"}}},
		{"pool", "http://p.example:1 pool=eu-west_1", []summary{{ID: "http://p.example:1", Pool: "eu-west_1", Source: "f:1"}}},
		{"unicode pool", "http://p.example:1 pool=zürich", []summary{{ID: "http://p.example:1", Pool: "zürich", Source: "f:1"}}},
		{"all keys, any order", "http://p.example:1 pool=a burst=2 rate=3/m concurrency=4", []summary{
			{ID: "http://p.example:1", Pool: "a", Concurrency: 4, Rate: limits.Rate{N: 3, Per: time.Minute}, RateSet: true, Burst: 2, Source: "f:1"},
		}},
		{"trailing comment", "http://p.example:1 concurrency=2 # office", []summary{{ID: "http://p.example:1", Concurrency: 2, Source: "f:1"}}},
		{"duplicates kept", "http://p.example:1\nhttp://p.example:1\n", []summary{
			{ID: "http://p.example:1", Source: "f:1"},
			{ID: "http://p.example:1", Source: "f:2"},
		}},
		// What one line learns of its host is not carried to the next
		// of another scheme, spelling or user.
		{"hosts and schemes taking turns", "http://u:p@p.example:1\nhttps://u:p@p.example:1\nhttp://u:p@p.example:1\nhttp://u:p@P.example:1\nsocks5://p.example:1\nhttp://p.example:01\nhttp://u:q@p.example:1\nhttp://[::1]:1\nhttp://[0::1]:1\n", []summary{
			{ID: "http://p.example:1#" + userHash("u:p"), Source: "f:1"},
			{ID: "https://p.example:1#" + userHash("u:p"), Source: "f:2"},
			{ID: "http://p.example:1#" + userHash("u:p"), Source: "f:3"},
			{ID: "http://p.example:1#" + userHash("u:p"), Source: "f:4"},
			{ID: "socks5://p.example:1", Source: "f:5"},
			{ID: "http://p.example:1", Source: "f:6"},
			{ID: "http://p.example:1#" + userHash("u:q"), Source: "f:7"},
			{ID: "http://[::1]:1", Source: "f:8"},
			{ID: "http://[::1]:1", Source: "f:9"},
		}},
		{"line of exactly 8 KiB", "http://p.example:1 #" + strings.Repeat("x", 8192-len("http://p.example:1 #")) + "\r\n", []summary{{ID: "http://p.example:1", Source: "f:1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := proxies.Parse("f", strings.NewReader(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if got := summarize(ps); !equalSummaries(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		line   int
		reason string // a part of the reason
		is     error  // wrapped, or nil
	}{
		{"bad URL", "http://p.example:1\n\nftp://p.example\n", 3, "bad proxy URL: unsupported scheme", proxies.ErrBadURL},
		{"no scheme", "# c\np.example:8080", 2, "bad proxy URL", proxies.ErrBadURL},
		{"unknown key", "http://p.example:1 speed=3", 1, `unknown key "speed"`, nil},
		{"upper-case key", "http://p.example:1 Rate=3/s", 1, `unknown key "Rate"`, nil},
		{"repeated key", "http://p.example:1 rate=1/s rate=1/s", 1, `repeated key "rate"`, nil},
		{"not key=value", "http://p.example:1 fast", 1, `want key=value after the URL: got "fast"`, nil},
		{"empty key", "http://p.example:1 =3", 1, "want key=value", nil},
		{"two URLs", "http://p.example:1 http://q.example:1", 1, "want key=value", nil},
		{"concurrency zero", "http://p.example:1 concurrency=0", 1, `bad concurrency "0"`, nil},
		{"concurrency negative", "http://p.example:1 concurrency=-1", 1, "bad concurrency", nil},
		{"concurrency not a number", "http://p.example:1 concurrency=lots", 1, `bad concurrency "lots"`, nil},
		{"concurrency empty", "http://p.example:1 concurrency=", 1, "bad concurrency", nil},
		{"concurrency too big", "http://p.example:1 concurrency=99999999999999999999", 1, "bad concurrency", nil},
		{"burst zero", "http://p.example:1 burst=0", 1, `bad burst "0"`, nil},
		{"burst fraction", "http://p.example:1 burst=1.5", 1, `bad burst "1.5"`, nil},
		{"rate malformed", "http://p.example:1 rate=fast", 1, `bad rate "fast"`, limits.ErrBadRate},
		{"rate without period", "http://p.example:1 rate=5", 1, `bad rate "5"`, limits.ErrBadRate},
		{"rate empty", "http://p.example:1 rate=", 1, "bad rate: empty", limits.ErrBadRate},
		{"rate too large", "http://p.example:1 rate=1e308/s", 1, "bad rate: too large: at most 1e9 per second", limits.ErrBadRate},
		{"rate too large per period", "http://p.example:1 rate=1e9/1ms", 1, "too large", limits.ErrBadRate},
		{"rate zero count", "http://p.example:1 rate=0/s", 1, "is 0", limits.ErrBadRate},
		{"rate negative", "http://p.example:1 rate=-1/s", 1, "bad rate", limits.ErrBadRate},
		{"pool empty", "http://p.example:1 pool=", 1, "bad pool name", nil},
		{"pool not printable", "http://p.example:1 pool=a\u200bb", 1, "bad pool name", nil},
		{"pool too long", "http://p.example:1 pool=" + strings.Repeat("p", 129), 1, "bad pool name", nil},
		{"line too long", "http://p.example:1\n#" + strings.Repeat("x", 8192) + "\nhttp://q.example:1\n", 2, "line longer than 8192 bytes", nil},
		{"line too long without newline", strings.Repeat("x", 10000), 1, "line longer than 8192 bytes", nil},
		{"line one byte too long with crlf", "#" + strings.Repeat("x", 8192) + "\r\n", 1, "line longer than 8192 bytes", nil},
		{"invalid UTF-8", "http://p.example:1\n\xff\xfe\x00\x01", 2, "binary data", nil},
		{"invalid UTF-8 in a comment", "# caf\xe9\n", 1, "binary data", nil},
		{"NUL byte", "http://p.example:1 pool=a\x00b", 1, "binary data", nil},
		{"BOM after line 1", "http://p.example:1\n\ufeffhttp://q.example:1", 2, "bad proxy URL", proxies.ErrBadURL},
		{"first error wins", "http://p.example:1 x=1\nftp://q", 1, "unknown key", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := proxies.Parse("list.txt", strings.NewReader(tt.input))
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", summarize(ps))
			}
			var le *proxies.LineError
			if !errors.As(err, &le) {
				t.Fatalf("error %v (%T) is not a *LineError", err, err)
			}
			if le.File != "list.txt" || le.Line != tt.line {
				t.Errorf("error at %s:%d, want list.txt:%d", le.File, le.Line, tt.line)
			}
			prefix := "proxies: list.txt:" + strconv.Itoa(tt.line) + ": "
			if !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("error %q does not start with %q", err, prefix)
			}
			if !strings.Contains(le.Reason, tt.reason) {
				t.Errorf("reason %q does not contain %q", le.Reason, tt.reason)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
		})
	}
}

// TestParseErrorHidesCredentials checks that no error about a line shows
// its user name or password, whatever is wrong with the line.
func TestParseErrorHidesCredentials(t *testing.T) {
	for _, line := range []string{
		"http://user:s3cret@p.example:0",          // bad port
		"http://user:s3cret/x@p.example:1",        // password read as the port
		"user:s3cret@p.example:8080",              // no scheme
		"ftp://user:s3cret@p.example",             // bad scheme
		"http://user:s3cret@p.example:1/path",     // path
		"http://user:s3cret@p.example:1?q=1",      // query
		"http://user:s3cret@[::1:1",               // bad IPv6
		"http://user:s3 cret@p.example:1",         // space in the password
		"http://user:s3cret%@p.example:1",         // bad escape
		"http://user:s3cret@p.example:1 s3cret=1", // the password as a key
		"http://user:s3cret@p.example:1 user=1",   // the user as a key
		"http://user:s3cret@p.example:1 rate=s3cret",
		"http://user:s3cret@p.example:1 concurrency=s3cret",
		"http://user:s3cret@p.example:1 burst=user",
		"http://user:s3cret@p.example:1 user",
		"http://user:s3cret@p.example:1 s3cret",
		"http://user:s3cret@p.example:1 pool=s3cret\x01",
		"http://p.example:1 http://user:s3cret@q.example:1",
		"http://p.example:1 x=http://user:s3cret@q.example:1",
		"http://p.example:1 rate=1/s rate=http://user:s3cret@q",
		"http://us%65r:s3cr%65t@p.example:1 user=1",
		"http://us%65r:s3cr%65t@p.example:1 s3cret=1",
		"http://user:s3cret@p.example:1 rate=1/s rate=1/s",
	} {
		t.Run(line, func(t *testing.T) {
			_, err := proxies.Parse("list.txt", strings.NewReader("# c\n"+line+"\n"))
			var le *proxies.LineError
			if !errors.As(err, &le) {
				t.Fatalf("Parse: %v, want a *LineError", err)
			}
			if le.Line != 2 {
				t.Errorf("line %d, want 2", le.Line)
			}
			for _, secret := range []string{"user", "s3cret", "us%65r", "s3cr%65t"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains %q", err, secret)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	var warnings []string
	warn := func(msg string) { warnings = append(warnings, msg) }
	ps, err := proxies.Load(
		[]string{"testdata/proxies.txt", "testdata/dup.txt", "testdata/crlf-bom.txt"},
		[]string{"http://alice:other@10.0.0.2:3128", "http://carol:s3cret@10.0.0.2:3128", "HTTP://10.0.0.3:3128/"},
		warn)
	if err != nil {
		t.Fatal(err)
	}
	var ids, sources []string
	for _, p := range ps {
		ids = append(ids, p.ID)
		sources = append(sources, p.Source())
	}
	wantSources := []string{
		"testdata/proxies.txt:3", "testdata/proxies.txt:4", "testdata/proxies.txt:5",
		"testdata/proxies.txt:6", "testdata/proxies.txt:7", "testdata/proxies.txt:8",
		"testdata/dup.txt:2",
		"testdata/crlf-bom.txt:1", "testdata/crlf-bom.txt:4",
		"--proxy", // alice with another password: another proxy
		"--proxy", // carol: same host as alice, another user
	}
	if strings.Join(sources, " ") != strings.Join(wantSources, " ") {
		t.Errorf("sources\n got %q\nwant %q", sources, wantSources)
	}
	if want := "http://10.0.0.2:3128#" + userHash("alice:other"); ids[len(ids)-2] != want {
		t.Errorf("ID of alice:other %q, want %q", ids[len(ids)-2], want)
	}
	if want := "http://10.0.0.2:3128#" + userHash("carol:s3cret"); ids[len(ids)-1] != want {
		t.Errorf("last ID %q, want %q", ids[len(ids)-1], want)
	}
	wantWarn := []struct{ where, id string }{
		{"testdata/dup.txt:1", "http://10.0.0.1:3128"},
		{"--proxy", "http://10.0.0.3:3128"},
	}
	if len(warnings) != len(wantWarn) {
		t.Fatalf("warnings %q, want %d", warnings, len(wantWarn))
	}
	for i, w := range wantWarn {
		msg := warnings[i]
		if !strings.HasPrefix(msg, w.where+": ") || !strings.Contains(msg, "duplicate") || !strings.Contains(msg, w.id) {
			t.Errorf("warning %q, want %s, \"duplicate\" and %s", msg, w.where, w.id)
		}
		for _, secret := range []string{"alice", "other", "s3cret"} {
			if strings.Contains(msg, secret) {
				t.Errorf("warning %q contains %q", msg, secret)
			}
		}
	}
	if !strings.Contains(warnings[1], "testdata/dup.txt:2") {
		t.Errorf("warning %q does not say where the proxy was first seen", warnings[1])
	}
}

func TestLoadNothing(t *testing.T) {
	ps, err := proxies.Load(nil, nil, nil)
	if err != nil || ps != nil {
		t.Errorf("Load(nil, nil) = %v, %v; want nil, nil", ps, err)
	}
	// A nil warn is allowed.
	ps, err = proxies.Load([]string{"testdata/dup.txt", "testdata/dup.txt"}, nil, nil)
	if err != nil || len(ps) != 2 {
		t.Errorf("Load(dup twice) = %d proxies, %v; want 2, nil", len(ps), err)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.txt")
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("http://p.example:1\nhttp://user:s3cret@p.example:0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		files []string
		urls  []string
		msg   string // the whole message, or a part of it
		is    error
	}{
		{"empty file", []string{"testdata/proxies.txt", "testdata/empty.txt"}, nil, "proxies: testdata/empty.txt: no proxy in list", proxies.ErrEmpty},
		{"missing file", []string{missing}, nil, missing, fs.ErrNotExist},
		{"directory", []string{dir}, nil, dir, nil},
		{"malformed line", []string{bad}, nil, bad + ":2: bad proxy URL", proxies.ErrBadURL},
		{"bad --proxy", nil, []string{"http://user:s3cret@p.example/x"}, "proxies: --proxy: bad proxy URL", proxies.ErrBadURL},
		{"empty --proxy", nil, []string{""}, "proxies: --proxy: bad proxy URL", proxies.ErrBadURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := proxies.Load(tt.files, tt.urls, func(string) {})
			if err == nil {
				t.Fatalf("Load = %d proxies, want an error", len(ps))
			}
			if !strings.HasPrefix(err.Error(), "proxies: ") || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q, want it to contain %q", err, tt.msg)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %v does not wrap %v", err, tt.is)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "user") {
				t.Errorf("error %q shows credentials", err)
			}
		})
	}
}

// TestLoadIdentityCollision: of two proxies whose credentials differ but
// whose identities are the same (8 hex digits of a hash: these two session
// names of 100,000 collide), the second is dropped, since records and
// limits could not tell them apart, with a warning that says its
// credentials are others and shows none of them.
func TestLoadIdentityCollision(t *testing.T) {
	a := "http://user-session-14615:pw@gate.example:7000"
	b := "http://user-session-28168:pw@gate.example:7000"
	ua, _ := proxies.ParseURL(a)
	ub, _ := proxies.ParseURL(b)
	if proxies.Identity(ua) != proxies.Identity(ub) {
		t.Fatalf("identities %s and %s: want the same, for this test", proxies.Identity(ua), proxies.Identity(ub))
	}
	var warnings []string
	ps, err := proxies.Load(nil, []string{a, b, a}, func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].User.Username() != "user-session-14615" {
		t.Fatalf("proxies %v, want the first only", ps)
	}
	if len(warnings) != 2 {
		t.Fatalf("warnings %q, want 2", warnings)
	}
	// Both are duplicates of an identity, as the contract words it; only
	// the collision says that the credentials are others.
	if w := warnings[0]; !strings.Contains(w, "duplicate identity") || !strings.Contains(w, "other credentials") {
		t.Errorf("collision warned as %q, want a duplicate identity of other credentials", w)
	}
	if w := warnings[1]; !strings.Contains(w, "duplicate proxy") || strings.Contains(w, "other credentials") {
		t.Errorf("the repeated line warned as %q, want a duplicate proxy", w)
	}
	for _, w := range warnings {
		if strings.Contains(w, "user-session") || strings.Contains(w, ":pw") {
			t.Errorf("warning %q shows credentials", w)
		}
	}
}
