package proxies

import (
	"net/url"
	"strconv"
	"strings"
)

// quoter quotes text from a line in a LineError, unless the text could be
// or hold credentials.
//
// It finds the line's secrets only when asked to quote: a line that parses
// (nearly all of a list of 100,000) never pays for them.
type quoter struct {
	line   string
	u      *url.URL
	fields []string // the line's key=value fields
}

// quote returns prefix and s quoted, or "" when s is not safe to show: too
// long, shaped like part of a URL, or holding any of the line's secrets.
func (q quoter) quote(prefix, s string) string {
	if s == "" || len(s) > maxQuote || strings.ContainsAny(s, ":@/%") {
		return ""
	}
	secrets := lineSecrets(q.line, q.u)
	for _, f := range q.fields {
		if v, found := strings.CutPrefix(f, "session-prefix="); found && v != "" {
			secrets = append(secrets, v) // part of the credentials
		}
	}
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			return ""
		}
	}
	return prefix + strconv.Quote(s)
}

// lineSecrets returns every non-empty piece of user information on line:
// from the parsed URL u, and from any "scheme://USERINFO@" anywhere on the
// line (the user name, the password and both together, raw and decoded).
func lineSecrets(line string, u *url.URL) []string {
	var out []string
	add := func(ss ...string) {
		for _, s := range ss {
			if s != "" {
				out = append(out, s)
			}
			if d, err := url.PathUnescape(s); err == nil && d != s && d != "" {
				out = append(out, d)
			}
		}
	}
	if u != nil && u.User != nil {
		pass, _ := u.User.Password()
		add(u.User.Username(), pass, u.User.String())
	}
	for _, f := range strings.Fields(line) {
		for rest := f; ; {
			i := strings.Index(rest, "://")
			if i < 0 {
				break
			}
			rest = rest[i+3:]
			at := strings.LastIndexByte(rest, '@')
			if at < 0 {
				break
			}
			user, pass, _ := strings.Cut(rest[:at], ":")
			add(rest[:at], user, pass)
		}
	}
	return out
}
