package fetchtest

import (
	"net/http"
	"strings"
	"sync"

	"github.com/fetch-dev/fetch/internal/loopback"
)

// ProviderOptions configures StartProvider.
type ProviderOptions struct {
	// Name is the proxy's name in its Proxy-Status members; "fetchtest"
	// when empty.
	Name string
	// Answers are the targets the provider says it cannot serve, by host
	// name (no port, lower case): a request for one, CONNECT or
	// absolute-form, gets the answer instead of being forwarded. The map
	// is not copied and must not change afterwards.
	Answers map[string]ProviderAnswer
}

// ProviderAnswer is a Provider's answer for a target it does not serve,
// as large proxy providers answer when the target fails.
type ProviderAnswer struct {
	Status  int    // 502 when 0
	Error   string // the Proxy-Status member's error parameter (RFC 9209 section 2.3), such as "dns_timeout"; none when ""
	Details string // its details parameter; none when ""
	// NoProxyStatus sends no Proxy-Status field: only Header, to answer
	// as a proxy that has its own (squid's X-Squid-Error).
	NoProxyStatus bool
	Header        http.Header // more header fields
}

// Provider is a real HTTP forward proxy on loopback, started by
// StartProvider, that answers as rotating-proxy providers do: for the
// targets in its Answers it answers itself, a 502 or 504 with a
// Proxy-Status field (RFC 9209) that says what failed, to a CONNECT or an
// absolute-form request alike; every other request it forwards (see
// StartHTTPProxy), adding its member, with no error, to the Proxy-Status
// of the forwarded answers. It is safe for concurrent use.
type Provider struct {
	URL  string // "http://127.0.0.1:PORT"
	Addr string // "127.0.0.1:PORT"

	opts ProviderOptions
	lb   *loopback.Proxy

	mu    sync.Mutex
	stats ProviderStats
}

// ProviderStats counts what a Provider has done.
type ProviderStats struct {
	Answered  int // requests it answered itself (from Answers)
	Forwarded int // absolute-form requests forwarded
	Connects  int // CONNECT tunnels set up
}

// StartProvider starts a Provider on 127.0.0.1 and a free port. Call Close
// when done.
func StartProvider(opts ProviderOptions) (*Provider, error) {
	if opts.Name == "" {
		opts.Name = "fetchtest"
	}
	p := &Provider{opts: opts}
	lb, err := loopback.StartHTTPProxy(loopback.ProxyOptions{Wrap: p.wrap})
	if err != nil {
		return nil, err
	}
	p.lb, p.URL, p.Addr = lb, lb.URL, lb.Addr
	return p, nil
}

// Close stops the provider as Proxy.Close does.
func (p *Provider) Close() { p.lb.Close() }

// Stats returns the provider's counters.
func (p *Provider) Stats() ProviderStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Member is the provider's Proxy-Status member for answer a: its name,
// and the error and details when a has them.
func (p *Provider) Member(a ProviderAnswer) string {
	m := sfToken(p.opts.Name)
	if a.Error != "" {
		m += "; error=" + sfToken(a.Error)
	}
	if a.Details != "" {
		m += "; details=" + sfString(a.Details)
	}
	return m
}

func (p *Provider) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := p.opts.Answers[strings.ToLower(r.URL.Hostname())]
		p.mu.Lock()
		switch {
		case ok:
			p.stats.Answered++
		case r.Method == http.MethodConnect:
			p.stats.Connects++
		default:
			p.stats.Forwarded++
		}
		p.mu.Unlock()
		if !ok {
			if r.Method != http.MethodConnect {
				w = &memberWriter{ResponseWriter: w, member: p.Member(ProviderAnswer{})}
			}
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		for k, vv := range a.Header {
			h[k] = append([]string(nil), vv...)
		}
		if !a.NoProxyStatus {
			h.Add("Proxy-Status", p.Member(a))
		}
		status := a.Status
		if status == 0 {
			status = http.StatusBadGateway
		}
		body := "fetchtest provider: " + a.Error + "\n"
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}

// memberWriter adds the provider's member to the Proxy-Status of the
// answer it forwards, after the members already there (RFC 9209 section
// 2: each intermediary appends its own).
type memberWriter struct {
	http.ResponseWriter
	member string
	done   bool
}

func (w *memberWriter) WriteHeader(code int) {
	if !w.done {
		w.done = true
		w.Header().Add("Proxy-Status", w.member)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *memberWriter) Write(b []byte) (int, error) {
	if !w.done {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush the forwarded body.
func (w *memberWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// sfToken returns s as a Structured Field token (RFC 8941 section 3.3.4)
// when it is one, else as a string.
func sfToken(s string) string {
	ok := s != "" && (s[0] == '*' || 'a' <= s[0]|0x20 && s[0]|0x20 <= 'z')
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = c > 0x20 && c < 0x7f && !strings.ContainsRune(`"(),;<=>?@[\]{}`, rune(c))
	}
	if ok {
		return s
	}
	return sfString(s)
}

// sfString returns s as a Structured Field string (RFC 8941 section
// 3.3.3): quoted, with '"' and '\' escaped and any byte that is not
// printable ASCII replaced by '?'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
