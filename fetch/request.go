package fetch

import (
	"context"
	"fmt"
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

// baseRequest is the request every attempt's starts from: the run's method
// and header, and the Host header when -H gives one. It is checked once,
// by http.NewRequest, so that an attempt only copies it.
func baseRequest(cfg *Config, header http.Header) (*http.Request, error) {
	req, err := http.NewRequest(cfg.Method, "http://example.com/", nil)
	if err != nil {
		return nil, fmt.Errorf("fetch: %w", err)
	}
	req.URL, req.Host, req.Header = nil, header.Get("Host"), header
	return req, nil
}

// newRequest is the request of one attempt to u, under ctx: a copy of the
// run's base request with u, which is shared, not copied: neither net/http
// nor fetch writes to a request's URL (a redirect makes a new one). The
// header map is the engine's, shared by every request too: neither net/http
// (which copies it for a redirect) nor fetch (routeTransport clones it to
// add Proxy-Authorization for net/http; h1 writes its own without a copy)
// writes to a request's header.
func (e *Engine) newRequest(ctx context.Context, u *url.URL) *http.Request {
	req := e.request.WithContext(ctx)
	req.URL = u
	// The host's colon:port is normalized, as http.NewRequest does, on
	// a copy: the job's URL is as the line wrote it.
	if host := u.Host; strings.HasSuffix(host, ":") && strings.LastIndexByte(host, ':') > strings.LastIndexByte(host, ']') {
		target := *u
		target.Host = strings.TrimSuffix(host, ":")
		req.URL = &target
	}
	if req.Host == "" {
		req.Host = req.URL.Host
	}
	return req
}
