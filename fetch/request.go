package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/fetch-dev/fetch/fetch/input"
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

// newRequest is the request of one attempt of job j, under ctx: a copy of
// the run's base request with j's URL, which is shared, not copied: neither
// net/http nor fetch writes to a request's URL (a redirect makes a new
// one). The header map is the engine's, shared by every request too:
// neither net/http (which copies it for a redirect) nor fetch
// (routeTransport clones it to add Proxy-Authorization for net/http; h1
// writes its own without a copy) writes to a request's header. A JSON
// request line's method, header and body are laid over it (see
// lineRequest); a plain URL line costs nothing more.
func (e *Engine) newRequest(ctx context.Context, j *input.Line) *http.Request {
	u := j.URL
	req := e.request.WithContext(ctx)
	req.URL = u
	// The host's colon:port is normalized, as http.NewRequest does, on
	// a copy: the job's URL is as the line wrote it.
	if host := u.Host; strings.HasSuffix(host, ":") && strings.LastIndexByte(host, ':') > strings.LastIndexByte(host, ']') {
		target := *u
		target.Host = strings.TrimSuffix(host, ":")
		req.URL = &target
	}
	if j.Request != nil {
		lineRequest(req, j.Request)
	}
	if req.Host == "" {
		req.Host = req.URL.Host
	}
	return req
}

// lineRequest lays r, a JSON request line's, over req, a copy of the run's
// base request: its method, its header over the run's (a name it gives
// replaces the run's values; its Host, the request's host), and its body,
// which every attempt reads anew, and net/http and a 307 or 308 redirect
// again through GetBody (see follow.Client).
func lineRequest(req *http.Request, r *input.Request) {
	if r.Method != "" {
		req.Method = r.Method
	}
	if len(r.Header) > 0 {
		h := maps.Clone(req.Header) // the values are shared: neither is written to
		maps.Copy(h, r.Header)
		req.Header = h
		if host, ok := r.Header["Host"]; ok && len(host) > 0 {
			req.Host = host[0]
		}
	}
	if len(r.Body) > 0 {
		body := r.Body
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		req.Body, _ = req.GetBody()
		req.ContentLength = int64(len(body))
	}
}
