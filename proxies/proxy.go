// Package proxies reads proxy lists, gives each proxy a stable identity that
// is safe to print, groups proxies into shared budgets (pools), and removes
// credentials from anything that will be written out.
package proxies

import (
	"net/url"

	"github.com/fetch-dev/fetch/limits"
)

// Proxy is one forward proxy from a list or a flag.
//
// URL holds the credentials and must never be printed; use ID in records,
// reports, logs and keys.
type Proxy struct {
	URL         *url.URL    // scheme http, https, socks5 or socks5h; host with port
	ID          string      // identity: scheme://host:port[#8 hex of sha256(user)]
	Pool        string      // pool name from pool=NAME, or "" for none
	Concurrency int         // concurrency=N, or 0 for the flag default
	Rate        limits.Rate // rate=R, or the zero Rate for the flag default
	RateSet     bool        // whether rate= was given
	Burst       int         // burst=N, or 0 for the flag default
	Source      string      // where it was read: "FILE:LINE" or "--proxy"
}
