package fetchtest

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"sync"
)

// server runs an http.Server on a loopback listener and knows how to stop
// every goroutine it started.
type server struct {
	tls    bool // serves TLS
	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc

	serveWG sync.WaitGroup // the Serve goroutine
	connWG  sync.WaitGroup // net/http connection goroutines, until closed or hijacked

	mu        sync.Mutex
	closed    bool
	handlerWG sync.WaitGroup // handlers, including hijacked tunnels
	extra     map[io.Closer]struct{}

	closeOnce sync.Once
}

// newServer listens on addr (default 127.0.0.1:0) to serve h, over TLS
// when cert is not nil. Call start to begin serving.
func newServer(addr string, h http.Handler, cert *selfSigned) (*server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fetchtest: listen: %w", err)
	}
	if cert != nil {
		ln = tls.NewListener(ln, cert.serverConfig())
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{ln: ln, cancel: cancel, extra: make(map[io.Closer]struct{}), tls: cert != nil}
	s.srv = &http.Server{
		Handler:     s.wrap(h),
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				s.connWG.Add(1)
			case http.StateClosed, http.StateHijacked:
				s.connWG.Done()
			}
		},
		ErrorLog:     log.New(io.Discard, "", 0),
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // no HTTP/2
	}
	return s, nil
}

// start begins serving in a new goroutine.
func (s *server) start() {
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		_ = s.srv.Serve(s.ln)
	}()
}

// wrap counts handlers so Close can wait for them, and refuses requests
// that arrive while closing.
func (s *server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			http.Error(w, "fetchtest: server closing", http.StatusServiceUnavailable)
			return
		}
		s.handlerWG.Add(1)
		s.mu.Unlock()
		defer s.handlerWG.Done()
		h.ServeHTTP(w, r)
	})
}

// track registers c to be closed by Close. It reports false, and closes c,
// when the server is already closing.
func (s *server) track(c io.Closer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return false
	}
	s.extra[c] = struct{}{}
	return true
}

// untrack forgets c.
func (s *server) untrack(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.extra, c)
}

// close stops the server: it cancels every request context, closes the
// listener, every connection and every tracked closer, then waits for all
// goroutines. after runs once the handlers have returned.
func (s *server) close(after func()) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		extra := s.extra
		s.extra = nil
		s.mu.Unlock()

		s.cancel()
		_ = s.srv.Close()
		for c := range extra {
			_ = c.Close()
		}
		s.serveWG.Wait()
		s.handlerWG.Wait()
		s.connWG.Wait()
		if after != nil {
			after()
		}
	})
}

// addrString is the listener address, e.g. "127.0.0.1:4567".
func (s *server) addrString() string { return s.ln.Addr().String() }

// url is "http://" or "https://" and the listener address.
func (s *server) url() string {
	if s.tls {
		return "https://" + s.addrString()
	}
	return "http://" + s.addrString()
}

// sourceIP is the IP of a "host:port" remote address, IPv4-mapped
// addresses unmapped, or remote itself when it does not parse.
func sourceIP(remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return remote
	}
	return ap.Addr().Unmap().String()
}

// normIP normalizes an IP given by a caller the way sourceIP does.
func normIP(ip string) string {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return ip
	}
	return a.Unmap().String()
}
