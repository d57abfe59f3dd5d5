package proxies_test

import (
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/fetch-dev/fetch/proxies"
)

func TestRedactURL(t *testing.T) {
	tests := []struct {
		name, raw, want string
	}{
		{"no userinfo", "http://p.example:1/a?b=c#d", "http://p.example:1/a?b=c#d"},
		{"user and password", "http://alice:s3cret@p.example:1/x", "http://p.example:1/x"},
		{"user only", "socks5://alice@p.example", "socks5://p.example"},
		{"empty password", "http://alice:@p.example", "http://p.example"},
		{"at sign in the query stays", "http://alice:s3cret@p.example/?to=a@b", "http://p.example/?to=a@b"},
		{"unencoded at sign in the password", "http://alice:s3@cret@p.example/", "http://p.example/"},
		{"unparsable", "http://alice:s3 cret@p.example/x", "http://p.example/x"},
		{"unparsable with slash in password", "http://alice:s3cret/x@p.example", "http://alice:s3cret/x@p.example"},
		{"nested URL", "https://t.example/r?next=http://bob:pw@q.example/", "https://t.example/r?next=http://q.example/"},
		{"not a URL", "alice:s3cret", "alice:s3cret"},
		{"kept as written", "HTTP://P.example/a%20b c", "HTTP://P.example/a%20b c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := proxies.RedactURL(tt.raw); got != tt.want {
				t.Errorf("RedactURL(%q) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

func TestRedactor(t *testing.T) {
	ps := parseList(t, strings.Join([]string{
		"http://alice:s3cret@a.example:1",
		"http://bob:p%40ss%20word@b.example:1",
		"http://u:x@c.example:1", // short credentials
		"http://carol@d.example:1",
		"http://e.example:1",
	}, "\n"))
	r := proxies.NewRedactor(ps)
	tests := []struct {
		name, in, want string
	}{
		{"plain text", "connection refused", "connection refused"},
		{"url with credentials", `Get "http://alice:s3cret@a.example:1/x": EOF`, `Get "http://a.example:1/x": EOF`},
		{"url as Go redacts it", "proxy http://alice:xxxxx@a.example:1 failed", "proxy http://a.example:1 failed"},
		{"unknown credentials in a url", "see https://zed:hunter2@z.example/", "see https://z.example/"},
		{"bare password", "auth failed for s3cret", "auth failed for ***"},
		{"bare user", "user alice rejected", "user *** rejected"},
		{"encoded password", "p%40ss%20word and p%40ss+word and p@ss word", "*** and *** and ***"},
		{"short credentials in a pair", "u:x@c.example:1", "c.example:1"},
		{"short credentials elsewhere are left", "x marks the spot", "x marks the spot"},
		{"basic token", "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("alice:s3cret")), "Proxy-Authorization: Basic ***"},
		{"user without password", "carol says hi", "*** says hi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.String(tt.in); got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestNilRedactor(t *testing.T) {
	var r *proxies.Redactor
	in := `Get "http://alice:s3cret@a.example:1/x": s3cret`
	want := `Get "http://a.example:1/x": s3cret`
	if got := r.String(in); got != want {
		t.Errorf("String(%q) = %q, want %q", in, got, want)
	}
	if got := proxies.NewRedactor(nil).String(in); got != want {
		t.Errorf("NewRedactor(nil).String(%q) = %q, want %q", in, got, want)
	}
}

// TestRedactorFirstUse: a Redactor builds what it looks for at its first
// String, from credentials it took when it was made. Strings racing to be
// the first all come back redacted, and the list it was made from may be
// gone by then (fetch.New lets a list of 100,000 proxies become garbage).
func TestRedactorFirstUse(t *testing.T) {
	var list strings.Builder
	const n = 2000
	for i := range n {
		fmt.Fprintf(&list, "http://user-session-%d:pw-%d@gate.example:7000\n", i, i)
	}
	ps := parseList(t, list.String())
	r := proxies.NewRedactor(ps)
	clear(ps)
	const racers = 8
	var start, done sync.WaitGroup
	start.Add(1)
	got := make([]string, racers)
	for i := range racers {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			got[i] = r.String(fmt.Sprintf("407 for user-session-%d with pw-%d", i*250, i*250))
		}()
	}
	start.Done()
	done.Wait()
	for i, g := range got {
		if want := "407 for *** with ***"; g != want {
			t.Errorf("racer %d: String = %q, want %q", i, g, want)
		}
	}
	token := base64.StdEncoding.EncodeToString([]byte("user-session-1999:pw-1999"))
	if g := r.String("Basic " + token); g != "Basic ***" {
		t.Errorf("String(Basic token of the last proxy) = %q, want %q", g, "Basic ***")
	}
}
