// Package proxies reads proxy lists, gives each proxy a stable identity that
// is safe to print, groups proxies into shared budgets (pools), and removes
// credentials from anything that will be written out.
package proxies

import (
	"errors"
	"net/url"
	"strconv"

	"github.com/fetch-dev/fetch/limits"
)

// Proxy is one forward proxy from a list or a flag.
//
// User holds the credentials and must never be printed, nor URL(); use ID
// in records, reports, logs and keys. A proxy keeps its URL's parts, not a
// url.URL: a list of 100,000 identities is then 14 MB smaller while it is
// read (see URL).
type Proxy struct {
	Scheme      string        // http, https, socks5 or socks5h
	Host        string        // host:port, canonical (see ParseURL)
	User        *url.Userinfo // the credentials; nil for none
	ID          string        // identity: scheme://host:port[#8 hex of sha256(user)]
	Pool        string        // pool name from pool=NAME, or "" for none
	Concurrency int           // concurrency=N, or 0 for the flag default
	Rate        limits.Rate   // rate=R, or the zero Rate for the flag default
	RateSet     bool          // whether rate= was given
	Line        int32         // its line in From; 0 for --proxy
	Burst       int           // burst=N, or 0 for the flag default
	Rotate      Rotation      // rotate=never|request, or RotateDefault for the flag's
	Session     int           // 1..N for a proxy of a line with sessions=N; 0 otherwise
	From        string        // where it was read: the list's name, or "--proxy" (see Source)

	tmpl *sessionTemplate // the line a session proxy was expanded from; shared by its sessions
}

// Source is where p was read, for messages: "FILE:LINE", or From alone
// ("--proxy"). It is made for each call: a list of 100,000 proxies keeps
// its name once, not 100,000 times with a line number.
func (p *Proxy) Source() string {
	if p.Line == 0 {
		return p.From
	}
	return p.From + ":" + strconv.Itoa(int(p.Line))
}

// URL returns the proxy's URL, credentials included: never print it. It is
// made for each call.
func (p *Proxy) URL() *url.URL { return &url.URL{Scheme: p.Scheme, Host: p.Host, User: p.User} }

// FromURL returns the proxy at u, a URL as ParseURL returns it, with its
// identity; its other fields are zero.
func FromURL(u *url.URL) Proxy {
	return Proxy{Scheme: u.Scheme, Host: u.Host, User: u.User, ID: Identity(u)}
}

// Rotation says when a proxy's connections are replaced by new ones.
type Rotation int

const (
	// RotateDefault: as --proxy-rotate says.
	RotateDefault Rotation = iota
	// RotateNever keeps connections to the proxy alive between attempts.
	RotateNever
	// RotateRequest opens a new connection (and tunnel) to the proxy for
	// every attempt, so that a rotating gateway gives a new exit each time.
	RotateRequest
)

// ParseRotation parses "never" or "request".
func ParseRotation(s string) (Rotation, error) {
	switch s {
	case "never":
		return RotateNever, nil
	case "request":
		return RotateRequest, nil
	}
	return RotateDefault, errors.New("want never or request")
}

// String is "never", "request", or "" for RotateDefault.
func (r Rotation) String() string {
	switch r {
	case RotateNever:
		return "never"
	case RotateRequest:
		return "request"
	}
	return ""
}
