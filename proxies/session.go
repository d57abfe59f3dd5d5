package proxies

import (
	"net/url"
	"strconv"
	"strings"
)

// sessionMark is what a proxy line writes in its user name or password for
// the session number of a line with sessions=N.
const sessionMark = "{session}"

// maxSessions is the largest sessions=N; maxProxies the most proxies the
// lists may hold in all, once their sessions are expanded.
const (
	maxSessions = 1_000_000
	maxProxies  = 1_000_000
)

// sessionTemplate is a proxy line with sessions=N: its user name and
// password cut at each {session}, decoded. The proxies expanded from it
// share it, so that what they have in common (for the Redactor) is kept
// once.
type sessionTemplate struct {
	base    *url.URL // scheme and host; no user information
	user    []string // the user name's pieces around each {session}
	pass    []string // the password's, or nil when it has none
	hasPass bool     // the line's user information has a ':'
	prefix  string   // session-prefix=S: written before each session number
	n       int      // sessions=N
}

// newSessionTemplate returns the template of the proxy URL raw, which holds
// {session} and parses as u once {session} is replaced. ok is false when no
// {session} is in the user information.
func newSessionTemplate(raw string, u *url.URL, prefix string, n int) (*sessionTemplate, bool) {
	_, rest, found := strings.Cut(strings.TrimSpace(raw), "://")
	if !found {
		return nil, false
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 || strings.Contains(rest[at:], sessionMark) {
		return nil, false // {session} in the host or port
	}
	userRaw, passRaw, hasPass := strings.Cut(rest[:at], ":")
	t := &sessionTemplate{base: &url.URL{Scheme: u.Scheme, Host: u.Host}, hasPass: hasPass, prefix: prefix, n: n}
	var ok bool
	if t.user, ok = pieces(userRaw); !ok {
		return nil, false
	}
	if hasPass {
		if t.pass, ok = pieces(passRaw); !ok {
			return nil, false
		}
	}
	if len(t.user) < 2 && len(t.pass) < 2 {
		return nil, false
	}
	return t, true
}

// pieces cuts raw at each {session} and decodes each piece.
func pieces(raw string) ([]string, bool) {
	ps := strings.Split(raw, sessionMark)
	for i, p := range ps {
		d, err := url.PathUnescape(p)
		if err != nil {
			return nil, false
		}
		ps[i] = d
	}
	return ps, true
}

// url returns the URL of session k (1..n), from a's blocks.
func (t *sessionTemplate) url(k int, a *urlAlloc) *url.URL {
	s := t.prefix + strconv.Itoa(k)
	u := a.url(*t.base)
	var pass string
	if t.hasPass {
		pass = strings.Join(t.pass, s)
	}
	u.User = a.userinfo(strings.Join(t.user, s), pass, t.hasPass)
	return u
}

// secrets returns what every proxy of t has in common that must not be
// shown: the pieces of its user name and password, the prefix joined to the
// piece before each session number.
func (t *sessionTemplate) secrets() []string {
	var out []string
	for _, ps := range [][]string{t.user, t.pass} {
		for i, p := range ps {
			if i < len(ps)-1 {
				p += t.prefix
			}
			if p != "" {
				out = append(out, p)
			}
		}
	}
	if t.prefix != "" {
		out = append(out, t.prefix)
	}
	return out
}

// expand appends the n proxies of the line p with template t, each with its
// own URL and identity (from bl's blocks).
func (t *sessionTemplate) expand(dst []Proxy, p Proxy, bl *blocks) []Proxy {
	var buf [256]byte
	for k := 1; k <= t.n; k++ {
		q := p
		u := t.url(k, &bl.urls)
		q.Scheme, q.Host, q.User = u.Scheme, u.Host, u.User
		q.ID = bl.strs.Bytes(bl.identity(buf[:0], u))
		q.Session = k
		q.tmpl = t
		dst = append(dst, q)
	}
	return dst
}
