package cmd

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// writeFile writes content to name in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func Test_NewCmdFetch(t *testing.T) {
	dir := t.TempDir()
	proxyFile := writeFile(t, dir, "proxies.txt", "# two proxies\nhttp://127.0.0.1:8081 concurrency=2\nsocks5://u:p@127.0.0.1:1080\n")
	sessionFile := writeFile(t, dir, "sessions.txt", "http://cust-{session}:pw@127.0.0.1:8081 sessions=5 rotate=request\n")
	badSessions := writeFile(t, dir, "bad-sessions.txt", "\nhttp://cust:pw@127.0.0.1:8081 sessions=5\n")

	tests := []struct {
		name        string
		args        []string
		wantInputs  []string
		wantCfg     func(*fetch.Config) // applied to fetch.DefaultConfig()
		wantOpts    func(*testing.T, *FetchOptions)
		wantProxies int
		wantErr     string
	}{
		{
			name:    "defaults",
			args:    []string{},
			wantCfg: func(c *fetch.Config) {},
		},
		{
			name:       "inputs in order",
			args:       []string{"a.txt", "-", "b.txt"},
			wantInputs: []string{"a.txt", "-", "b.txt"},
			wantCfg:    func(c *fetch.Config) {},
		},
		{
			name: "limits",
			args: []string{"-c", "8", "--proxy-concurrency", "3", "--proxy-rate", "5/2s", "--proxy-burst", "4",
				"--host-concurrency", "2", "--host-rate", "10/m", "--host-burst", "3", "--rate", "100/s", "--policy", "round-robin"},
			wantCfg: func(c *fetch.Config) {
				c.Concurrency, c.ProxyConcurrency, c.ProxyBurst = 8, 3, 4
				c.ProxyRate = limits.Rate{N: 5, Per: 2 * time.Second}
				c.HostConcurrency, c.HostBurst = 2, 3
				c.HostRate = limits.Rate{N: 10, Per: time.Minute}
				c.Rate = limits.Rate{N: 100, Per: time.Second}
				c.Policy = limits.RoundRobin
			},
		},
		{
			name: "timeouts and retries",
			args: []string{"--connect-timeout", "1s", "--header-timeout", "2s", "--idle-timeout", "3s", "-t", "4s",
				"--retries", "0", "--retry-backoff", "50ms", "--retry-status", "500, 503,500", "--grace", "0s"},
			wantCfg: func(c *fetch.Config) {
				c.ConnectTimeout, c.HeaderTimeout, c.IdleTimeout, c.Timeout = time.Second, 2*time.Second, 3*time.Second, 4*time.Second
				c.Retries, c.RetryBackoff, c.RetryStatus = 0, 50*time.Millisecond, []int{500, 503}
				c.Grace = 0
			},
		},
		{
			name:    "empty retry status list",
			args:    []string{"--retry-status", ""},
			wantCfg: func(c *fetch.Config) { c.RetryStatus = []int{} },
		},
		{
			name: "requests and bodies",
			args: []string{"-X", "HEAD", "-H", "User-Agent: fetch-test", "-H", "x-a: 1", "-H", "X-A:2, 3", "-H", "X-Empty:",
				"--max-redirects", "0", "--max-body", "10MB", "--save-dir", "bodies", "-k"},
			wantCfg: func(c *fetch.Config) {
				c.Method = "HEAD"
				c.Header = http.Header{"User-Agent": {"fetch-test"}, "X-A": {"1", "2, 3"}, "X-Empty": {""}}
				c.MaxRedirects, c.MaxBody, c.SaveDir, c.Insecure = 0, 10_000_000, "bodies", true
			},
		},
		{
			name:    "max request body",
			args:    []string{"--max-request-body", "2MiB"},
			wantCfg: func(c *fetch.Config) { c.MaxRequestBody = 2 << 20 },
		},
		{
			name:    "output",
			args:    []string{"-o", "out.jsonl", "--report", "report.json", "-q"},
			wantCfg: func(c *fetch.Config) {},
			wantOpts: func(t *testing.T, o *FetchOptions) {
				if o.Output != "out.jsonl" || o.Report != "report.json" || !o.Quiet {
					t.Errorf("output options = %q %q %v", o.Output, o.Report, o.Quiet)
				}
			},
		},
		{
			name:    "resume",
			args:    []string{"-o", "out.jsonl", "--resume"},
			wantCfg: func(c *fetch.Config) {},
			wantOpts: func(t *testing.T, o *FetchOptions) {
				if o.Output != "out.jsonl" || !o.Resume {
					t.Errorf("output options = %q %v", o.Output, o.Resume)
				}
			},
		},
		{
			name:        "proxies from a file and a flag",
			args:        []string{"-p", proxyFile, "--proxy", "http://127.0.0.9:3128"},
			wantCfg:     func(c *fetch.Config) {},
			wantProxies: 3,
		},
		{
			name: "sessions, rotation, bans and hosts that are down",
			args: []string{"--proxy-rotate", "request", "--ban-status", "403,429", "--ban-match", "(?i)captcha", "--ban-scan", "8k", "--host-max-failures", "0"},
			wantCfg: func(c *fetch.Config) {
				c.ProxyRotate = proxies.RotateRequest
				c.BanStatus, c.BanMatch, c.BanScan = []int{403, 429}, regexp.MustCompile("(?i)captcha"), 8<<10
				c.HostMaxFailures = 0
			},
		},
		{
			name:    "retry-after-max",
			args:    []string{"--retry-after-max", "90s"},
			wantCfg: func(c *fetch.Config) { c.RetryAfterMax = 90 * time.Second },
		},
		{name: "negative retry-after-max", args: []string{"--retry-after-max", "-1s"}, wantErr: "--retry-after-max: want 0 (never) or more"},
		{name: "bad rotate", args: []string{"--proxy-rotate", "always"}, wantErr: "want never or request"},
		{name: "bad ban match", args: []string{"--ban-match", "(unclosed"}, wantErr: "bad regular expression"},
		{name: "bad ban status", args: []string{"--ban-status", "6000"}, wantErr: "bad status"},
		{name: "zero ban scan", args: []string{"--ban-scan", "0"}, wantErr: "--ban-scan: want from 1 byte to 64MiB"},
		{name: "huge ban scan", args: []string{"--ban-scan", "1g"}, wantErr: "--ban-scan"},
		{name: "negative host max failures", args: []string{"--host-max-failures", "-1"}, wantErr: "--host-max-failures -1: want an integer from 0 to 1000000 (0: never skip)"},
		{
			name:        "a line with sessions",
			args:        []string{"-p", sessionFile},
			wantCfg:     func(c *fetch.Config) {},
			wantProxies: 5,
		},
		{name: "sessions without {session}", args: []string{"-p", badSessions}, wantErr: badSessions + ":2: sessions= needs {session} in the user name or password"},
		{name: "bad rate", args: []string{"--proxy-rate", "fast"}, wantErr: "bad rate"},
		{name: "bad rate period", args: []string{"--rate", "5/0s"}, wantErr: "bad rate"},
		{name: "bad size", args: []string{"--max-body", "lots"}, wantErr: "bad size"},
		{name: "zero size", args: []string{"--max-body", "0"}, wantErr: "--max-body"},
		{name: "zero request body", args: []string{"--max-request-body", "0"}, wantErr: "--max-request-body"},
		{name: "huge request body", args: []string{"--max-request-body", "1GiB"}, wantErr: "--max-request-body"},
		{name: "bad status", args: []string{"--retry-status", "429,abc"}, wantErr: "bad status"},
		{name: "status out of range", args: []string{"--retry-status", "42"}, wantErr: "bad status"},
		{name: "bad duration", args: []string{"-t", "soon"}, wantErr: "invalid argument"},
		{name: "zero timeout", args: []string{"--connect-timeout", "0s"}, wantErr: "--connect-timeout"},
		{name: "zero concurrency", args: []string{"-c", "0"}, wantErr: "--concurrency"},
		{name: "negative retries", args: []string{"--retries", "-1"}, wantErr: "--retries"},
		{name: "bad policy", args: []string{"--policy", "fastest"}, wantErr: "--policy"},
		{name: "bad header", args: []string{"-H", "no colon"}, wantErr: "bad header"},
		{name: "bad method", args: []string{"-X", "GE T"}, wantErr: "--method"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "unknown flag"},
		{name: "stdin twice", args: []string{"-", "-"}, wantErr: "only once"},
		{
			name:    "distributed mode",
			args:    []string{"--redis", "redis://127.0.0.1:1", "--namespace", "n1", "--shard", "2/3", "--lease-ttl", "3s"},
			wantCfg: func(c *fetch.Config) { c.Shard = input.Shard{K: 2, N: 3} },
			wantOpts: func(t *testing.T, o *FetchOptions) {
				if len(o.Redis) != 1 || o.Redis[0] != "redis://127.0.0.1:1" || o.Namespace != "n1" || o.LeaseTTL != 3*time.Second {
					t.Errorf("distributed options = %q %q %s", o.Redis, o.Namespace, o.LeaseTTL)
				}
			},
		},
		{name: "bad shard", args: []string{"--shard", "0/2"}, wantErr: "--shard"},
		{name: "short lease", args: []string{"--redis", "redis://127.0.0.1:1", "--lease-ttl", "10ms"}, wantErr: "--lease-ttl"},
		{name: "resume without -o", args: []string{"--resume"}, wantErr: "--resume needs -o FILE"},
		{name: "resume to stdout", args: []string{"--resume", "-o", "-"}, wantErr: "--resume needs -o FILE"},
		{name: "missing cacert", args: []string{"--cacert", filepath.Join(dir, "nope.pem")}, wantErr: "--cacert"},
		{name: "cacert without certificates", args: []string{"--cacert", proxyFile}, wantErr: "no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := Test()
			var got *FetchOptions
			cmd := NewCmdFetch(ios, func(o *FetchOptions) error { got = o; return nil })
			cmd.SetArgs(tt.args)
			err := cmd.ExecuteContext(context.Background())
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("want an error containing %q, got none", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %q does not contain %q", err, tt.wantErr)
				}
				if code := ExitCode(ios, err); code != ExitUsage {
					t.Errorf("exit code %d, want %d", code, ExitUsage)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got == nil {
				t.Fatal("run function not called")
			}
			if !reflect.DeepEqual(got.Inputs, tt.wantInputs) && !(len(got.Inputs) == 0 && len(tt.wantInputs) == 0) {
				t.Errorf("inputs = %q, want %q", got.Inputs, tt.wantInputs)
			}
			if len(got.Config.Proxies) != tt.wantProxies {
				t.Errorf("%d proxies, want %d", len(got.Config.Proxies), tt.wantProxies)
			}
			want := fetch.DefaultConfig()
			want.Header = http.Header{}
			tt.wantCfg(&want)
			gotCfg := got.Config
			gotCfg.Proxies = nil
			if !reflect.DeepEqual(gotCfg, want) {
				t.Errorf("config =\n%+v\nwant\n%+v", gotCfg, want)
			}
			if tt.wantOpts != nil {
				tt.wantOpts(t, got)
			}
		})
	}
}

func TestRun_usageErrors(t *testing.T) {
	dir := t.TempDir()
	urls := writeFile(t, dir, "urls.txt", "http://127.0.0.1:1/\n")
	malformed := writeFile(t, dir, "bad-proxies.txt", "# ok so far\nhttp://127.0.0.1:8081\nhttp://user:s3cret@127.0.0.1:notaport\n")
	empty := writeFile(t, dir, "empty-proxies.txt", "# nothing here\n\n")
	unreadable := filepath.Join(dir, "missing.txt")
	// Outputs of an earlier run: a usage error must leave them as they are.
	keep := writeFile(t, dir, "keep.jsonl", "{\"url\":\"earlier\"}\n")
	keepReport := writeFile(t, dir, "keep-report.json", "{\"jobs\":1}\n")
	notResults := writeFile(t, dir, "not-results.txt", "http://user:s3cret@127.0.0.1:1/\n")
	notRecords := writeFile(t, dir, "not-records.jsonl", "[1,2]\n")
	closed := closedAddr(t)

	tests := []struct {
		name       string
		args       []string
		wantStderr []string
		notStderr  []string
	}{
		{name: "bad rate", args: []string{"--host-rate", "1/fortnight", urls}, wantStderr: []string{"bad rate"}},
		{name: "bad size", args: []string{"--max-body", "12XB", urls}, wantStderr: []string{"bad size"}},
		{
			name:       "malformed proxy file names FILE:LINE, never the password",
			args:       []string{"-p", malformed, urls},
			wantStderr: []string{malformed + ":3"},
			notStderr:  []string{"s3cret"},
		},
		{name: "empty proxy file", args: []string{"-p", empty, urls}, wantStderr: []string{empty}},
		{name: "missing proxy file", args: []string{"-p", filepath.Join(dir, "nope.txt"), urls}, wantStderr: []string{"nope.txt"}},
		{name: "unreadable input", args: []string{urls, unreadable}, wantStderr: []string{"missing.txt"}},
		{name: "input is a directory", args: []string{dir}, wantStderr: []string{"directory"}},
		{name: "output dir missing", args: []string{"-o", filepath.Join(dir, "no", "out.jsonl"), urls}, wantStderr: []string{"--output"}},
		{name: "report dir missing", args: []string{"--report", filepath.Join(dir, "no", "r.json"), urls}, wantStderr: []string{"--report"}},
		{name: "redis unreachable", args: []string{"--redis", "redis://:pw0rd@" + closed, urls}, wantStderr: []string{"cannot reach Redis at redis://***@" + closed}, notStderr: []string{"pw0rd"}},
		{name: "resume without -o", args: []string{"--resume", urls}, wantStderr: []string{"--resume needs -o"}},
		{name: "resume of a file that is not results", args: []string{"--resume", "-o", notResults, urls}, wantStderr: []string{"fetch: --resume " + notResults + ": line 1 is not JSON: this is not a results file of fetch"}, notStderr: []string{"fetch: fetch:", "s3cret", "struct"}},
		{name: "resume of JSON that is not results", args: []string{"--resume", "-o", notRecords, urls}, wantStderr: []string{"line 1 is a JSON array, not a record"}, notStderr: []string{"struct {"}},
		{name: "huge concurrency", args: []string{"-c", "999999999999", urls}, wantStderr: []string{"--concurrency 999999999999: want an integer from 1 to 100000"}},
		{name: "huge retries", args: []string{"--retries", "1000000", urls}, wantStderr: []string{"--retries 1000000: want an integer from 0 to 100"}},
		{name: "huge proxy concurrency", args: []string{"--proxy-concurrency", "2000000", urls}, wantStderr: []string{"from 1 to 1000000"}},
		{name: "negative host concurrency", args: []string{"--host-concurrency", "-1", urls}, wantStderr: []string{"from 0 to 1000000 (0: unlimited)"}},
		{name: "huge burst", args: []string{"--host-burst", "1000001", urls}, wantStderr: []string{"--host-burst"}},
		{name: "huge redirects", args: []string{"--max-redirects", "101", urls}, wantStderr: []string{"--max-redirects"}},
		{name: "rate too large", args: []string{"--rate", "1e308/s", urls}, wantStderr: []string{"too large: at most 1e9 per second"}},
		{name: "demo huge urls", args: []string{"demo", "--urls", "1000000000"}, wantStderr: []string{"--urls 1000000000"}},
		{name: "demo bad urls", args: []string{"demo", "--urls", "0"}, wantStderr: []string{"--urls"}},
		{name: "bad report keeps the output", args: []string{"-o", keep, "--save-dir", filepath.Join(dir, "saved"), "--report", filepath.Join(dir, "no", "r.json"), urls}, wantStderr: []string{"--report"}},
		{name: "bad output makes no report", args: []string{"--report", filepath.Join(dir, "new-report.json"), "-o", filepath.Join(dir, "no", "out.jsonl"), urls}, wantStderr: []string{"--output"}},
		{name: "bad proxy keeps the output", args: []string{"-o", keep, "--report", keepReport, "-p", malformed, urls}, wantStderr: []string{malformed + ":3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, stdout, stderr := Test()
			code := Run(context.Background(), ios, tt.args)
			if code != ExitUsage {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, ExitUsage, stderr)
			}
			for _, s := range tt.wantStderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr does not contain %q:\n%s", s, stderr)
				}
			}
			for _, s := range tt.notStderr {
				if strings.Contains(stderr.String(), s) {
					t.Errorf("stderr contains %q:\n%s", s, stderr)
				}
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout not empty on a usage error:\n%s", stdout)
			}
			for f, want := range map[string]string{keep: "{\"url\":\"earlier\"}\n", keepReport: "{\"jobs\":1}\n"} {
				if b, err := os.ReadFile(f); err != nil || string(b) != want {
					t.Errorf("%s changed by a usage error: %q %v", f, b, err)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "new-report.json")); err == nil {
				t.Errorf("a usage error left a new report file behind")
			}
			if _, err := os.Stat(filepath.Join(dir, "saved")); err == nil {
				t.Errorf("--save-dir created although the run never started")
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, ExitOK},
		{"not all ok", ErrNotAllOK, ExitNotAllOK},
		{"usage", usageErrorf("bad"), ExitUsage},
		{"cancelled", context.Canceled, ExitInterrupted},
		{"wrapped cancel", &wrapErr{context.Canceled}, ExitInterrupted},
		{"other", os.ErrClosed, ExitNotAllOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ios, _, _, _ := Test()
			if got := ExitCode(ios, tt.err); got != tt.want {
				t.Errorf("ExitCode(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

type wrapErr struct{ err error }

func (e *wrapErr) Error() string { return "wrapped: " + e.err.Error() }
func (e *wrapErr) Unwrap() error { return e.err }

// TestCountLines: the progress bar's total counts the lines the engine
// takes (input.Count, the engine's own reader).
func TestCountLines(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{"empty", "", 0},
		{"one without newline", "http://a/", 1},
		{"blank and comments", "\n  \n# c\n  # c2\nhttp://a/\r\n\thttp://b/  \n", 2},
		{"BOM", "\ufeffhttp://a/\n\ufeff\n", 1}, // a BOM is stripped from any line, as the engine does
		{"BOM only", "\ufeff\nhttp://a/", 1},
		{"long lines counted once", long + "\n" + long + "\nhttp://a/\n", 3},
		{"long white space", strings.Repeat(" ", 100<<10) + "http://a/\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := input.Count(context.Background(), input.Source{Name: "-", R: strings.NewReader(tt.in)}, input.Shard{}, nil, 0)
			if err != nil || got != tt.want {
				t.Errorf("input.Count = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestDemoFlags(t *testing.T) {
	ios, _, _, _ := Test()
	var got *DemoOptions
	cmd := NewCmdDemo(ios, func(o *DemoOptions) error { got = o; return nil })
	cmd.SetArgs([]string{"--urls", "50", "-o", "out.jsonl", "-q"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got.URLs != 50 || got.Output != "out.jsonl" || !got.Quiet {
		t.Errorf("options = %+v", got)
	}
}
