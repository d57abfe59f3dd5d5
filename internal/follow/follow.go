// Package follow is the client of an attempt: it sends a request through
// a round tripper and follows the redirects of its answers, its one job,
// as http.Client does but for what fetch decides (Client.Policy) and
// without copying what most requests never need.
package follow

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fetch-dev/fetch/fetch/results"
)

// Client sends an attempt's requests through a route's round tripper and
// follows redirects as http.Client does: the method a status asks for, the
// Location resolved against the request's URL, a Host header kept for a
// relative Location, a Referer unless from https to http, Basic
// authentication from user information in the URL, and a redirect's body
// read (2 KiB at most) and closed so that its connection is reused. Which
// redirects are followed is the caller's policy (Policy); the credentials
// and cookies of the first request (sensitiveHeaders) are dropped from the
// first redirect to another scheme, host or port on, as curl does.
// http.Client would copy every request's header and URL for the redirects
// that most requests never have.
//
// A Client is a value made for each attempt: with Hops set, it is not for
// concurrent use.
type Client struct {
	RT     http.RoundTripper
	Policy func(req *http.Request, via []*http.Request) error // as http.Client.CheckRedirect
	Hops   *[]results.Redirect                                // when set, each redirect followed is added: its status, its URL as shown
}

// Do sends req and the requests of the redirects that follow, and returns
// the last response. On an error no response is open.
func (c *Client) Do(req *http.Request) (*http.Response, error) {
	first := req
	var via []*http.Request
	stripped := false // the headers of first that do not cross origins are gone: for good
	for {
		resp, err := c.send(req)
		if err != nil {
			return nil, err
		}
		method, ok := redirectMethod(req.Method, resp.StatusCode)
		loc := resp.Header.Get("Location")
		if !ok || loc == "" {
			return resp, nil // a 3xx without a Location is an answer too
		}
		u, err := req.URL.Parse(loc)
		if err != nil {
			resp.Body.Close()
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its text quotes loc again
			}
			return nil, fmt.Errorf("bad Location header %q: %w", loc, err)
		}
		next := &http.Request{Method: method, URL: u, Header: first.Header}
		withBody(next, req, resp.StatusCode)
		if req.Host != "" && req.Host != req.URL.Host && !isAbs(loc) {
			next.Host = req.Host
		}
		stripped = stripped || !sameOrigin(first.URL, u)
		ref := referer(req.URL, u)
		if stripped || ref != "" {
			next.Header = first.Header.Clone()
			if stripped {
				// net/http drops these only for another host name; curl
				// (and so fetch) also for another port or scheme.
				for _, h := range sensitiveHeaders {
					next.Header.Del(h)
				}
			}
			if ref != "" && next.Header.Get("Referer") == "" {
				next.Header.Set("Referer", ref)
			}
		}
		via = append(via, req)
		err = c.Policy(next, via)
		if errors.Is(err, http.ErrUseLastResponse) {
			return resp, nil
		}
		const maxSlurp = 2 << 10
		if resp.ContentLength == -1 || resp.ContentLength <= maxSlurp {
			io.CopyN(io.Discard, resp.Body, maxSlurp)
		}
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if c.Hops != nil {
			*c.Hops = append(*c.Hops, results.Redirect{Status: resp.StatusCode, URL: shownURL(u)})
		}
		req = next.WithContext(first.Context())
	}
}

// send makes one round trip of req, as http.Client does: with Basic
// authentication from user information in its URL when it has no
// Authorization header, and naming a plain HTTP answer to a TLS hello.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	if u := req.URL.User; u != nil && req.Header.Get("Authorization") == "" {
		fork := *req // a round tripper must not change the request
		fork.Header = req.Header.Clone()
		pass, _ := u.Password()
		fork.SetBasicAuth(u.Username(), pass)
		req = &fork
	}
	resp, err := c.RT.RoundTrip(req)
	if err != nil {
		var rhe tls.RecordHeaderError
		if errors.As(err, &rhe) && string(rhe.RecordHeader[:]) == "HTTP/" {
			err = http.ErrSchemeMismatch
		}
		return nil, err
	}
	if resp == nil {
		return nil, fmt.Errorf("fetch: %T returned no response and no error", c.RT)
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

// redirectMethod is the method of the request a response with status asks
// for, and whether it asks for one: 301, 302 and 303 make anything but GET
// and HEAD a GET (and drop the body), 307 and 308 keep the method (and
// send the body again: see withBody).
func redirectMethod(method string, status int) (string, bool) {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther:
		if method != http.MethodGet && method != http.MethodHead {
			return http.MethodGet, true
		}
		return method, true
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return method, true
	}
	return "", false
}

// referer is the Referer of a redirect from last to next: last without user
// information, or none from https to http.
func referer(last, next *url.URL) string {
	if last.Scheme == "https" && next.Scheme == "http" {
		return ""
	}
	if last.User != nil {
		u := *last
		u.User = nil
		return u.String()
	}
	return last.String()
}

// isAbs reports whether a Location is an absolute URL.
func isAbs(loc string) bool {
	u, err := url.Parse(loc)
	return err == nil && u.IsAbs()
}

// shownURL is u as a record shows it: without user information.
func shownURL(u *url.URL) string {
	if u.User == nil {
		return u.String()
	}
	c := *u
	c.User = nil
	return c.String()
}

// withBody gives next, the request a redirect with status asks for after
// req, req's body again when the status keeps it: 307 and 308 send it
// again, as net/http and curl do; 301, 302 and 303 do not (and make a POST
// a GET, see redirectMethod).
func withBody(next, req *http.Request, status int) {
	if req.GetBody == nil || status != http.StatusTemporaryRedirect && status != http.StatusPermanentRedirect {
		return
	}
	body, err := req.GetBody()
	if err != nil {
		return // fetch's own GetBody never fails
	}
	next.Body, next.GetBody, next.ContentLength = body, req.GetBody, req.ContentLength
}

// sensitiveHeaders are never carried to another origin on a redirect.
var sensitiveHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Cookie2", "Www-Authenticate"}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && portOf(a) == portOf(b)
}

func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return "443"
	}
	return "80"
}
