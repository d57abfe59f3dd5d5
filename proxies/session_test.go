package proxies_test

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/proxies"
)

func TestParseSessions(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		users     []string // user names of the sessions, in order
		passes    []string // their passwords ("" for none)
		pool      string
		rotate    proxies.Rotation
		wantNoPwd bool
	}{
		{"in the user name", "http://cust-{session}:pw@p.example:8080 sessions=3",
			[]string{"cust-1", "cust-2", "cust-3"}, []string{"pw", "pw", "pw"}, "", proxies.RotateDefault, false},
		{"with a prefix", "http://cust-session-{session}:pw@p.example:8080 sessions=2 session-prefix=ab",
			[]string{"cust-session-ab1", "cust-session-ab2"}, []string{"pw", "pw"}, "", proxies.RotateDefault, false},
		{"in the password, twice", "socks5://u:x{session}y{session}@p.example sessions=2",
			[]string{"u", "u"}, []string{"x1y1", "x2y2"}, "", proxies.RotateDefault, false},
		{"user only", "http://s{session}@p.example sessions=2",
			[]string{"s1", "s2"}, []string{"", ""}, "", proxies.RotateDefault, true},
		{"percent-encoded pieces are decoded", "http://a%40b-{session}:p%3Aw@p.example sessions=1",
			[]string{"a@b-1"}, []string{"p:w"}, "", proxies.RotateDefault, false},
		{"pool and rotate", "http://u-{session}:pw@p.example sessions=2 pool=gw rotate=request",
			[]string{"u-1", "u-2"}, []string{"pw", "pw"}, "gw", proxies.RotateRequest, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, err := proxies.Parse("f", strings.NewReader("# c\n"+tt.line+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) != len(tt.users) {
				t.Fatalf("%d proxies, want %d", len(ps), len(tt.users))
			}
			ids := map[string]bool{}
			for i, p := range ps {
				pass, hasPass := p.User.Password()
				if p.User.Username() != tt.users[i] || pass != tt.passes[i] || hasPass == tt.wantNoPwd {
					t.Errorf("session %d: user %q pass %q (%v), want %q %q", i+1, p.User.Username(), pass, hasPass, tt.users[i], tt.passes[i])
				}
				if p.Session != i+1 || p.Source() != "f:2" || p.Pool != tt.pool || p.Rotate != tt.rotate {
					t.Errorf("session %d: %+v", i+1, p)
				}
				if p.ID != proxies.Identity(p.URL()) || ids[p.ID] {
					t.Errorf("session %d: identity %s not its own", i+1, p.ID)
				}
				ids[p.ID] = true
			}
		})
	}
}

func TestParseSessionErrors(t *testing.T) {
	tests := []struct {
		name, line, reason string
	}{
		{"mark without sessions", "http://u-{session}:pw@p.example", "{session} in the URL needs sessions=N"},
		{"sessions without mark", "http://u:pw@p.example sessions=3", "sessions= needs {session}"},
		{"prefix without sessions", "http://u:pw@p.example session-prefix=x", "session-prefix= needs sessions=N"},
		{"mark in the host", "http://u:pw@p{session}.example sessions=2", "only in the user name or password"},
		{"mark in the port", "http://u:pw@p.example:{session} sessions=2", "only in the user name or password"},
		{"mark without credentials", "http://p{session}.example sessions=2", "only in the user name or password"},
		{"sessions zero", "http://u-{session}@p.example sessions=0", "bad sessions \"0\": want an integer from 1 to 1000000"},
		{"sessions too many", "http://u-{session}@p.example sessions=1000001", "want an integer from 1 to 1000000"},
		{"sessions not a number", "http://u-{session}@p.example sessions=x", "bad sessions"},
		{"bad rotate", "http://p.example rotate=always", "bad rotate \"always\": want never or request"},
		{"empty prefix", "http://u-{session}@p.example sessions=2 session-prefix=", "bad session-prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := proxies.Parse("list.txt", strings.NewReader("\n"+tt.line+"\n"))
			var le *proxies.LineError
			if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(le.Reason, tt.reason) {
				t.Fatalf("Parse: %v, want list.txt:2: …%s…", err, tt.reason)
			}
			if strings.Contains(err.Error(), "pw") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
}

// TestLoadSessionDuplicates checks that the duplicates among the sessions
// of a line are told in one warning for the line, not one per session.
func TestLoadSessionDuplicates(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "list.txt")
	list := "http://u-{session}:pw@p.example sessions=1000\n" +
		"http://u-{session}:pw@p.example sessions=1000 session-prefix=x\n" +
		"http://u-{session}:pw@p.example sessions=1500\n"
	if err := os.WriteFile(name, []byte(list), 0o600); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	ps, err := proxies.Load([]string{name}, nil, func(m string) { warnings = append(warnings, m) })
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2500 {
		t.Errorf("%d proxies, want 2500", len(ps))
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], name+":3: 1000 duplicate proxies of its 1500 sessions (the first first at "+name+":1)") {
		t.Errorf("warnings %q, want one for line 3", warnings)
	}
	for _, w := range warnings {
		if strings.Contains(w, "pw") || strings.Contains(w, "u-1") {
			t.Errorf("warning %q shows credentials", w)
		}
	}
}

// TestRedactorSessions checks that the credentials of every session are
// removed, the Basic token of each too, though the Redactor keeps them
// once for the line.
func TestRedactorSessions(t *testing.T) {
	ps, err := proxies.Parse("f", strings.NewReader("http://cust-{session}:s3cretpw@p.example sessions=500 session-prefix=zone\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := proxies.NewRedactor(ps)
	p := ps[356]
	user := p.User.Username()
	token := base64.StdEncoding.EncodeToString([]byte(user + ":s3cretpw"))
	for _, msg := range []string{
		"proxy " + user + " refused",
		"Proxy-Authorization: Basic " + token,
		"dial http://" + user + ":s3cretpw@p.example:80: refused",
		user + ":s3cretpw@p.example",
	} {
		got := r.String(msg)
		for _, s := range []string{"cust-zone", "s3cretpw", token, "zone357"} {
			if strings.Contains(got, s) {
				t.Errorf("String(%q) = %q: shows %q", msg, got, s)
			}
		}
	}
}

// TestSessionsStartUp measures what one line with sessions=100000 costs to
// load: it must stay small.
func TestSessionsStartUp(t *testing.T) {
	if testing.Short() {
		t.Skip("measures memory")
	}
	list := "http://cust-{session}:s3cretpw@p.example:8080 sessions=100000 session-prefix=sess\n"
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	ps, err := proxies.Parse("f", strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	r := proxies.NewRedactor(ps)
	took := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("sessions=100000: parse and redactor %v, %.1f MB held (%d B a proxy)", took, float64(held)/1e6, held/int64(len(ps)))
	if held > 64<<20 {
		t.Errorf("%d bytes held for 100000 sessions, want under 64 MiB", held)
	}
	runtime.KeepAlive(ps)
	runtime.KeepAlive(r)
}
