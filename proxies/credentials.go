package proxies

import (
	"fmt"
	"math"
	"net/url"
	"unsafe"
)

// Credentials are the user names and passwords of a list of proxies, by
// the proxy's place in the list, kept for a run after the list is gone:
// for the routes that send them and for the Redactor that removes them
// from output.
//
// They are held in one block of bytes with their ends, not as a
// *url.Userinfo per proxy: through a pool of 100,000 identities, the
// userinfos, their two strings each and a pointer to each from every
// holder were about half of what the garbage collector marked at each
// cycle of a run. Credentials hold no pointer per proxy. They are
// read-only once made and safe for concurrent use.
type Credentials struct {
	text  []byte   // each proxy's user name, then its password
	ends  []uint32 // per proxy, two: where its user name ends in text, and where its password does; each starts where the one before ends
	flags []uint8  // per proxy: credFlag bits
	tmpls []*sessionTemplate
}

// credFlag says what a proxy's credentials are.
const (
	credUser    uint8 = 1 << iota // the proxy has user information (a user name, perhaps empty)
	credPass                      // and a password, perhaps empty
	credSession                   // it came from a line with sessions=N: the Redactor knows it by its template
)

// NewCredentials copies the credentials of ps. It keeps only the session
// templates (one per line with sessions=N) of what ps points to.
// It panics when they hold more than 4 GiB (math.MaxUint32 bytes), which a
// list read into memory does not.
func NewCredentials(ps []Proxy) *Credentials {
	size := 0
	for i := range ps {
		if u := ps[i].User; u != nil {
			pass, _ := u.Password()
			size += len(u.Username()) + len(pass)
		}
	}
	if size > math.MaxUint32 {
		panic(fmt.Sprintf("proxies: %d bytes of credentials, more than a Credentials holds", size))
	}
	c := &Credentials{text: make([]byte, 0, size), ends: make([]uint32, 2*len(ps)), flags: make([]uint8, len(ps))}
	seen := map[*sessionTemplate]bool{}
	for i := range ps {
		p := &ps[i]
		if p.tmpl != nil {
			c.flags[i] |= credSession
			if !seen[p.tmpl] {
				seen[p.tmpl] = true
				c.tmpls = append(c.tmpls, p.tmpl)
			}
		}
		if p.User != nil {
			c.flags[i] |= credUser
			c.text = append(c.text, p.User.Username()...)
			c.ends[2*i] = uint32(len(c.text))
			pass, ok := p.User.Password()
			if ok {
				c.flags[i] |= credPass
			}
			c.text = append(c.text, pass...)
		} else {
			c.ends[2*i] = uint32(len(c.text))
		}
		c.ends[2*i+1] = uint32(len(c.text))
	}
	return c
}

// Len is how many proxies c has the credentials of.
func (c *Credentials) Len() int { return len(c.flags) }

// Get returns the user name and password of the i-th proxy, passSet
// telling whether it has a password (it may be empty), and ok whether it
// has credentials at all. The strings share c's memory: they are never to
// be printed.
func (c *Credentials) Get(i int) (user, pass string, passSet, ok bool) {
	f := c.flags[i]
	if f&credUser == 0 {
		return "", "", false, false
	}
	start := uint32(0)
	if i > 0 {
		start = c.ends[2*i-1]
	}
	mid, end := c.ends[2*i], c.ends[2*i+1]
	return c.view(start, mid), c.view(mid, end), f&credPass != 0, true
}

// Has reports whether the i-th proxy has credentials.
func (c *Credentials) Has(i int) bool { return c.flags[i]&credUser != 0 }

// Userinfo returns the credentials of the i-th proxy as a URL's, made for
// the call; nil for none.
func (c *Credentials) Userinfo(i int) *url.Userinfo {
	user, pass, passSet, ok := c.Get(i)
	switch {
	case !ok:
		return nil
	case passSet:
		return url.UserPassword(user, pass)
	}
	return url.User(user)
}

// view is text[from:to] as a string, without a copy: text is never
// written once NewCredentials returns.
func (c *Credentials) view(from, to uint32) string {
	if from == to {
		return ""
	}
	return unsafe.String(&c.text[from], int(to-from))
}
