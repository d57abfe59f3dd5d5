package proxies_test

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/proxies"
)

// BenchmarkLoadIdentities measures what a run starts with for a list of
// 100,000 identities on one gateway (http://user-session-N:pw@gate), as
// rotating-proxy providers sell them: reading the list, then building the
// redaction of its credentials (one op is one list), and what redacting an
// error message costs with them.
func BenchmarkLoadIdentities(b *testing.B) {
	const n = 100_000
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "http://user-session-%d:pw@127.0.0.1:8080\n", i)
	}
	name := filepath.Join(b.TempDir(), "proxies.txt")
	if err := os.WriteFile(name, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("Load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			// Three pairs of these names share an identity (see
			// TestLoadIdentityCollision): the second of each is dropped.
			ps, err := proxies.Load([]string{name}, nil, nil)
			if err != nil || len(ps) != n-3 {
				b.Fatalf("%d proxies, %v; want %d", len(ps), err, n-3)
			}
		}
	})
	ps, err := proxies.Load([]string{name}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("NewRedactor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := proxies.NewRedactor(ps); r.String("as user-session-7") != "as ***" {
				b.Fatalf("redacted %q", r.String("as user-session-7"))
			}
		}
	})
	// Redacting an error message, with a credential in it and without.
	r := proxies.NewRedactor(ps)
	for _, tc := range []struct{ name, msg, want string }{
		{"String/clean", `Get "http://127.0.0.1:8080/a/b?c=d": proxyconnect tcp: dial tcp 127.0.0.1:8080: connect: connection refused`, ""},
		{"String/secret", `proxy user-session-99999 said 407 for dXNlci1zZXNzaW9uLTk5OTk5OnB3 after 3 tries`, "proxy *** said 407 for *** after 3 tries"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			want := cmp.Or(tc.want, tc.msg)
			b.ReportAllocs()
			for b.Loop() {
				if got := r.String(tc.msg); got != want {
					b.Fatalf("redacted %q, want %q", got, want)
				}
			}
		})
	}
}

// BenchmarkParseURL measures one proxy URL parsed: in the form lists write
// nearly every proxy in, which parseSimple takes, and in a form only the
// general path (net/url) takes, an upper-case scheme.
func BenchmarkParseURL(b *testing.B) {
	for _, tc := range []struct{ name, raw string }{
		{"simple", "http://user-session-7:pw@127.0.0.1:8080"},
		{"general", "HTTP://user-session-7:pw@127.0.0.1:8080"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proxies.ParseURL(tc.raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
