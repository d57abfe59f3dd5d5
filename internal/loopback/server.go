package loopback

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Server runs an http.Server on a loopback listener and stops every
// goroutine it started when it is closed. Create one with NewServer, then
// call Start; Target and Proxy are built on it.
type Server struct {
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

// NewServer listens on addr (default "127.0.0.1:0") to serve h, over TLS
// when tlsConfig is not nil. It serves HTTP/1.1 only. Call Start to begin
// serving.
func NewServer(addr string, h http.Handler, tlsConfig *tls.Config) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("loopback: listen: %w", err)
	}
	if tlsConfig != nil {
		ln = tls.NewListener(ln, tlsConfig)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, cancel: cancel, extra: make(map[io.Closer]struct{}), tls: tlsConfig != nil}
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

// Start begins serving in a new goroutine.
func (s *Server) Start() {
	s.serveWG.Add(1)
	go func() {
		defer s.serveWG.Done()
		_ = s.srv.Serve(s.ln)
	}()
}

// wrap counts handlers so Close can wait for them, and refuses requests
// that arrive while closing.
func (s *Server) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			http.Error(w, "loopback: server closing", http.StatusServiceUnavailable)
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
func (s *Server) track(c io.Closer) bool {
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
func (s *Server) untrack(c io.Closer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.extra, c)
}

// Close stops the server: it cancels every request context, closes the
// listener and every connection, hijacked ones included, then waits for
// all of its goroutines. Close may be called more than once.
func (s *Server) Close() {
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
	})
}

// Addr is the listener address, e.g. "127.0.0.1:4567".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is "http://" or "https://" and the listener address.
func (s *Server) URL() string {
	if s.tls {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// IP returns "127.0.0.{i+2}", a distinct loopback address for proxy i to
// dial from (see ProxyOptions.BindIP), for i in 0..250: a target can then
// tell the proxies apart. On Linux every 127.x address works without setup.
// It panics for any other i.
func IP(i int) string {
	if i < 0 || i > 250 {
		panic(fmt.Sprintf("loopback: IP(%d) out of range 0..250", i))
	}
	return "127.0.0." + strconv.Itoa(i+2)
}

// Abort ends the handler and drops the connection without a response, or
// without ending a chunked body cleanly: the client must not mistake a cut
// response for a whole one.
func Abort() { panic(http.ErrAbortHandler) }

// sleep waits for d or until ctx is done, and reports whether ctx is still
// live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
