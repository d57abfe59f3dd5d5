package proxies

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/fetch-dev/fetch/internal/arena"
)

// ErrBadURL is wrapped by every error ParseURL returns, and so by every
// *LineError about a malformed proxy URL.
var ErrBadURL = errors.New("proxies: bad proxy URL")

// urlError says what is wrong with a proxy URL. Its reason never quotes the
// URL: a malformed URL may hold a password anywhere.
type urlError struct{ reason string }

func (e *urlError) Error() string { return ErrBadURL.Error() + ": " + e.reason }
func (e *urlError) Unwrap() error { return ErrBadURL }

func badURL(reason string) error { return &urlError{reason: reason} }

// defaultPorts are the ports net/http's Transport dials when a proxy URL
// has none.
var defaultPorts = map[string]string{
	"http":    "80",
	"https":   "443",
	"socks5":  "1080",
	"socks5h": "1080",
}

// maxHostLen is the longest DNS name.
const maxHostLen = 253

// ParseURL parses one proxy URL such as "http://user:pass@10.0.0.1:3128".
//
// The scheme must be http, https (TLS to the proxy), socks5 or socks5h, in
// any case; it is stored in lower case. A host is required: a DNS name
// (letters, digits, '-', '_' and '.'; stored in lower case), an IPv4 address
// or an IPv6 address in brackets. A missing port is filled in with the one
// net/http dials (http 80, https 443, socks5 and socks5h 1080), so the
// returned URL always has one. The path may only be "" or "/" (dropped);
// a query or a fragment is an error. User information (user, user:pass,
// percent-encoded) is kept in the returned URL, which must therefore never
// be printed: use Identity.
//
// Errors wrap ErrBadURL and never quote any part of raw.
func ParseURL(raw string) (*url.URL, error) { return parseURL(raw, nil) }

// parseURL is ParseURL with the URL, and its user information when it
// needs no decoding, taken from a (nil: allocated one by one).
func parseURL(raw string, a *urlAlloc) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if u, ok := parseSimple(raw, a); ok {
		return u, nil
	}
	return parseGeneral(raw, a)
}

// urlAlloc is where parse's URLs and their user information come from: a
// URL is parse's scratch, which it copies the parts of into a Proxy, and
// user information comes from shared blocks (see arena.Slab): for a list of
// 100,000 identities, a few hundred objects for the garbage collector to
// mark all run long instead of 100,000, and no URL of 144 bytes each.
type urlAlloc struct {
	scratch url.URL
	users   arena.Slab[url.Userinfo]
	host    string // the host:port parseSimple last took, as it took it
	// keep, when set, is where userinfo copies a user name and password,
	// and parseSimple the host: a route keeps them all run long, and as
	// pieces of their line they would keep the line's whole block alive.
	// parseSimple's URL then holds nothing of the string it parsed, which
	// may be a view of a read buffer (see parseLine).
	keep *arena.Strings
}

// url returns a URL holding v: a new one when a is nil, else a's scratch
// URL, which holds v until the next call.
func (a *urlAlloc) url(v url.URL) *url.URL {
	if a == nil {
		u := new(url.URL) // not &v: v would be moved to the heap for every call
		*u = v
		return u
	}
	a.scratch = v
	return &a.scratch
}

// userinfo returns the user information of name and, when hasPass, pass,
// from a's blocks unless a is nil.
func (a *urlAlloc) userinfo(name, pass string, hasPass bool) *url.Userinfo {
	var u *url.Userinfo
	if a == nil {
		u = new(url.Userinfo)
	} else {
		u = a.users.New()
	}
	if a != nil && a.keep != nil {
		name, pass = a.keep.String(name), a.keep.String(pass)
	}
	if hasPass {
		*u = *url.UserPassword(name, pass)
	} else {
		*u = *url.User(name)
	}
	return u
}

// parseSimple parses raw when it is written as lists write nearly every
// proxy: a scheme in lower case, user information (if any) of a user name
// and an optional password made of letters, digits and "-._~" only, so that
// nothing needs decoding, a host in lower case that is an IPv4 address or a
// DNS name, a port without leading zeros, and at most a "/" after it. It
// takes about a third of the general path's time and, with blocks, allocates
// nothing of its own (BenchmarkParseURL); ok is false for anything else,
// which parseGeneral then parses
// (and refuses with the reason). The two give the same URL for what
// parseSimple takes (FuzzParseSimple).
func parseSimple(raw string, a *urlAlloc) (u *url.URL, ok bool) {
	var scheme string
	for _, s := range [...]string{"http", "https", "socks5", "socks5h"} {
		if len(raw) > len(s)+3 && raw[:len(s)] == s && raw[len(s):len(s)+3] == "://" {
			scheme = s
			break
		}
	}
	if scheme == "" {
		return nil, false
	}
	rest := strings.TrimSuffix(raw[len(scheme)+3:], "/")
	var name, pass string
	hasUser, hasPass := false, false
	if at := strings.IndexByte(rest, '@'); at >= 0 {
		name, pass, hasPass = strings.Cut(rest[:at], ":")
		if name == "" || !plain(name) || !plain(pass) { // nothing to decode
			return nil, false
		}
		hasUser = true
		rest = rest[at+1:]
	}
	colon := strings.IndexByte(rest, ':')
	if colon < 1 || !simplePort(rest[colon+1:]) {
		return nil, false
	}
	// Already canonical (lower case, an IPv4 address as netip writes it),
	// or not taken; a list's lines nearly all name the host:port of the
	// line before.
	if a == nil || rest != a.host {
		if host, err := canonicalHost(rest); err != nil || host != rest[:colon] {
			return nil, false
		}
		if a != nil {
			a.host = rest
			if a.keep != nil {
				a.host = a.keep.String(rest)
			}
		}
	}
	if a != nil && a.keep != nil {
		rest = a.host // a copy, shared by the lines that name it
	}
	// The credentials are taken (and, with keep, copied) only once the
	// line is known to be taken: a line left to the general path leaves
	// nothing behind in the blocks a run keeps.
	var user *url.Userinfo
	if hasUser {
		user = a.userinfo(name, pass, hasPass)
	}
	return a.url(url.URL{Scheme: scheme, User: user, Host: rest}), true
}

// simplePort reports whether s is a port from 1 to 65535 without leading
// zeros.
func simplePort(s string) bool {
	if len(s) == 0 || len(s) > 5 || s[0] == '0' {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n <= 65535
}

// parseGeneral is parseURL for any URL: net/url parses it, then each part
// is checked and made canonical.
func parseGeneral(raw string, a *urlAlloc) (*url.URL, error) {
	if raw == "" {
		return nil, badURL("empty")
	}
	if !strings.Contains(raw, "://") {
		return nil, badURL("want scheme://host[:port] with scheme http, https, socks5 or socks5h")
	}
	if strings.ContainsAny(raw, "#") {
		return nil, badURL("a proxy URL has no fragment")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, badURL(describeParseError(err))
	}
	if _, ok := defaultPorts[u.Scheme]; !ok {
		return nil, badURL("unsupported scheme (want http, https, socks5 or socks5h)")
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, badURL("missing host")
	}
	if u.RawQuery != "" || u.ForceQuery {
		return nil, badURL("a proxy URL has no query")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, badURL("a proxy URL has no path")
	}
	host, err := canonicalHost(u.Host)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	switch {
	case strings.HasSuffix(u.Host, ":"):
		return nil, badURL("empty port")
	case port == "":
		port = defaultPorts[u.Scheme]
	default:
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return nil, badURL("port must be 1 to 65535")
		}
		if port[0] == '0' {
			port = strconv.Itoa(n) // drop leading zeros
		}
	}
	if u.User != nil && u.User.Username() == "" {
		if _, hasPass := u.User.Password(); !hasPass {
			u.User = nil // "http://@host": nothing to send
		}
	}
	hostport := u.Host // as written, when that is already canonical: no copy
	if !canonicalAs(u.Host, host, port) {
		hostport = net.JoinHostPort(host, port)
	}
	return a.url(url.URL{Scheme: u.Scheme, User: u.User, Host: hostport}), nil
}

// canonicalAs reports whether hostport is host and port joined as
// net.JoinHostPort joins them.
func canonicalAs(hostport, host, port string) bool {
	if strings.IndexByte(host, ':') >= 0 { // IPv6: in brackets
		return len(hostport) == len(host)+len(port)+3 && hostport[0] == '[' &&
			hostport[1:1+len(host)] == host && hostport[1+len(host):3+len(host)] == "]:" && hostport[3+len(host):] == port
	}
	return len(hostport) == len(host)+1+len(port) && hostport[:len(host)] == host &&
		hostport[len(host)] == ':' && hostport[len(host)+1:] == port
}

// describeParseError turns a net/url error into a reason that quotes none of
// the input (net/url errors quote the URL, or parts of it, which may be a
// password).
func describeParseError(err error) string {
	var ee url.EscapeError
	if errors.As(err, &ee) {
		return "bad percent-encoding"
	}
	var he url.InvalidHostError
	if errors.As(err, &he) {
		return "invalid character in host"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "invalid port"):
		return "invalid port"
	case strings.Contains(msg, "invalid userinfo"):
		return "invalid character in the credentials (percent-encode them)"
	case strings.Contains(msg, "control character"):
		return "control character in URL"
	case strings.Contains(msg, "missing ']'"), strings.Contains(msg, "IP-literal"):
		return "malformed IPv6 address"
	}
	return "malformed URL"
}

// canonicalHost checks the host part of hostport and returns it in
// canonical form: lower-case name, or the IP address as netip prints it
// (without brackets; the caller adds them with net.JoinHostPort).
func canonicalHost(hostport string) (string, error) {
	if strings.HasPrefix(hostport, "[") {
		end := strings.LastIndex(hostport, "]")
		if end < 0 {
			return "", badURL("malformed IPv6 address")
		}
		a, err := netip.ParseAddr(hostport[1:end])
		if err != nil || !a.Is6() || !validZone(a.Zone()) {
			return "", badURL("malformed IPv6 address")
		}
		return a.String(), nil
	}
	host := hostport
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	if strings.Contains(host, ":") {
		return "", badURL("an IPv6 address must be in brackets")
	}
	if host == "" {
		return "", badURL("missing host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is4() {
			return host, nil // netip refuses other spellings of IPv4
		}
		return a.String(), nil
	}
	if len(host) > maxHostLen {
		return "", badURL("host name too long")
	}
	host = strings.ToLower(host)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", badURL("invalid character in host (want a DNS name or an IP address)")
		}
	}
	if host[0] == '.' || host[0] == '-' || strings.Contains(host, "..") {
		return "", badURL("malformed host name")
	}
	return host, nil
}

// validZone reports whether zone, an IPv6 zone, is empty or an interface
// name or number.
func validZone(zone string) bool {
	for i := 0; i < len(zone); i++ {
		c := zone[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Identity returns the name of the proxy at u that is safe to print and to
// use in keys: "scheme://host:port" (host in lower case, an IPv6 address in
// brackets, the default port filled in), plus "#" and the first 8 hex digits
// of the SHA-256 of the user information when u has one: of "user:password",
// or of "user" when there is no password (an empty one is none: the same
// credentials are sent). Lines that differ in any part of their
// credentials are different proxies. The fingerprint tells proxies apart;
// it does not hide a short or guessable password from someone who tries
// candidates against it.
func Identity(u *url.URL) string {
	var buf [128]byte // enough for most: one allocation, the result
	return string(appendIdentity(buf[:0], u))
}

// appendIdentity appends Identity(u) to b.
func appendIdentity(b []byte, u *url.URL) []byte {
	b, has := appendCanonical(b, u)
	if has {
		b = appendFingerprint(b, u)
	}
	return b
}

// appendFingerprint appends "#" and the fingerprint of u's user
// information, as Identity writes them, to b.
func appendFingerprint(b []byte, u *url.URL) []byte {
	b = append(b, '#')
	mark := len(b)
	b = appendUserinfo(b, u)
	sum := sha256.Sum256(b[mark:])
	return hex.AppendEncode(b[:mark], sum[:4])
}

// sameProxy is Identity with the whole user information in place of its
// fingerprint: what tells two proxies of one identity apart when their
// credentials differ. Two of 100,000 session user names share a
// fingerprint about once (8 hex digits are 32 bits). It holds the
// credentials: for comparing, never for output.
func sameProxy(u *url.URL) string {
	b, has := appendCanonical(nil, u)
	if has {
		b = appendUserinfo(append(b, '#'), u)
	}
	return string(b)
}

// appendCanonical appends "scheme://host:port" of u as Identity writes it
// to b, and reports whether u has user information.
func appendCanonical(b []byte, u *url.URL) ([]byte, bool) {
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	// An IPv4 address that parses is written as String writes it: netip
	// refuses leading zeros. Only IPv6 has other spellings.
	if a, err := netip.ParseAddr(host); err == nil && !a.Is4() {
		host = a.String()
	}
	port := u.Port()
	if port == "" {
		port = defaultPorts[scheme]
	} else if port[0] == '0' && len(port) > 1 { // u.Port() holds digits only
		if n, err := strconv.Atoi(port); err == nil {
			port = strconv.Itoa(n)
		}
	}
	b = append(append(b, scheme...), "://"...)
	if strings.IndexByte(host, ':') >= 0 {
		b = append(append(append(b, '['), host...), ']')
	} else {
		b = append(b, host...)
	}
	b = append(append(b, ':'), port...)
	return b, u.User != nil
}

// appendUserinfo appends the user information of u as Identity hashes it
// to b: "user:password", or "user" when there is no password or an empty
// one. The whole user information counts: lines that differ only in the
// password (a session or a country in it) are different proxies.
func appendUserinfo(b []byte, u *url.URL) []byte {
	b = append(b, u.User.Username()...)
	if pass, ok := u.User.Password(); ok && pass != "" {
		b = append(append(b, ':'), pass...)
	}
	return b
}
