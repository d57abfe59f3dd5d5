package fetch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"unicode"

	"github.com/fetch-dev/fetch/proxies"
)

// MaxLineBytes is the longest URL line fetched; a longer line is invalid.
const MaxLineBytes = 8 << 10

// job is one URL line taken for work.
type job struct {
	input   string
	line    int
	url     *url.URL // nil when invalid
	shown   string   // the URL as written to the record: credentials removed
	host    string   // target host:port
	invalid string   // why the line is not fetched, or ""
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// readInputs streams the URL lines of every input, in order, to jobs. It
// skips blank and comment lines and stops early, returning ctx.Err(), when
// ctx is done. Memory does not grow with the length of the inputs.
func readInputs(ctx context.Context, inputs []Input, done *DoneSet, jobs chan<- *job) error {
	for _, in := range inputs {
		if err := readInput(ctx, in, done, jobs); err != nil {
			return err
		}
	}
	return nil
}

func readInput(ctx context.Context, in Input, done *DoneSet, jobs chan<- *job) error {
	br := bufio.NewReaderSize(in.R, 16<<10)
	for n := 1; ; n++ {
		raw, long, first, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("fetch: reading %s line %d: %w", in.Name, n, err)
		}
		if n == 1 && bytes.HasPrefix(raw, bom) {
			raw = raw[len(bom):]
			first = firstNonSpace(raw)
		}
		if err != nil && len(raw) == 0 && !long {
			return nil // end of input
		}
		if j := parseLine(in.Name, n, raw, long, first); j != nil && !done.Has(j.input, j.line, j.shown) {
			if err := ctx.Err(); err != nil {
				return err // select below would pick at random when a worker is also free
			}
			select {
			case jobs <- j:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err != nil {
			return nil
		}
	}
}

// readLine reads one physical line without its line end. A line longer
// than MaxLineBytes is read to its end but only its start is kept, with long
// set; first is its first byte that is not white space (-1 for none), so
// that a long comment or blank line is still known as one.
func readLine(br *bufio.Reader) (line []byte, long bool, first int, err error) {
	var buf []byte
	first = -1
	for {
		chunk, err := br.ReadSlice('\n')
		if first < 0 {
			first = firstNonSpace(chunk)
		}
		if len(buf)+len(chunk) <= MaxLineBytes+2 { // room for CRLF
			buf = append(buf, chunk...)
		} else {
			long = true
			if len(buf) < 256 {
				buf = append(buf, chunk[:min(len(chunk), 256-len(buf))]...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		buf = bytes.TrimSuffix(buf, []byte("\r"))
		if len(buf) > MaxLineBytes {
			long = true
			buf = buf[:256]
		}
		return buf, long, first, err
	}
}

// firstNonSpace returns the first byte of b that is not white space (as
// strings.TrimSpace sees it), or -1.
func firstNonSpace(b []byte) int {
	if t := bytes.TrimLeftFunc(b, unicode.IsSpace); len(t) > 0 {
		return int(t[0])
	}
	return -1
}

// parseLine turns one line into a job, or nil for a blank or comment line.
// first is the line's first byte that is not white space, -1 for none.
func parseLine(input string, n int, raw []byte, long bool, first int) *job {
	if first < 0 || first == '#' {
		return nil
	}
	s := strings.TrimSpace(string(raw))
	j := &job{input: input, line: n}
	if long {
		j.shown = longShown(s)
		j.invalid = fmt.Sprintf("line longer than %d bytes", MaxLineBytes)
		return j
	}
	u, host, why := parseTarget(s)
	if why != "" {
		j.shown = redactLine(s)
		j.invalid = why
		return j
	}
	j.url, j.host = u, host
	shown := *u
	shown.User = nil
	j.shown = shown.String()
	return j
}

// longShown is what a record shows of the kept start of a long line: the
// start with credentials removed when its authority ends inside it, and
// only the scheme when it does not, since user information cut short cannot
// be told from a host.
func longShown(s string) string {
	start := -1 // where the authority begins
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	} else if strings.HasPrefix(s, "//") {
		start = 2
	}
	if start < 0 || strings.ContainsAny(s[start:], "/?#") {
		return redactLine(s) + "..."
	}
	return s[:start] + "..."
}

// redactLine is s, a line that is not fetched, with the user information
// of its URL removed, including that of a scheme-relative
// "//user:pass@host/..." line, which is not fetched either.
func redactLine(s string) string {
	if strings.HasPrefix(s, "//") {
		return strings.TrimPrefix(proxies.RedactURL("x:"+s), "x:")
	}
	return proxies.RedactURL(s)
}

// parseTarget checks that s is an absolute http or https URL and returns it
// with its host:port key, or the reason it is not fetched.
func parseTarget(s string) (*url.URL, string, string) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", "unparsable URL: " + proxies.RedactURL(err.Error())
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme == "":
		return nil, "", "not an absolute URL (want http:// or https://)"
	case scheme != "http" && scheme != "https":
		return nil, "", fmt.Sprintf("unsupported scheme %q (want http or https)", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return nil, "", "URL has no host"
	case u.Opaque != "":
		return nil, "", "not an absolute URL (want http:// or https://)"
	}
	u.Scheme = scheme
	port := u.Port()
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	key := net.JoinHostPort(strings.ToLower(u.Hostname()), port)
	if _, _, err := net.SplitHostPort(key); err != nil {
		// net/url lets a stray bracket through ("http://]/"): no request
		// could be made to such a host.
		return nil, "", "URL has a bad host"
	}
	if strings.Contains(u.Host, "%") {
		// Nor does it always read back what it wrote for an IPv6 zone
		// (bytes that are not UTF-8), and the request is made from that
		// text. Only zones can do it, so only they pay for a second parse.
		if _, err := url.Parse(u.String()); err != nil {
			return nil, "", "URL has a bad host"
		}
	}
	return u, key, ""
}
