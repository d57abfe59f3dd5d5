package fetch

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// requestHeader is the header every request starts from: User-Agent and
// Accept, replaced by -H values of the same name (as curl does), built
// once per engine. Its value slices are shared by every request, clipped so
// that an Add to a request's header copies instead of writing into them.
func requestHeader(cfg *Config) http.Header {
	h := http.Header{"User-Agent": {UserAgent}, "Accept": {"*/*"}}
	for k, vs := range cfg.Header {
		h[k] = slices.Clip(slices.Clone(vs))
	}
	return h
}

// newRequest is the request of one attempt to u, under ctx: the method and
// headers of the run, and a copy of u, which is not parsed again. The
// header map is the engine's, shared by every request: neither net/http
// (which copies it for a redirect) nor fetch (routeTransport clones it to
// add Proxy-Authorization) writes to a request's header.
func (e *Engine) newRequest(ctx context.Context, u *url.URL) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, e.cfg.Method, "", nil)
	if err != nil {
		return nil, err
	}
	target := req.URL // parsed from "": a URL of the request's own, to copy u into
	*target = *u
	// The host's colon:port is normalized, as http.NewRequest does.
	if strings.LastIndexByte(target.Host, ':') > strings.LastIndexByte(target.Host, ']') {
		target.Host = strings.TrimSuffix(target.Host, ":")
	}
	req.Host, req.Header = target.Host, e.header
	if hs := e.header.Get("Host"); hs != "" {
		req.Host = hs
	}
	return req, nil
}
