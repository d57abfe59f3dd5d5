package proxies_test

import (
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/proxies"
)

// Markers the fuzz tests put in place of "{user}" and "{pass}" in their
// input. They are distinctive enough that no error text holds them unless
// it quotes the input.
const (
	userMarker = "UsEr7q"
	passMarker = "PaSs9z"
)

func expandMarkers(s string) string {
	return strings.NewReplacer("{user}", userMarker, "{pass}", passMarker).Replace(s)
}

// credentialRegions returns the user information of every "scheme://...@"
// in each white-space-separated field of line, and line with them removed.
func credentialRegions(line string) (regions []string, rest string) {
	var b strings.Builder
	for _, f := range strings.Fields(line) {
		for {
			i := strings.Index(f, "://")
			if i < 0 {
				break
			}
			at := strings.LastIndexByte(f[i+3:], '@')
			if at < 0 {
				break
			}
			regions = append(regions, f[i+3:i+3+at])
			b.WriteString(f[:i+3])
			f = f[i+3+at:]
		}
		b.WriteString(f)
		b.WriteByte(' ')
	}
	return regions, b.String()
}

// quotedParts returns the Go-quoted strings in s, unquoted.
func quotedParts(s string) []string {
	var out []string
	for i := strings.IndexByte(s, '"'); i >= 0; i = strings.IndexByte(s, '"') {
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			s = s[i+1:]
			continue
		}
		u, _ := strconv.Unquote(q)
		out = append(out, u)
		s = s[i+len(q):]
	}
	return out
}

func addSeeds(f *testing.F) {
	f.Add("http://10.0.0.1:3128\n")
	f.Add("\ufeff# list\r\nhttp://{user}:{pass}@p.example:8080 concurrency=4 rate=10/s burst=2 pool=eu\r\n\r\n")
	f.Add("http://{user}:{pass}@p.example:0\n")
	f.Add("http://{user}:{pass}/x@p.example\n")
	f.Add("{user}:{pass}@p.example:8080\n")
	f.Add("socks5h://{user}:{pass}@[::1]:1080 pool=a pool=b\n")
	f.Add("http://{user}:{pass}@p.example:1 {pass}=1\n")
	f.Add("http://{user}:{pass}@p.example:1 rate={pass}\n")
	f.Add("http://p.example:1 http://{user}:{pass}@q.example:1\n")
	f.Add("https://{user}%20x:{pass}%40@p.example rate=0.5/100ms # c\n")
	f.Add("http://a:1 concurrency=0\nhttp://b:1 burst=x\n\xff\n")
	f.Add("http://{user}-{session}:{pass}@p.example sessions=3 session-prefix=s rotate=request\n")
	f.Add("http://{user}:{pass}{session}@p{session}.example sessions=2\n")
	f.Add("http://{user}-{session}@p.example sessions={pass} session-prefix={pass}\n")
	f.Add("http://{user}-{session}:{pass}@p.example session-prefix={user} rotate={pass}\n")
	for _, name := range []string{"testdata/proxies.txt", "testdata/crlf-bom.txt"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(string(b))
		}
	}
}

// FuzzParse checks that Parse never panics, that every error is a
// *LineError with a line in range, and that no error shows credentials.
func FuzzParse(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data string) {
		data = expandMarkers(data)
		ps, err := proxies.Parse("fuzz.txt", strings.NewReader(data))
		lines := strings.Split(data, "\n")
		if err == nil {
			for _, p := range ps {
				if p.Scheme == "" || p.ID == "" || !strings.HasPrefix(p.Source(), "fuzz.txt:") {
					t.Fatalf("bad proxy %+v", p)
				}
				if strings.Contains(p.ID, userMarker) || strings.Contains(p.ID, passMarker) {
					t.Fatalf("ID %q shows credentials", p.ID)
				}
			}
			return
		}
		var le *proxies.LineError
		if !errors.As(err, &le) {
			t.Fatalf("error %v (%T) is not a *LineError", err, err)
		}
		if le.File != "fuzz.txt" || le.Line < 1 || le.Line > len(lines) {
			t.Fatalf("error at %s:%d; input has %d lines", le.File, le.Line, len(lines))
		}
		line := lines[le.Line-1]
		regions, rest := credentialRegions(line)
		// Quoted text never holds any part of the line's credentials.
		for _, q := range quotedParts(le.Reason) {
			for _, r := range regions {
				user, pass, _ := strings.Cut(r, ":")
				for _, s := range []string{r, user, pass} {
					d, _ := url.PathUnescape(s)
					if s != "" && strings.Contains(q, s) || d != "" && strings.Contains(q, d) {
						t.Fatalf("error %q quotes %q, part of the credentials %q", err, q, r)
					}
				}
			}
		}
		// The markers never appear when the line has them only as
		// credentials.
		for _, m := range []string{userMarker, passMarker} {
			if strings.Contains(line, m) && !strings.Contains(rest, m) && strings.Contains(err.Error(), m) {
				t.Fatalf("error %q shows credentials from line %q", err, line)
			}
		}
	})
}

// FuzzParseURL checks that ParseURL never panics, that its result is
// canonical and complete, and that its errors never show credentials.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"http://10.0.0.1:3128", "HTTPS://P.Example", "socks5h://[2001:DB8::1]", "socks5://[fe80::1%25eth0]:1",
		"http://{user}:{pass}@p.example:8080/", "http://{user}:{pass}/x@p.example", "{user}:{pass}@p.example:1",
		"http://:{pass}@p.example", "http://{user}@p.example:0080", "http://@p.example", "http://p.example:", "ftp://x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		raw = expandMarkers(raw)
		u, err := proxies.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, proxies.ErrBadURL) {
				t.Fatalf("error %v does not wrap ErrBadURL", err)
			}
			if strings.Contains(err.Error(), userMarker) || strings.Contains(err.Error(), passMarker) {
				t.Fatalf("error %q shows credentials", err)
			}
			return
		}
		if u.Port() == "" || u.Hostname() == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("ParseURL(%q) = %q: incomplete", raw, u)
		}
		again, err := proxies.ParseURL(u.String())
		if err != nil {
			t.Fatalf("ParseURL(%q) = %q, which does not parse: %v", raw, u, err)
		}
		if again.String() != u.String() {
			t.Fatalf("ParseURL(%q) = %q, then %q", raw, u, again)
		}
		id := proxies.Identity(u)
		if id != proxies.Identity(again) {
			t.Fatalf("identity changed: %q, %q", id, proxies.Identity(again))
		}
		if u.User != nil && !strings.Contains(id, "#") {
			t.Fatalf("Identity(%q) = %q: no user hash", u, id)
		}
		for _, m := range []string{userMarker, passMarker} {
			if strings.Contains(id, m) || strings.Contains(proxies.RedactURL(u.String()), m) ||
				strings.Contains(proxies.NewRedactor(nil).String("x "+u.String()+" y"), m) {
				t.Fatalf("credentials shown for %q", u)
			}
		}
	})
}
