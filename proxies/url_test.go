package proxies_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/proxies"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string // u.String(); "" means an error
	}{
		{"http with port", "http://10.0.0.1:3128", "http://10.0.0.1:3128"},
		{"http default port", "http://10.0.0.1", "http://10.0.0.1:80"},
		{"https default port", "https://p.example", "https://p.example:443"},
		{"socks5 default port", "socks5://p.example", "socks5://p.example:1080"},
		{"socks5h default port", "socks5h://p.example", "socks5h://p.example:1080"},
		{"case folded", "HTTP://P.Example.COM:8080", "http://p.example.com:8080"},
		{"slash path dropped", "http://p.example:8080/", "http://p.example:8080"},
		{"surrounding space", "  http://p.example:1 \t", "http://p.example:1"},
		{"leading zeros in port", "http://p.example:0080", "http://p.example:80"},
		{"underscore in name", "http://my_proxy.local", "http://my_proxy.local:80"},
		{"user and password", "http://alice:s3cret@p.example:1", "http://alice:s3cret@p.example:1"},
		{"user only", "http://alice@p.example", "http://alice@p.example:80"},
		{"empty password", "http://alice:@p.example", "http://alice:@p.example:80"},
		{"password only", "http://:s3cret@p.example", "http://:s3cret@p.example:80"},
		{"empty userinfo dropped", "http://@p.example", "http://p.example:80"},
		{"percent-encoded credentials", "http://a%40b:p%3Aw%20d@p.example", "http://a%40b:p%3Aw%20d@p.example:80"},
		{"sub-delims in password", "http://a:p!$&'()*+,;=@p.example", "http://a:p%21$&%27%28%29%2A+,;=@p.example:80"},
		{"ipv6", "http://[2001:DB8::1]", "http://[2001:db8::1]:80"},
		{"ipv6 non-canonical", "socks5://[2001:db8:0:0::0001]:9", "socks5://[2001:db8::1]:9"},
		{"ipv6 zone", "http://[fe80::1%25eth0]:8080", "http://[fe80::1%25eth0]:8080"},

		{"empty", "", ""},
		{"no scheme", "p.example:8080", ""},
		{"no scheme ip", "10.0.0.1:8080", ""},
		{"opaque", "http:p.example:80", ""},
		{"unknown scheme", "ftp://p.example", ""},
		{"socks4", "socks4://p.example", ""},
		{"no host", "http://", ""},
		{"port without host", "http://:8080", ""},
		{"credentials without host", "http://alice:s3cret@", ""},
		{"port zero", "http://p.example:0", ""},
		{"port too big", "http://p.example:65536", ""},
		{"port not a number", "http://p.example:http", ""},
		{"empty port", "http://p.example:", ""},
		{"path", "http://p.example/proxy", ""},
		{"query", "http://p.example?x=1", ""},
		{"empty query", "http://p.example?", ""},
		{"fragment", "http://p.example#x", ""},
		{"empty fragment", "http://p.example#", ""},
		{"ipv6 without brackets", "http://::1:80", ""},
		{"unclosed bracket", "http://[::1", ""},
		{"ipv4 in brackets", "http://[10.0.0.1]:80", ""},
		{"space in host", "http://p example", ""},
		{"bad host character", "http://p!example", ""},
		{"leading dot", "http://.p.example", ""},
		{"leading hyphen", "http://-p.example", ""},
		{"empty label", "http://p..example", ""},
		{"non-ascii host", "http://bücher.example", ""},
		{"bad percent-encoding", "http://a:p%zz@p.example", ""},
		{"control character", "http://p.example\x7f", ""},
		{"host too long", "http://" + strings.Repeat("a", 254), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := proxies.ParseURL(tt.raw)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %q, want an error", tt.raw, u)
				}
				if !errors.Is(err, proxies.ErrBadURL) {
					t.Errorf("error %v does not wrap ErrBadURL", err)
				}
				if !strings.HasPrefix(err.Error(), "proxies: ") {
					t.Errorf("error %q lacks the package prefix", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.raw, err)
			}
			if got := u.String(); got != tt.want {
				t.Errorf("ParseURL(%q) = %q, want %q", tt.raw, got, tt.want)
			}
			// The result is canonical: parsing it again changes nothing.
			again, err := proxies.ParseURL(u.String())
			if err != nil || again.String() != u.String() {
				t.Errorf("ParseURL(%q) = %v, %v; want it unchanged", u, again, err)
			}
		})
	}
}

func TestParseURLErrorHidesCredentials(t *testing.T) {
	for _, raw := range []string{
		"http://alice:s3cret@p.example:0",
		"http://alice:s3cret/x@p.example",  // the password ends up in the port
		"http://alice:s3cret@p.example/x",  // path
		"alice:s3cret@p.example:8080",      // no scheme: alice is the scheme
		"http://alice:s3cret%zz@p.example", // bad escape inside the password
		"http://alice:s3cret@[::1",
		"http://alice:s3cret@p.example?q",
		"ftp://alice:s3cret@p.example",
		"http://alice:s3 cret@p.example",
		"http://alice:s3cret\x00@p.example",
	} {
		t.Run(raw, func(t *testing.T) {
			_, err := proxies.ParseURL(raw)
			if err == nil {
				t.Fatal("no error")
			}
			for _, secret := range []string{"alice", "s3cret"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q contains %q", err, secret)
				}
			}
		})
	}
}

func userHash(user string) string {
	sum := sha256.Sum256([]byte(user))
	return hex.EncodeToString(sum[:])[:8]
}

func TestIdentity(t *testing.T) {
	alice := userHash("alice")
	tests := []struct {
		name string
		raw  string // parsed with url.Parse, not ParseURL
		want string
	}{
		{"host and port", "http://10.0.0.1:3128", "http://10.0.0.1:3128"},
		{"http default port", "http://10.0.0.1", "http://10.0.0.1:80"},
		{"https default port", "https://p.example", "https://p.example:443"},
		{"socks5 default port", "socks5://p.example", "socks5://p.example:1080"},
		{"socks5h default port", "socks5h://p.example", "socks5h://p.example:1080"},
		{"case", "HTTP://P.Example.COM:8080", "http://p.example.com:8080"},
		{"ipv6", "http://[2001:DB8::1]", "http://[2001:db8::1]:80"},
		{"ipv6 with port", "socks5://[::1]:1080", "socks5://[::1]:1080"},
		{"ipv6 spelt out", "http://[0:0:0:0:0:0:0:1]:8080", "http://[::1]:8080"},
		{"ipv4 in ipv6", "http://[::FFFF:10.0.0.1]:8080", "http://[::ffff:10.0.0.1]:8080"},
		{"leading zero port", "http://p.example:080", "http://p.example:80"},
		{"port 0", "http://p.example:0", "http://p.example:0"},
		{"user and password", "http://alice:s3cret@p.example:1", "http://p.example:1#" + userHash("alice:s3cret")},
		{"other password, other identity", "http://alice:other@p.example:1", "http://p.example:1#" + userHash("alice:other")},
		{"empty password is none", "http://alice:@p.example:1", "http://p.example:1#" + alice},
		{"user only", "http://alice@p.example:1", "http://p.example:1#" + alice},
		{"encoded user", "http://%61lice@p.example:1", "http://p.example:1#" + alice},
		{"other user", "http://bob:s3cret@p.example:1", "http://p.example:1#" + userHash("bob:s3cret")},
		{"password only", "http://:s3cret@p.example:1", "http://p.example:1#" + userHash(":s3cret")},
		{"session in the password", "http://alice:pw_session-7@p.example:1", "http://p.example:1#" + userHash("alice:pw_session-7")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			got := proxies.Identity(u)
			if got != tt.want {
				t.Errorf("Identity(%q) = %q, want %q", tt.raw, got, tt.want)
			}
			for _, secret := range []string{"alice", "bob", "s3cret"} {
				if strings.Contains(got, secret) {
					t.Errorf("Identity(%q) = %q holds %q", tt.raw, got, secret)
				}
			}
			if pu, err := proxies.ParseURL(tt.raw); err == nil && proxies.Identity(pu) != got {
				t.Errorf("Identity(ParseURL(%q)) = %q, want %q", tt.raw, proxies.Identity(pu), got)
			}
		})
	}
}

// TestFromURL: a proxy made from a URL gives that URL back, credentials
// included, and its identity; the parts are the URL's.
func TestFromURL(t *testing.T) {
	for _, raw := range []string{"http://127.0.0.1:3128", "https://u:p%40ss@gate.example:7000", "socks5h://user@[2001:db8::1]:1080"} {
		u, err := proxies.ParseURL(raw)
		if err != nil {
			t.Fatal(err)
		}
		p := proxies.FromURL(u)
		if got := p.URL(); got.String() != u.String() || p.ID != proxies.Identity(u) || p.Scheme != u.Scheme || p.Host != u.Host || p.User != u.User {
			t.Errorf("FromURL(%s): URL %s, ID %s, parts %q %q; want %s and %s", raw, got, p.ID, p.Scheme, p.Host, u, proxies.Identity(u))
		}
	}
}
