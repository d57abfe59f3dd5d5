//go:build linux

package h1

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestH1KeepAliveOnReuse: h1 has keep-alive set (by its dialer, see
// testDialer) on a connection of the dialer's own sockets when it is first
// taken again, not when its first answer is
// read (a proxy that closes every connection has it closed by then).
func TestH1KeepAliveOnReuse(t *testing.T) {
	srv, h := withOneIdle(t)
	idle := func() net.Conn {
		t.Helper()
		h.mu.Lock()
		defer h.mu.Unlock()
		list := h.idle[srv.addr]
		if len(list) != 1 {
			t.Fatalf("%d idle connections, want 1", len(list))
		}
		return list[0].c
	}
	keepAliveOn := func(c net.Conn) bool {
		t.Helper()
		if _, ok := c.(*net.TCPConn); ok {
			t.Fatalf("%T is net's, not the dialer's own", c)
		}
		return sockOpt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) == 1
	}
	if keepAliveOn(idle()) {
		t.Fatal("keep-alive on after the first answer")
	}
	if _, _, reused, err := get(context.Background(), h, "GET", "http://"+srv.addr+"/", nil); err != nil || !reused {
		t.Fatalf("second request: reused %v, %v", reused, err)
	}
	if !keepAliveOn(idle()) {
		t.Fatal("keep-alive off once taken again")
	}
}

// TestSockRawErrorsAsNet: h1's own reads (sock.read, through the socket's
// RawConn) fail on a connection of its dialer's own (testDialer) as on one
// of net.Dialer: past a deadline, and after Close.
func TestSockRawErrorsAsNet(t *testing.T) {
	addr := startRawServer(t, func(c net.Conn, _ func() *http.Request) { io.Copy(io.Discard, c) }).addr
	for _, tc := range []struct {
		name string
		do   func(c net.Conn)
		is   error
	}{
		{"deadline", func(c net.Conn) { c.SetReadDeadline(time.Now().Add(-time.Second)) }, os.ErrDeadlineExceeded},
		{"closed", func(c net.Conn) { c.LocalAddr(); c.Close() }, net.ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ours, oursErr := testDialer.Dial(context.Background(), "tcp", addr)
			nets, netErr := (&net.Dialer{}).DialContext(context.Background(), "tcp", addr)
			if oursErr != nil || netErr != nil {
				t.Fatal(oursErr, netErr)
			}
			defer ours.Close()
			defer nets.Close()
			var errs [2]error
			for i, c := range []net.Conn{ours, nets} {
				var s sock
				s.init(c)
				if !s.canSend() {
					t.Fatalf("%T: no socket", c)
				}
				la := c.LocalAddr().String()
				tc.do(c)
				_, errs[i] = s.read(c, make([]byte, 16))
				if errs[i] == nil {
					t.Fatalf("%T: read did not fail", c)
				}
				errs[i] = errors.New(strings.ReplaceAll(strings.ReplaceAll(errs[i].Error(), la, "LOCAL"), "raw-read", "read"))
				if _, err := s.read(c, make([]byte, 16)); !errors.Is(err, tc.is) {
					t.Fatalf("%T: %v is not %v", c, err, tc.is)
				}
			}
			if errs[0].Error() != errs[1].Error() {
				t.Fatalf("error %q, net's %q", errs[0], errs[1])
			}
		})
	}
}

// sockOpt is the socket option level/name of c, a connection with a
// socket.
func sockOpt(t *testing.T, c net.Conn, level, name int) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	rc.Control(func(fd uintptr) { v, err = syscall.GetsockoptInt(int(fd), level, name) })
	if err != nil {
		t.Fatal(err)
	}
	return v
}
