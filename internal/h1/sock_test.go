//go:build unix

package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestH1SendThenRead: a request held for the first read of its answer is
// written, and its answer read, on both paths of sock.sendThenRead that
// succeed: the socket takes it all (the first read then waits for the
// answer before it reads), and the socket's send buffer is full (the rest
// goes as any write, the answer is read as any read). The failed write is
// TestH1SendFails's. Tolerance: the 5 s deadlines only keep a wrong version
// from hanging; nothing is timed.
func TestH1SendThenRead(t *testing.T) {
	const req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name string
		full bool // the client's send buffer is filled first
	}{
		{name: "taken whole"},
		{name: "send buffer full", full: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			drain := make(chan struct{})
			got := make(chan string, 1)
			go func() {
				s, err := ln.Accept()
				if err != nil {
					got <- err.Error()
					return
				}
				defer s.Close()
				<-drain
				br := bufio.NewReader(s)
				for {
					b, err := br.ReadByte()
					if err != nil {
						got <- err.Error()
						return
					}
					if b == 'G' {
						br.UnreadByte()
						break
					}
				}
				r, err := http.ReadRequest(br)
				if err != nil {
					got <- err.Error()
					return
				}
				got <- r.Method + " " + r.URL.Path
				io.WriteString(s, okAnswer)
				// Wait for the client to close, so that the answer is not cut
				// by a reset of unread bytes.
				io.Copy(io.Discard, s)
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.full {
				// Fill the socket's send buffer (and the server's receive
				// buffer): a write that stops at a deadline leaves it full.
				c.(*net.TCPConn).SetWriteBuffer(4096)
				c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
				filler := make([]byte, 8<<20)
				for i := range filler {
					filler[i] = 'x'
				}
				var ne net.Error
				if _, err := c.Write(filler); !errors.As(err, &ne) || !ne.Timeout() {
					t.Fatalf("filling: %v, want a timeout", err)
				}
				c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			}
			close(drain)
			pc := &conn{c: c, limit: unlimited}
			pc.sock.init(c)
			if !pc.canSend() {
				t.Fatal("a TCP connection cannot sendThenRead")
			}
			pc.out = []byte(req)
			b, err := io.ReadAll(io.LimitReader(pc, int64(len(okAnswer))))
			if err != nil || string(b) != okAnswer {
				t.Fatalf("read %q, %v; want %q", b, err, okAnswer)
			}
			if s := <-got; s != "GET /" {
				t.Errorf("server got %q, want GET /", s)
			}
			if pc.out != nil || pc.sock.pending != nil {
				t.Error("the request is still held after it was sent")
			}
		})
	}
}

// TestH1SendFails: a request on a connection that cannot be written (its
// sending side shut) fails with the write's error, not a read's, and is not
// sent again (the connection was new).
func TestH1SendFails(t *testing.T) {
	srv := startRawServer(t, answerOK())
	d := &net.Dialer{Timeout: 5 * time.Second}
	dials := 0
	h := New(Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials++
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		return c, err
	}, MaxHeader: 1 << 10, PerKey: 4, Budget: 4})
	defer h.CloseIdle()
	_, _, _, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil)
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("%v, want a write's broken pipe", err)
	}
	if strings.Contains(err.Error(), "connection broken") {
		t.Errorf("%v: worded as a failed read", err)
	}
	if dials != 1 {
		t.Errorf("%d dials, want 1", dials)
	}
}

// TestH1ReadsBodyInHeadsRead: when an answer's head and body come apart,
// as squid writes them, the read that sends the request and waits for the
// head waits on for the body its Content-Length gives, in the same call:
// one Read returns both, where a new read would first have tried the
// socket and found nothing. Its waiter hears that the wait is the body's.
// A head whose length says no body follows (a 304's), or that came with
// part of its body, is returned at once.
// Tolerance: the gap is 200 ms; the 5 s deadline only keeps a wrong
// version from hanging.
func TestH1ReadsBodyInHeadsRead(t *testing.T) {
	const req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	for _, tc := range []struct {
		name, head, body string
		whole            bool // the one Read returns head and body
	}{
		{name: "200", head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", body: "hello", whole: true},
		{name: "200, part of the body with the head", head: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", body: "llo"},
		{name: "304", head: "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", body: "HTTP/"},
		{name: "chunked", head: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", body: "5\r\nhello\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, func(c net.Conn, next func() *http.Request) {
				if next() == nil {
					return
				}
				io.WriteString(c, tc.head)
				time.Sleep(200 * time.Millisecond)
				io.WriteString(c, tc.body)
				io.Copy(io.Discard, c) // until the client closes
			})
			c, err := net.Dial("tcp", srv.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			var w countWaiter
			pc := &conn{c: c, limit: unlimited, get: true, waiter: &w}
			pc.sock.init(c)
			pc.out = []byte(req)
			p := make([]byte, 4096)
			n, err := pc.Read(p)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.head
			if tc.whole {
				want += tc.body
			}
			if string(p[:n]) != want {
				t.Fatalf("the first Read returned %q, want %q", p[:n], want)
			}
			if tc.whole != (w.told > 0) {
				t.Errorf("the waiter was told %d times", w.told)
			}
		})
	}
}
