package fetch

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
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

// jobsOf reads data as one input and returns its jobs.
func jobsOf(t testing.TB, data []byte) []*job {
	q := newJobQueue(4)
	var jobs []*job
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			j, ok := q.take(context.Background())
			if !ok {
				return
			}
			jobs = append(jobs, j)
		}
	}()
	err := readInputs(context.Background(), []Input{{Name: "fuzz.txt", R: bytes.NewReader(data)}}, Shard{}, nil, new(atomic.Int64), q)
	q.close()
	<-done
	if err != nil {
		t.Fatalf("readInputs: %v", err)
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
			if j.line != want[i] || j.input != "fuzz.txt" {
				t.Fatalf("job %d is %s:%d, want fuzz.txt:%d", i, j.input, j.line, want[i])
			}
			if (j.url == nil) == (j.invalid == "") {
				t.Fatalf("line %d: url %v and invalid %q: want exactly one", j.line, j.url, j.invalid)
			}
			if j.url != nil {
				// What records show (and --resume keys on) is String's form.
				shown := *j.url
				shown.User = nil
				if j.shown != shown.String() {
					t.Fatalf("line %d: shown %q, want %q", j.line, j.shown, shown.String())
				}
			}
			// A URL is shown as it is requested: bytes that need it are
			// percent-encoded, which can make it up to three times longer.
			if len(j.shown) > 3*MaxLineBytes+8 {
				t.Fatalf("line %d: shown URL of %d bytes", j.line, len(j.shown))
			}
			for _, m := range secretMarks(physical[j.line-1]) {
				for _, s := range []string{j.shown, j.invalid} {
					if strings.Contains(s, m) {
						t.Fatalf("line %d: credentials in %q", j.line, s)
					}
				}
			}
			if j.url == nil {
				continue
			}
			if j.url.Scheme != "http" && j.url.Scheme != "https" || j.url.Host == "" {
				t.Fatalf("line %d: job for %v", j.line, j.url)
			}
			if h, p, err := net.SplitHostPort(j.host); err != nil || h == "" || p == "" {
				t.Fatalf("line %d: host key %q: %v", j.line, j.host, err)
			}
			if _, err := http.NewRequest(http.MethodGet, j.url.String(), nil); err != nil {
				t.Fatalf("line %d: valid line, but no request can be made: %v", j.line, err)
			}
			if su, err := url.Parse(j.shown); err != nil || su.User != nil {
				t.Fatalf("line %d: shown %q (%v) keeps userinfo or does not parse", j.line, j.shown, err)
			}
		}
	})
}

// endless yields prefix and then n bytes of filler, never a line end.
type endless struct {
	prefix string
	n      int64
	off    int64
}

func (e *endless) Read(p []byte) (int, error) {
	total := int64(len(e.prefix)) + e.n
	if e.off >= total {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.off < total {
		if e.off < int64(len(e.prefix)) {
			p[k] = e.prefix[e.off]
		} else {
			p[k] = 'a'
		}
		k++
		e.off++
	}
	return k, nil
}

// TestHugeLineMemory reads a 10 MiB line with no line end: one invalid
// job, and far less than 10 MiB allocated on the way.
func TestHugeLineMemory(t *testing.T) {
	const size = 10 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	q := newJobQueue(4)
	err := readInputs(context.Background(), []Input{{Name: "huge", R: &endless{prefix: "http://example.com/", n: size}}}, Shard{}, nil, new(atomic.Int64), q)
	runtime.ReadMemStats(&after)
	q.close()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*job
	for j := range q.jobs {
		jobs = append(jobs, j)
	}
	if len(jobs) != 1 || jobs[0].invalid == "" || jobs[0].line != 1 {
		t.Fatalf("jobs %+v, want one invalid job for line 1", jobs)
	}
	if len(jobs[0].shown) > 512 {
		t.Errorf("shown URL of %d bytes", len(jobs[0].shown))
	}
	// Allocations by the rest of the process count too; 2 MiB is still a
	// fifth of the line.
	if got := after.TotalAlloc - before.TotalAlloc; got > 2<<20 {
		t.Errorf("reading a %d-byte line allocated %d bytes", size, got)
	}
}

// recorder keeps records in memory.
type recorder struct {
	mu   sync.Mutex
	recs []*results.Record
}

func (r *recorder) Write(rec *results.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
	return nil
}

// TestBadInput runs bad inputs through the engine: every line taken gets a
// record, bad lines as input/invalid with no request sent, and nothing
// panics.
func TestBadInput(t *testing.T) {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ok := tg.URL + "/ok?size=3"
	type want struct {
		line    int
		invalid bool
	}
	cases := []struct {
		name  string
		input io.Reader
		want  []want
	}{
		{"empty", strings.NewReader(""), nil},
		{"bom only", strings.NewReader("\ufeff"), nil},
		{"bom and crlf", strings.NewReader("\ufeff" + ok + "\r\n# c\r\n\r\n" + ok + "\r\n"), []want{{1, false}, {4, false}}},
		{"binary garbage", bytes.NewReader([]byte("\x00\x01\xff\xfe\n\x89PNG\r\n\x1a\n" + ok + "\n\xc3\x28\n")),
			[]want{{1, true}, {2, true}, {3, true}, {4, false}, {5, true}}},
		{"control characters in a URL", strings.NewReader(ok + "\x00x\n" + tg.URL + "/a\x7fb\n"), []want{{1, true}, {2, true}}},
		{"line over 8 KiB", strings.NewReader(tg.URL + "/" + strings.Repeat("x", MaxLineBytes) + "\n" + ok + "\n"), []want{{1, true}, {2, false}}},
		{"comment and blank lines over 8 KiB", strings.NewReader("# " + strings.Repeat("c", MaxLineBytes) + "\n" + strings.Repeat(" ", MaxLineBytes+5) + "\n" + ok + "\n"), []want{{3, false}}},
		{"line of exactly 8 KiB", strings.NewReader(tg.URL + "/" + strings.Repeat("x", MaxLineBytes-len(tg.URL)-1) + "\r\n"), []want{{1, false}}},
		{"10 MiB line without a line end", &endless{prefix: ok, n: 10 << 20}, []want{{1, true}}},
		{"bom at the start of a later file", strings.NewReader(ok + "\n\ufeff" + ok + "\n\ufeff# comment\n"), []want{{1, false}, {2, false}}},
		{"port outside 1-65535", strings.NewReader(tg.URL[:strings.LastIndexByte(tg.URL, ':')] + ":0/\n" + "http://127.0.0.1:65536/\nhttp://127.0.0.1:99999999999999999999/\n"),
			[]want{{1, true}, {2, true}, {3, true}}},
		{"not absolute", strings.NewReader("//example.com/x\n/x\nexample.com\nhttp:/x\nhttp:x\n"),
			[]want{{1, true}, {2, true}, {3, true}, {4, true}, {5, true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tg.ResetStats()
			cfg := DefaultConfig()
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			w := &recorder{}
			if _, err := e.Run(context.Background(), []Input{{Name: "in", R: c.input}}, w); err != nil {
				t.Fatal(err)
			}
			if len(w.recs) != len(c.want) {
				t.Fatalf("%d records, want %d", len(w.recs), len(c.want))
			}
			byLine := map[int]*results.Record{}
			for _, r := range w.recs {
				byLine[r.Line] = r
			}
			valid := 0
			for _, wt := range c.want {
				r := byLine[wt.line]
				if r == nil {
					t.Fatalf("no record for line %d", wt.line)
				}
				if wt.invalid {
					if r.OK || r.Error == nil || r.Error.Phase != results.PhaseInput || r.Error.Kind != results.KindInvalid || r.Attempts != 0 {
						t.Errorf("line %d: ok=%v attempts=%d error %+v, want input/invalid", wt.line, r.OK, r.Attempts, r.Error)
					}
					if len(r.URL) > MaxLineBytes+8 {
						t.Errorf("line %d: record URL of %d bytes", wt.line, len(r.URL))
					}
				} else {
					valid++
					if !r.OK {
						t.Errorf("line %d: %+v", wt.line, r.Error)
					}
				}
			}
			if got := tg.Requests(); got != valid {
				t.Errorf("target got %d requests, want %d: invalid lines must send none", got, valid)
			}
		})
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
		if len(jobs) != 1 || jobs[0].invalid == "" {
			t.Fatalf("%q: jobs %+v, want one invalid", tt.line, jobs)
		}
		j := jobs[0]
		if j.shown != tt.shown {
			t.Errorf("%q shown as %q, want %q", tt.line, j.shown, tt.shown)
		}
		if strings.Contains(j.invalid, "S3C") || strings.Contains(j.invalid, "pw") {
			t.Errorf("%q: message %q", tt.line, j.invalid)
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
		if len(jobs) != 1 || jobs[0].invalid == "" {
			t.Fatalf("jobs %+v", jobs)
		}
		if s := jobs[0].shown; strings.Contains(s, "user") || strings.Contains(s, "SSS") || strings.Contains(s, "pw") {
			t.Errorf("record shows %q", s)
		}
	}
}
