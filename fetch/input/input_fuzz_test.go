package input

import (
	"bytes"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// Credential markers: the fuzzer's "{user}" and "{pass}" become these, so
// that a check can tell credentials it must never see in a record.
const (
	userMark = "uSeRmArK"
	passMark = "pAsSmArK"
)

// schemeRE is RFC 3986's scheme syntax, written apart from the code it checks.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`)

func expandMarks(s string) string {
	return strings.NewReplacer("{user}", userMark, "{pass}", passMark).Replace(s)
}

// jobsOf reads data as one input and returns its lines parsed for work.
func jobsOf(t testing.TB, data []byte) []*Line {
	s := NewScanner(Source{Name: "fuzz.txt", R: bytes.NewReader(data)}, Shard{}, nil)
	var jobs []*Line
	for s.Scan() {
		jobs = append(jobs, s.Line())
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return jobs
}

// takenLines is the specification of which physical lines of data are taken
// for work: every line over MaxLineBytes (counted before the BOM of line 1
// is removed, as read), and every other line that is neither blank nor a
// comment once trimmed.
func takenLines(data []byte) []int {
	if len(data) == 0 {
		return nil
	}
	lines := bytes.Split(data, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1] // data ends with a line end
	}
	var taken []int
	for i, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		long := len(l) > MaxLineBytes
		l = bytes.TrimPrefix(l, bom) // on any line: inputs may be files put end to end
		s := strings.TrimSpace(string(l))
		_ = long // a long comment or blank line is still skipped
		if s != "" && !strings.HasPrefix(s, "#") {
			taken = append(taken, i+1)
		}
	}
	return taken
}

// secretMarks returns the markers that line holds as credentials only: in
// the userinfo of its URL as net/url parses it or, when it does not parse
// (a password may hold a raw "/"), anywhere before the line's last "@" but
// after a leading "scheme://" (RFC 3986 scheme syntax), and nowhere else in
// the line.
func secretMarks(line string) []string {
	line = strings.TrimSpace(strings.TrimPrefix(line, "\ufeff"))
	var creds string
	if u, err := url.Parse(line); err == nil {
		if u.User == nil {
			return nil
		}
		creds = u.User.String()
	} else {
		at := strings.LastIndexByte(line, '@')
		if at < 0 {
			return nil
		}
		creds = line[:at]
		if i := strings.Index(creds, "://"); i > 0 && schemeRE.MatchString(creds[:i]) {
			creds = creds[i+3:]
		}
	}
	var marks []string
	for _, m := range []string{userMark, passMark} {
		if strings.Contains(creds, m) && strings.Count(line, m) == strings.Count(creds, m) {
			marks = append(marks, m)
		}
	}
	return marks
}

// FuzzParseLine feeds whole input files to the URL-line reader and checks,
// whatever the bytes: no panic; exactly the lines the specification takes
// become jobs, with their line numbers; a job is either invalid (with a
// reason and a short shown URL) or an absolute http(s) URL that net/http
// accepts as a request; and credentials in a URL's userinfo never reach
// what a record shows.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		"http://example.com/a\n",
		"\ufeffhttps://example.com/b\r\nhttp://example.com/c\r\n",
		"",
		"\n\n# comment\n   \t\n",
		"ftp://example.com/x\nno-scheme.example/x\nmailto:a@b\n",
		"http://{user}:{pass}@example.com/x\nhttp://{user}:{pass}@/x\nhttp://{user}:{pass}@[::1/x\n",
		"http://\nhttps://:443/\nhttp://[::1]:80/\nhttp://[fe80::1%25eth0]/\nHTTP://EXAMPLE.COM\n",
		"http://a b/\nhttp://a/\x00b\nhttp://a/\x7f\n\x01\x02\x03\n",
		"http://a/" + strings.Repeat("x", MaxLineBytes) + "\nhttp://b/\n",
		"\ufeff",
		"\r\n\r",
		"http://a:99999/\nhttp://a:-1/\nhttp://a:/\n",
		"http://{user}:{pass}/x@127.0.0.1:1/\nhttp://{user}:{pass}?#@h/\nhttp://a/\n\ufeffhttp://b/\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		data = []byte(expandMarks(string(data)))
		jobs := jobsOf(t, data)
		want := takenLines(data)
		if len(jobs) != len(want) {
			t.Fatalf("%d jobs, want %d (lines %v)", len(jobs), len(want), want)
		}
		physical := strings.Split(string(data), "\n")
		for i, j := range jobs {
			if j.Number != want[i] || j.Input != "fuzz.txt" {
				t.Fatalf("job %d is %s:%d, want fuzz.txt:%d", i, j.Input, j.Number, want[i])
			}
			if (j.URL == nil) == (j.Invalid == "") {
				t.Fatalf("line %d: url %v and invalid %q: want exactly one", j.Number, j.URL, j.Invalid)
			}
			if j.URL != nil {
				// What records show (and --resume keys on) is String's form.
				shown := *j.URL
				shown.User = nil
				if j.Shown != shown.String() {
					t.Fatalf("line %d: shown %q, want %q", j.Number, j.Shown, shown.String())
				}
			}
			// A URL is shown as it is requested: bytes that need it are
			// percent-encoded, which can make it up to three times longer.
			if len(j.Shown) > 3*MaxLineBytes+8 {
				t.Fatalf("line %d: shown URL of %d bytes", j.Number, len(j.Shown))
			}
			for _, m := range secretMarks(physical[j.Number-1]) {
				for _, s := range []string{j.Shown, j.Invalid} {
					if strings.Contains(s, m) {
						t.Fatalf("line %d: credentials in %q", j.Number, s)
					}
				}
			}
			if j.URL == nil {
				continue
			}
			if j.URL.Scheme != "http" && j.URL.Scheme != "https" || j.URL.Host == "" {
				t.Fatalf("line %d: job for %v", j.Number, j.URL)
			}
			if h, p, err := net.SplitHostPort(j.Host); err != nil || h == "" || p == "" {
				t.Fatalf("line %d: host key %q: %v", j.Number, j.Host, err)
			}
			if _, err := http.NewRequest(http.MethodGet, j.URL.String(), nil); err != nil {
				t.Fatalf("line %d: valid line, but no request can be made: %v", j.Number, err)
			}
			if su, err := url.Parse(j.Shown); err != nil || su.User != nil {
				t.Fatalf("line %d: shown %q (%v) keeps userinfo or does not parse", j.Number, j.Shown, err)
			}
		}
	})
}

// TestHugeLineMemory reads a 10 MiB line with no line end: one invalid
// job, and far less than 10 MiB allocated on the way.
func TestHugeLineMemory(t *testing.T) {
	const size = 10 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := NewScanner(Source{Name: "huge", R: &fetchtest.Endless{Prefix: "http://example.com/", N: size}}, Shard{}, nil)
	var jobs []*Line
	for s.Scan() {
		jobs = append(jobs, s.Line())
	}
	runtime.ReadMemStats(&after)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Invalid == "" || jobs[0].Number != 1 {
		t.Fatalf("jobs %+v, want one invalid job for line 1", jobs)
	}
	if len(jobs[0].Shown) > 512 {
		t.Errorf("shown URL of %d bytes", len(jobs[0].Shown))
	}
	// Allocations by the rest of the process count too; 2 MiB is still a
	// fifth of the line.
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("reading a %d-byte line allocated %d bytes", size, got)
	}
}

// TestInvalidLineCredentials: whatever an invalid line holds, neither what
// its record shows nor its message includes what could be user
// information, even a password with a raw "/", "?", "#" or "@" that net/url
// cannot tell from the path.
func TestInvalidLineCredentials(t *testing.T) {
	for _, tt := range []struct {
		line  string
		shown string
	}{
		{"http://u:S3CRET/x@127.0.0.1:1/", "http://127.0.0.1:1/"},
		{"http://u:S3CRET?x@127.0.0.1:1/", "http://127.0.0.1:1/"},
		{"http://u:S3CRET#x@127.0.0.1:1/", "http://127.0.0.1:1/"},
		{"https://S3CRET:p w@h/", "https://h/"},
		{"//S3CRET:pw@h:x/", "//h:x/"},
		{"S3CRET:pw@h/", "h/"}, // parses with the scheme "S3CRET"
		{"ftp://S3CRET:pw@h/", "ftp://h/"},
		{"http://u:S3CRET@h:99999/", "http://h:99999/"},
	} {
		jobs := jobsOf(t, []byte(tt.line+"\n"))
		if len(jobs) != 1 || jobs[0].Invalid == "" {
			t.Fatalf("%q: jobs %+v, want one invalid", tt.line, jobs)
		}
		j := jobs[0]
		if j.Shown != tt.shown {
			t.Errorf("%q shown as %q, want %q", tt.line, j.Shown, tt.shown)
		}
		if strings.Contains(j.Invalid, "S3C") || strings.Contains(j.Invalid, "pw") {
			t.Errorf("%q: message %q", tt.line, j.Invalid)
		}
	}
}

// TestLongLineCredentials: a line over 8 KiB whose user information runs
// past the part a record keeps never shows any of it.
func TestLongLineCredentials(t *testing.T) {
	for _, line := range []string{
		"https://user:" + strings.Repeat("S", 400) + "@example.com/p?q=" + strings.Repeat("a", MaxLineBytes),
		"https://user:pw@example.com/p?q=" + strings.Repeat("a", MaxLineBytes),
		"//user:" + strings.Repeat("S", 300) + "@example.com/" + strings.Repeat("a", MaxLineBytes),
	} {
		jobs := jobsOf(t, []byte(line+"\n"))
		if len(jobs) != 1 || jobs[0].Invalid == "" {
			t.Fatalf("jobs %+v", jobs)
		}
		if s := jobs[0].Shown; strings.Contains(s, "user") || strings.Contains(s, "SSS") || strings.Contains(s, "pw") {
			t.Errorf("record shows %q", s)
		}
	}
}
