package proxies

import (
	"encoding/base64"
	"net/url"
	"regexp"
	"strings"
	"sync"
)

// Redactor removes credentials from text that will be written out: records,
// reports, logs and error messages. A nil *Redactor is ready to use: it
// strips user information from URLs but knows no proxy's credentials.
// A Redactor is safe for concurrent use.
type Redactor struct {
	// known builds, at the first String that needs it, what a Redactor
	// looks for; nil when no proxy has credentials.
	known func() *known
}

// known is what a Redactor looks for, built once from the credentials.
type known struct {
	pairs  *matcher // removes "user:pass@" of each proxy, whatever their length
	secret *matcher // replaces each user name, password and Basic token of 3 bytes or more

	// The proxies of a line with sessions=N are known by what they have
	// in common, kept once for the line: the pieces of their credentials
	// (in secret), and for their Basic tokens, which have nothing in
	// common, these pieces to look for in what any token decodes to.
	sessionPieces []string
}

// minBare is the shortest credential String replaces wherever it appears:
// replacing shorter ones would mangle ordinary text. Shorter credentials are
// still removed from URLs and from "user:pass@".
const minBare = 3

// userinfoRE matches "scheme://userinfo@": everything between "://" and the
// last "@" before the next "/", white space, quote or backslash. Go prints
// URLs with their password as "user:xxxxx@"; this removes the user too.
var userinfoRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile("([A-Za-z][A-Za-z0-9+.-]*://)[^/\\s\"<>`\\\\]*@")
})

// NewRedactor returns a Redactor for the credentials of ps: that of
// NewCredentials(ps).
func NewRedactor(ps []Proxy) *Redactor { return NewCredentials(ps).Redactor() }

// Redactor returns a Redactor for c's credentials. It keeps c and builds
// its matchers at its first String: a run that writes no error message
// never pays for them. For a list of 100,000 identities they are 26 MB and
// a tenth of a second of CPU (BenchmarkLoadIdentities/NewRedactor), a
// fifth of a start.
func (c *Credentials) Redactor() *Redactor {
	some := len(c.tmpls) > 0
	for i := 0; i < c.Len() && !some; i++ {
		some = c.Has(i)
	}
	if !some {
		return &Redactor{}
	}
	return &Redactor{known: sync.OnceValue(func() *known { return newKnown(c) })}
}

// newKnown builds what a Redactor looks for in c: the credentials of each
// proxy, and the pieces of those of the session lines. Its cost is linear
// in the credentials, and what it keeps holds no pointer per proxy (see
// matcher): for a list of 100,000 identities it took 300 ms and kept a
// trie of millions of nodes while it was built on strings.Replacer.
func newKnown(c *Credentials) *known {
	// A session proxy is known by its line's template (see known).
	own := func(i int) (user, pass string, hasPass, ok bool) {
		if c.flags[i]&credSession != 0 {
			return "", "", false, false
		}
		return c.Get(i)
	}
	pairs, secret := newMatcher(), newMatcher()
	// Made to size for plain credentials (see encodings): one pair and
	// two bare strings (the user name and the Basic token) a proxy, and
	// the password when it is long enough.
	size, n := 0, 0
	for i := range c.Len() {
		if user, pass, _, ok := own(i); ok {
			size += len(user) + len(pass) + 2
			n++
		}
	}
	pairs.startBulk()
	secret.startBulk()
	pairs.reserve(n, size)
	secret.reserve(2*n, size+base64.StdEncoding.EncodedLen(size))
	bare := func(s string) {
		if len(s) >= minBare {
			secret.add(s)
		}
	}
	var pieces []string
	for _, t := range c.tmpls {
		for _, sec := range t.secrets() {
			encodings(sec, bare)
			if len(sec) >= minBare {
				pieces = append(pieces, sec)
			}
		}
	}
	for i := range c.Len() {
		user, pass, hasPass, ok := own(i)
		if !ok {
			continue
		}
		userpass := user + ":" + pass
		if hasPass {
			pairs.add(userpass + "@")
		}
		if plain(user) && plain(pass) {
			if !hasPass {
				pairs.add(user + "@") // as Userinfo's String has it
			}
		} else {
			pairs.add(c.Userinfo(i).String() + "@")
		}
		encodings(user, bare)
		encodings(pass, bare)
		// Proxy-Authorization: Basic, encoded in place in secret's text.
		secret.text = base64.StdEncoding.AppendEncode(secret.text, []byte(userpass))
		secret.addLast(base64.StdEncoding.EncodedLen(len(userpass)))
	}
	pairs.seal()
	secret.seal()
	k := &known{sessionPieces: pieces}
	if !pairs.empty() {
		k.pairs = pairs
	}
	if !secret.empty() {
		k.secret = secret
	}
	return k
}

// encodings calls add with s as it may appear in text: raw and
// percent-encoded in the ways net/url encodes.
func encodings(s string, add func(string)) {
	add(s)
	if plain(s) {
		return // every encoding is s
	}
	add(url.PathEscape(s))
	add(url.QueryEscape(s))
	add(strings.TrimPrefix(url.UserPassword("", s).String(), ":"))
	add(url.User(s).String())
}

// plain reports whether s holds only bytes that no percent-encoding of
// net/url changes: letters, digits and "-._~".
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// String returns s with the user information removed from every
// "scheme://user:pass@" in it, every "user:pass@" of a known proxy removed,
// and every other occurrence of a known proxy's user name or password (raw
// or percent-encoded, 3 bytes or more) replaced by "***".
func (r *Redactor) String(s string) string {
	if strings.Contains(s, "://") {
		s = stripUserinfo(s)
	}
	if r == nil || r.known == nil || s == "" {
		return s
	}
	k := r.known()
	if k.pairs != nil {
		s = k.pairs.replace(s, "")
	}
	if len(k.sessionPieces) > 0 {
		s = k.redactTokens(s) // before secret: it would cut the tokens up
	}
	if k.secret != nil {
		s = k.secret.replace(s, "***")
	}
	return s
}

// tokenRE matches what may be a Basic token: a run of base64.
var tokenRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[A-Za-z0-9+/]{8,}={0,2}`) })

// redactTokens replaces with "***" each run of base64 in s that decodes to
// text holding a piece of a session proxy's credentials.
func (k *known) redactTokens(s string) string {
	return tokenRE().ReplaceAllStringFunc(s, func(tok string) string {
		b, err := base64.StdEncoding.DecodeString(tok)
		if err != nil {
			return tok
		}
		for _, p := range k.sessionPieces {
			if strings.Contains(string(b), p) {
				return "***"
			}
		}
		return tok
	})
}

func stripUserinfo(s string) string {
	return userinfoRE().ReplaceAllString(s, "$1")
}

// RedactURL returns raw with the user information (user name and password)
// removed, and otherwise as written. When raw does not parse, it removes
// everything between "://" and the last "@" before the next "/". User
// information of URLs nested in raw (such as in its query) is removed too.
func RedactURL(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	head, rest := raw[:i+3], raw[i+3:]
	stops := "/"
	if _, err := url.Parse(raw); err == nil {
		stops = "/?#" // where net/url ends the authority
	}
	end := strings.IndexAny(rest, stops)
	if end < 0 {
		end = len(rest)
	}
	if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
		rest = rest[at+1:]
	}
	if strings.Contains(rest, "://") {
		rest = stripUserinfo(rest)
	}
	return head + rest
}
