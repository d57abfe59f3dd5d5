package fetchtest

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync"
)

// Raw is an HTTP server on 127.0.0.1 that answers with exactly the bytes
// it is given, however a client may take them: a status line of megabytes,
// headers without end, a 204 with a body, a Location of any length,
// garbage. Nothing is checked or added.
//
// Each connection's requests are read in turn (keep-alive); for each, Raw
// writes the answer set for the request's path, then reads the next
// request, until the client closes the connection or Close is called. A
// path with no answer gets "404 Not Found" with an empty body.
//
// Start one with StartRaw and Close it when done. Raw is safe for
// concurrent use.
type Raw struct {
	URL  string // "http://127.0.0.1:PORT"
	Addr string // "127.0.0.1:PORT"

	answers map[string][]byte
	ln      net.Listener
	wg      sync.WaitGroup // the accept loop and one per connection

	mu       sync.Mutex
	closed   bool
	conns    map[net.Conn]struct{}
	requests int
}

// StartRaw starts a Raw server that answers a request for path p with
// answers[p], byte for byte. The map is not copied and must not change
// afterwards; one answer of many megabytes is shared by every connection.
func StartRaw(answers map[string][]byte) (*Raw, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fetchtest: listen: %w", err)
	}
	r := &Raw{Addr: ln.Addr().String(), answers: answers, ln: ln, conns: map[net.Conn]struct{}{}}
	r.URL = "http://" + r.Addr
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Requests returns how many requests Raw has read.
func (r *Raw) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Close stops the server: it closes the listener and every connection and
// returns once every goroutine has ended. It may be called more than once.
func (r *Raw) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	_ = r.ln.Close()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Raw) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = c.Close()
			return
		}
		r.conns[c] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go r.serve(c)
	}
}

var notFound = []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

func (r *Raw) serve(c net.Conn) {
	defer r.wg.Done()
	defer func() {
		r.mu.Lock()
		delete(r.conns, c)
		r.mu.Unlock()
		_ = c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return // the client closed, or sent what is not a request
		}
		_ = req.Body.Close()
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
		answer, ok := r.answers[req.URL.Path]
		if !ok {
			answer = notFound
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}
