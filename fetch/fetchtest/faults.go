package fetchtest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/loopback"
)

// Faults is a set of misbehaving servers on loopback, one per fault that
// Target and the proxies cannot produce from a query parameter. Together
// with Target (hang=1 for headers that never come, chunks&drip for a body
// that stalls or drips, fail/failstatus/retry-after for 429 and 503,
// size for a body over a limit, /loop and /redirect) they cover the ways a
// fetch can fail on the wire.
//
// Addresses are "127.0.0.1:PORT"; use them as a target ("http://" + addr)
// or as a proxy ("http://", "socks5://" + addr) as the fault requires.
// Start one with StartFaults and Close it when done. Faults is safe for
// concurrent use.
type Faults struct {
	// Blackhole is a listener whose accept queue is full and that never
	// accepts: a TCP connect to it hangs (the SYN is dropped) until the
	// client gives up. BlackholeHangs reports whether StartFaults saw a
	// connect hang there; on Linux it does. Where the kernel answers
	// anyway, Blackhole still never accepts, so a client hangs after its
	// connect instead.
	Blackhole      string
	BlackholeHangs bool

	// Refused is a port that is bound but not listening: a connect to it
	// is refused at once, and no other server can take the port meanwhile.
	Refused string

	// Silent accepts connections and reads whatever comes, but never
	// writes a byte: an HTTP client waits for headers forever, a TLS
	// client for the server's hello, an HTTP proxy client for the answer to
	// CONNECT and a SOCKS5 client for the method choice. Each connection
	// is closed when its client closes it, or by Close.
	Silent string

	// URL ("http://...") and TLSURL ("https://...", certificate trusted by
	// CertPool) serve the same paths:
	//
	//	/reset?size=N&after=M  headers with Content-Length N (default 1024),
	//	                       M bytes of body (default N/2), then a TCP
	//	                       reset (SO_LINGER 0 close) in the middle of it
	//	/stall?size=N&after=M  the same headers and bytes, then nothing more
	//	                       until the client closes (30 s at most): a body
	//	                       with a length that stalls
	//	/cut?head=N            the first N bytes of a head (default 20: half
	//	                       a status line and header), then a close (FIN)
	//	                       right behind them
	URL, TLSURL string
	CertPool    *x509.CertPool
	CertPEM     []byte

	// BadCertURL ("https://...") answers only with a certificate that no
	// client can accept: self-signed, expired, and for "wrong.invalid"
	// rather than 127.0.0.1. No pool trusts it.
	BadCertURL string

	// Proxy403 is an HTTP proxy ("http://" + Proxy403) that answers
	// "403 Forbidden" to CONNECT and to every other request.
	Proxy403 string

	// ProxyClose is an HTTP proxy that answers CONNECT with "200
	// Connection established" and then closes the tunnel at once, and
	// closes without an answer on any other request.
	ProxyClose string

	closers   []func()
	closeOnce sync.Once
}

// StartFaults starts every fault server on 127.0.0.1. It takes about 100ms
// (checking that Blackhole hangs). Call Close when done.
func StartFaults() (*Faults, error) {
	f := &Faults{}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()

	bh, err := startBlackhole()
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, bh.close)
	f.Blackhole, f.BlackholeHangs = bh.addr, bh.hangs

	addr, c, err := reservePort()
	if err != nil {
		return nil, fmt.Errorf("fetchtest: reserve a port: %w", err)
	}
	f.closers = append(f.closers, func() { _ = c.Close() })
	f.Refused = addr

	sl, err := startSilent()
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, sl.close)
	f.Silent = sl.addr

	h := http.HandlerFunc(serveFault)
	plain, err := loopback.NewServer("", h, nil)
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, plain.Close)
	f.URL = plain.URL()
	plain.Start()

	good, err := newSelfSigned()
	if err != nil {
		return nil, err
	}
	f.CertPool, f.CertPEM = good.pool, good.pem
	secure, err := loopback.NewServer("", h, good.serverConfig())
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, secure.Close)
	f.TLSURL = secure.URL()
	secure.Start()

	bad, err := newBadCert()
	if err != nil {
		return nil, err
	}
	badSrv, err := loopback.NewServer("", h, bad.serverConfig())
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, badSrv.Close)
	f.BadCertURL = badSrv.URL()
	badSrv.Start()

	p403, err := loopback.NewServer("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "fetchtest: forbidden", http.StatusForbidden)
	}), nil)
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, p403.Close)
	f.Proxy403 = p403.Addr()
	p403.Start()

	pclose, err := loopback.NewServer("", http.HandlerFunc(serveCloseAfterConnect), nil)
	if err != nil {
		return nil, err
	}
	f.closers = append(f.closers, pclose.Close)
	f.ProxyClose = pclose.Addr()
	pclose.Start()

	ok = true
	return f, nil
}

// Close stops every fault server and closes every connection they hold;
// all their goroutines have ended when it returns. Close may be called
// more than once.
func (f *Faults) Close() {
	f.closeOnce.Do(func() {
		for i := len(f.closers) - 1; i >= 0; i-- {
			f.closers[i]()
		}
	})
}

// serveFault serves the paths of Faults.URL.
func serveFault(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/reset":
		servePart(w, r, false)
	case "/stall":
		servePart(w, r, true)
	case "/cut":
		serveCut(w, r)
	default:
		http.Error(w, "fetchtest: no such fault "+r.URL.Path, http.StatusNotFound)
	}
}

// servePart sends headers with a Content-Length and part of the body,
// then resets the connection, or with stall waits for the client to close
// it.
func servePart(w http.ResponseWriter, r *http.Request, stall bool) {
	q := r.URL.Query()
	size := int64(1024)
	var err error
	if v := q.Get("size"); v != "" {
		if size, err = strconv.ParseInt(v, 10, 64); err != nil || size < 1 || size > 1<<30 {
			http.Error(w, "fetchtest: bad size", http.StatusBadRequest)
			return
		}
	}
	after := size / 2
	if v := q.Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 || after >= size {
			http.Error(w, "fetchtest: bad after (0..size-1)", http.StatusBadRequest)
			return
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "fetchtest: hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer resetConn(conn)
	fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n", size)
	if _, err := brw.Write(Body(int(after))); err != nil {
		return
	}
	if brw.Flush() != nil {
		return
	}
	if stall {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		io.Copy(io.Discard, conn) // until the client closes
		return
	}
	// The reset goes out now, behind the head and the first bytes on the
	// same connection: the client's kernel queues them before it, and a
	// read returns what is queued before it tells of the reset. So the
	// reset lands in the middle of the body, however late the client
	// reads.
}

// cutHead is the head /cut sends the start of.
const cutHead = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 1024\r\n\r\n"

// serveCut sends the first head= bytes of cutHead and closes the
// connection right behind them (a FIN, through TLS a close_notify first).
func serveCut(w http.ResponseWriter, r *http.Request) {
	n := 20
	if v := r.URL.Query().Get("head"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 || n >= len(cutHead) {
			http.Error(w, "fetchtest: bad head (0..len-1)", http.StatusBadRequest)
			return
		}
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "fetchtest: hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	brw.WriteString(cutHead[:n])
	brw.Flush()
}

// resetConn closes c with SO_LINGER 0, so that the peer gets a RST rather
// than a FIN.
func resetConn(c net.Conn) {
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = raw.Close()
}

// serveCloseAfterConnect answers CONNECT with 200 and closes; it closes
// any other request without an answer.
func serveCloseAfterConnect(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "fetchtest: hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	if r.Method == http.MethodConnect {
		_, _ = brw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
		_ = brw.Flush()
	}
}

// blackhole is a listener with a full accept queue.
type blackhole struct {
	addr  string
	hangs bool
	ln    net.Listener
	fill  []net.Conn
}

// startBlackhole listens with a backlog of 1, fills the accept queue with
// connections it never accepts, and checks that one more connect hangs.
func startBlackhole() (*blackhole, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fetchtest: listen: %w", err)
	}
	b := &blackhole{addr: ln.Addr().String(), ln: ln}
	if err := setBacklog(ln.(*net.TCPListener), 1); err != nil {
		// No way to shrink the queue here: the connect is answered, but
		// nothing is ever accepted.
		return b, nil
	}
	// Linux queues backlog+1 connections; a few more dials are allowed for
	// other kernels. A dial that hangs for fillWait means the queue is full.
	const maxFill, fillWait = 8, 100 * time.Millisecond
	for range maxFill {
		c, err := net.DialTimeout("tcp", b.addr, fillWait)
		if err != nil {
			var ne net.Error
			b.hangs = errors.As(err, &ne) && ne.Timeout()
			break
		}
		b.fill = append(b.fill, c)
	}
	return b, nil
}

func (b *blackhole) close() {
	for _, c := range b.fill {
		_ = c.Close()
	}
	_ = b.ln.Close()
}

// silent accepts connections and reads them until they close, never
// writing.
type silent struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func startSilent() (*silent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fetchtest: listen: %w", err)
	}
	s := &silent{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

func (s *silent) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return // closed
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			_, _ = io.Copy(io.Discard, bufio.NewReader(c))
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

func (s *silent) close() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.ln.Close()
	s.wg.Wait()
}

// newBadCert makes a certificate no client accepts: self-signed, expired
// and for another host name.
func newBadCert() (*selfSigned, error) {
	now := time.Now()
	return selfSign(&x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{Organization: []string{"fetchtest"}, CommonName: "wrong.invalid"},
		NotBefore:    now.Add(-48 * time.Hour),
		NotAfter:     now.Add(-24 * time.Hour),
		DNSNames:     []string{"wrong.invalid"},
	})
}
