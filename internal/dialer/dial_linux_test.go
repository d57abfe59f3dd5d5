//go:build linux

package dialer

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// dialBoth dials addr with dialSocket and with net.Dialer, and fails the
// test when dialSocket does not take it.
func dialBoth(t *testing.T, ctx context.Context, addr string) (ours, nets net.Conn, oursErr, netErr error) {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	ours, done, oursErr := dialSocket(ctx, "tcp", ap)
	if !done {
		t.Fatalf("dialSocket did not take %s", addr)
	}
	d := &net.Dialer{}
	nets, netErr = d.DialContext(ctx, "tcp", addr)
	return ours, nets, oursErr, netErr
}

// startFaults starts fetchtest's faulty servers for the test.
func startFaults(t *testing.T) *fetchtest.Faults {
	t.Helper()
	f, err := fetchtest.StartFaults()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// listening returns the address of a loopback server that accepts
// connections and reads them until they close.
func listening(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
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

// withoutPorts is s with the local ports of a and b written as LOCAL, so
// that the errors of two connections can be compared.
func withoutPorts(s string, conns ...net.Conn) string {
	for _, c := range conns {
		if c != nil {
			s = strings.ReplaceAll(s, c.LocalAddr().String(), "LOCAL")
		}
	}
	return s
}

// TestDialSocketAsNet: a connection of dialSocket fails as one of
// net.Dialer does, word for word, and for errors.Is and net.Error: a
// refused connect, a reset, a read past its deadline, a read after close.
func TestDialSocketAsNet(t *testing.T) {
	f := startFaults(t)

	t.Run("refused", func(t *testing.T) {
		// Bounded: a refusal the dial missed would otherwise hang it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ours, nets, oursErr, netErr := dialBoth(t, ctx, f.Refused)
		if ours != nil || nets != nil {
			t.Fatalf("a dial of a port nobody listens on connected: %v, %v", ours, nets)
		}
		if oursErr == nil || oursErr.Error() != netErr.Error() {
			t.Fatalf("error %q, net's %q", oursErr, netErr)
		}
		if !errors.Is(oursErr, syscall.ECONNREFUSED) {
			t.Fatalf("%v is not ECONNREFUSED", oursErr)
		}
	})

	// A server that resets every connection it accepts, once told to.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 2)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c.(*net.TCPConn)
		}
	}()
	pair := func(t *testing.T) (ours, nets net.Conn, theirs []*net.TCPConn) {
		t.Helper()
		ours, nets, oursErr, netErr := dialBoth(t, context.Background(), ln.Addr().String())
		if oursErr != nil || netErr != nil {
			t.Fatal(oursErr, netErr)
		}
		t.Cleanup(func() { ours.Close(); nets.Close() })
		for range 2 {
			c := <-accepted
			t.Cleanup(func() { c.Close() })
			theirs = append(theirs, c)
		}
		return ours, nets, theirs
	}

	t.Run("addresses", func(t *testing.T) {
		ours, _, theirs := pair(t)
		if ours.RemoteAddr().String() != ln.Addr().String() {
			t.Errorf("RemoteAddr %s, want %s", ours.RemoteAddr(), ln.Addr())
		}
		// theirs[0] or theirs[1] is ours, in the order the kernel queued them.
		if l := ours.LocalAddr().String(); l != theirs[0].RemoteAddr().String() && l != theirs[1].RemoteAddr().String() {
			t.Errorf("LocalAddr %s is neither accepted connection's peer (%s, %s)", l, theirs[0].RemoteAddr(), theirs[1].RemoteAddr())
		}
	})

	t.Run("exchange", func(t *testing.T) {
		ours, _, theirs := pair(t)
		if _, err := io.WriteString(ours, "ping"); err != nil {
			t.Fatal(err)
		}
		for _, c := range theirs {
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			b := make([]byte, 4)
			if n, _ := io.ReadFull(c, b); n == 4 {
				if string(b) != "ping" {
					t.Fatalf("the server read %q", b)
				}
				c.SetReadDeadline(time.Time{})
				c.Write([]byte("pong"))
			}
		}
		b := make([]byte, 4)
		if _, err := io.ReadFull(ours, b); err != nil || string(b) != "pong" {
			t.Fatalf("read %q, %v", b, err)
		}
	})

	t.Run("reset", func(t *testing.T) {
		ours, nets, theirs := pair(t)
		for _, c := range theirs {
			c.SetLinger(0)
			c.Close() // a reset
		}
		oursErr := readErr(ours)
		netErr := readErr(nets)
		if !errors.Is(oursErr, syscall.ECONNRESET) {
			t.Fatalf("%v is not ECONNRESET", oursErr)
		}
		if o, n := withoutPorts(oursErr.Error(), ours), withoutPorts(netErr.Error(), nets); o != n {
			t.Fatalf("error %q, net's %q", o, n)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		ours, nets, _ := pair(t)
		for _, c := range []net.Conn{ours, nets} {
			c.SetReadDeadline(time.Now().Add(-time.Second))
		}
		oursErr, netErr := readErr(ours), readErr(nets)
		var ne net.Error
		if !errors.Is(oursErr, os.ErrDeadlineExceeded) || !errors.As(oursErr, &ne) || !ne.Timeout() {
			t.Fatalf("%v is not a timeout", oursErr)
		}
		if o, n := withoutPorts(oursErr.Error(), ours), withoutPorts(netErr.Error(), nets); o != n {
			t.Fatalf("error %q, net's %q", o, n)
		}
	})

	t.Run("closed", func(t *testing.T) {
		ours, nets, _ := pair(t)
		la, lb := ours.LocalAddr(), nets.LocalAddr() // before Close, as an error would
		ours.Close()
		nets.Close()
		oursErr, netErr := readErr(ours), readErr(nets)
		if !errors.Is(oursErr, net.ErrClosed) {
			t.Fatalf("%v is not net.ErrClosed", oursErr)
		}
		o := strings.ReplaceAll(oursErr.Error(), la.String(), "LOCAL")
		n := strings.ReplaceAll(netErr.Error(), lb.String(), "LOCAL")
		if o != n {
			t.Fatalf("error %q, net's %q", o, n)
		}
	})
}

func readErr(c net.Conn) error {
	_, err := c.Read(make([]byte, 16))
	return err
}

// TestDialSocketCancelled: a connect that hangs (a full accept queue)
// ends when its context does, within 0.5 s of it.
func TestDialSocketCancelled(t *testing.T) {
	f := startFaults(t)
	if !f.BlackholeHangs {
		t.Fatal("a connect to a full accept queue does not hang here")
	}
	const after, tolerance = 100 * time.Millisecond, 500 * time.Millisecond
	start := time.Now() // before the context: its deadline counts from its making
	ctx, cancel := context.WithTimeout(context.Background(), after)
	defer cancel()
	c, done, err := dialSocket(ctx, "tcp", netip.MustParseAddrPort(f.Blackhole))
	took := time.Since(start)
	if !done || c != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dialSocket: %v, %v, %v; want the context's deadline", c, done, err)
	}
	if took < after || took > after+tolerance {
		t.Fatalf("took %v, want %v to %v", took, after, after+tolerance)
	}
}

// TestDialSocketAddresses: IPv6 is dialled too; an address with a zone,
// or of the other family than the network names, is left to net.Dialer.
func TestDialSocketAddresses(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Fatalf("no IPv6 loopback here: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	c, done, err := dialSocket(context.Background(), "tcp", netip.MustParseAddrPort(ln.Addr().String()))
	if !done || err != nil {
		t.Fatalf("[::1]: %v, %v", done, err)
	}
	if c.RemoteAddr().String() != ln.Addr().String() {
		t.Errorf("RemoteAddr %s, want %s", c.RemoteAddr(), ln.Addr())
	}
	c.Close()
	for _, tc := range []struct{ network, addr string }{
		{"tcp", "[fe80::1%lo]:80"},
		{"tcp4", "[::1]:80"},
		{"tcp6", "127.0.0.1:80"},
		{"udp", "127.0.0.1:80"},
	} {
		if c, done, err := dialSocket(context.Background(), tc.network, netip.MustParseAddrPort(tc.addr)); done || c != nil || err != nil {
			t.Errorf("%s %s: taken (%v, %v)", tc.network, tc.addr, c, err)
		}
	}
}

// TestKeepAliveSock: a connection of dialSocket has no keep-alive until
// Dialer.KeepAlive, and then a first probe after KeepAliveConfig.Idle; a
// Dialer with KeepAliveAtDial sets it at the dial.
func TestKeepAliveSock(t *testing.T) {
	addr := listening(t)
	d := &Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 30 * time.Second, Interval: -1, Count: -1}}
	c, err := d.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if sockOpt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) != 0 {
		t.Fatal("keep-alive on at the dial")
	}
	if sockOpt(t, c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY) == 0 {
		t.Fatal("TCP_NODELAY off")
	}
	if _, ok := c.(*tcpSock); !ok {
		t.Fatalf("%T is not dialSocket's", c)
	}
	d.KeepAlive(c)
	if sockOpt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) != 1 {
		t.Fatal("keep-alive off once kept")
	}
	if got, want := sockOpt(t, c, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE), int(d.KeepAliveConfig.Idle/time.Second); got != want {
		t.Fatalf("first probe after %d s, want %d", got, want)
	}
	d.KeepAliveAtDial = true
	at, err := d.Dial(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	if sockOpt(t, at, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE) != 1 {
		t.Fatal("keep-alive off at the dial with KeepAliveAtDial")
	}
}

// TestDialSocketLowFD: with standard output closed, a new socket takes
// its number, and an os.File there would raise SIGPIPE on a write to a
// closed connection: dialSocket leaves such a dial to net.Dialer. Run in
// a child process, which closes its own standard output.
func TestDialSocketLowFD(t *testing.T) {
	if os.Getenv("FETCH_TEST_LOW_FD") == "1" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Stderr.WriteString("listen: " + err.Error() + "\n")
			os.Exit(3)
		}
		syscall.Close(1)
		c, done, err := dialSocket(context.Background(), "tcp", netip.MustParseAddrPort(ln.Addr().String()))
		switch {
		case done || c != nil || err != nil:
			os.Stderr.WriteString("LOWFD-TAKEN\n")
		default:
			os.Stderr.WriteString("LOWFD-LEFT\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDialSocketLowFD$")
	cmd.Env = append(os.Environ(), "FETCH_TEST_LOW_FD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "LOWFD-LEFT") {
		t.Fatalf("a socket on standard output's number was dialled as an os.File: %s", out)
	}
}

// TestTCPSockToItself: a socket connected to itself (a port in the
// ephemeral range nobody listens on, chosen as the local port too) is
// told apart from one connected to a server (toItself, which dialSocket
// asks before it dials again).
func TestTCPSockToItself(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sa := &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	bound, _ := syscall.Getsockname(fd)
	sa.Port = bound.(*syscall.SockaddrInet4).Port
	if err := syscall.Connect(fd, sa); err != nil && err != syscall.EINPROGRESS {
		syscall.Close(fd)
		t.Fatal(err)
	}
	raddr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.Port}
	s, err := newTCPSock(os.NewFile(uintptr(fd), "tcp"), raddr, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.awaitConnect(context.Background()); err != nil {
		t.Fatalf("a connect to itself: %v", err)
	}
	if !s.toItself() {
		t.Fatalf("a socket connected to itself (%s -> %s) not told", s.LocalAddr(), s.RemoteAddr())
	}

	c, _, err := dialSocket(context.Background(), "tcp", netip.MustParseAddrPort(listening(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.(*tcpSock).toItself() {
		t.Fatal("a connection to a listener taken for one to itself")
	}
}

// TestSockaddrPort: ports are written and read in network byte order,
// whatever the machine's.
func TestSockaddrPort(t *testing.T) {
	var field uint16
	putPort(&field, 0x1f90) // 8080
	b := (*[2]byte)(unsafe.Pointer(&field))
	if b[0] != 0x1f || b[1] != 0x90 {
		t.Fatalf("bytes %x, want 1f90", b[:])
	}
	if got := getPort(&field); got != 8080 {
		t.Fatalf("read back %d", got)
	}
}

// TestDialNamesByNet: an address that is not an IP and a port (a name) is
// dialled by net.Dialer, and its connection is net's.
func TestDialNamesByNet(t *testing.T) {
	addr := listening(t)
	_, port, _ := net.SplitHostPort(addr)
	c, err := (&Dialer{}).Dial(context.Background(), "tcp4", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*net.TCPConn); !ok {
		t.Fatalf("%T, want net's *net.TCPConn", c)
	}
}
