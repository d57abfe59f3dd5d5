//go:build linux

package dialer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// inNetns runs f on a thread of its own in a new network namespace, whose
// loopback is up and whose kernel picks every local port of a connect from
// ports alone (ip_local_port_range), and returns f's error. The thread is
// never given back: it ends with f's goroutine, and no other goroutine
// runs in the namespace. It skips the test where namespaces cannot be made
// (CAP_SYS_ADMIN; CI runs the tests as root).
func inNetns(t *testing.T, ports [2]int, f func() error) error {
	t.Helper()
	localPortRange() // read here, in the process's namespace, never in the test's
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread goes when this goroutine ends
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("%w: %v", errors.ErrUnsupported, err)
			return
		}
		if err := loopbackUp(); err != nil {
			errc <- fmt.Errorf("bringing lo up: %w", notPermitted(err))
			return
		}
		r := fmt.Sprintf("%d %d", ports[0], ports[1])
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte(r), 0); err != nil {
			// /proc/sys is read-only in some containers even for root.
			errc <- fmt.Errorf("ip_local_port_range %s: %w", r, notPermitted(err))
			return
		}
		errc <- f()
	}()
	err := <-errc
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("no network namespace of our own to set up (needs CAP_SYS_ADMIN and a writable /proc/sys): %v", err)
	}
	return err
}

// notPermitted marks err as errors.ErrUnsupported when it says the
// process may not do what it tried (a read-only /proc/sys, no
// CAP_NET_ADMIN in the namespace): the test skips rather than fails.
func notPermitted(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("%w: %w", errors.ErrUnsupported, err)
	}
	return err
}

// loopbackUp sets the flag IFF_UP on the interface lo of the calling
// thread's network namespace.
func loopbackUp() error {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var req struct { // struct ifreq, with ifr_flags
		name  [syscall.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], "lo")
	for _, op := range []uintptr{syscall.SIOCGIFFLAGS, syscall.SIOCSIFFLAGS} {
		if op == syscall.SIOCSIFFLAGS {
			req.flags |= syscall.IFF_UP
		}
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), op, uintptr(unsafe.Pointer(&req))); e != 0 {
			return e
		}
	}
	return nil
}

// TestDialSocketTriesAgain makes the cases in which dialSocket connects
// again happen on demand, in a kernel with one local port for connects:
//   - A dial to that port, where nobody listens, connects the socket to
//     itself. dialSocket must not hand that over: it tries again, and the
//     kernel, whose one port now waits in TIME_WAIT for that destination,
//     has no port left (EADDRNOTAVAIL) at the second and third tries.
//   - A dial to a listener while another connection holds the one port
//     finds none free from the first try (EADDRNOTAVAIL).
//
// Both take three tries, as net's dial does, and end in net's own error
// for the same dial, word for word. (Three self-connects in a row are
// TestDialSocketMeetsItselfThrice's.)
func TestDialSocketTriesAgain(t *testing.T) {
	port := selfPort(t)
	err := inNetns(t, [2]int{port, port}, func() error {
		ctx := context.Background()
		tries := 0
		tried := func() { tries++ }
		self := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
		c, ok, err := dialSocketTries(ctx, "tcp", self, tried)
		if !ok {
			return errors.New("dialSocket did not take 127.0.0.1")
		}
		if err == nil {
			defer c.Close()
			return fmt.Errorf("a dial to %v, where only the dialer is, returned a connection %v -> %v", self, c.LocalAddr(), c.RemoteAddr())
		}
		if err := sameAsNet(err, self); err != nil {
			return fmt.Errorf("a dial meeting itself: %w", err)
		}
		if tries != 3 {
			return fmt.Errorf("a dial meeting itself: %d tries, want 3", tries)
		}

		// The listener's port is outside the range: bound by number.
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port-1))
		if err != nil {
			return err
		}
		defer ln.Close()
		to := netip.MustParseAddrPort(ln.Addr().String())
		first, _, err := dialSocket(ctx, "tcp", to)
		if err != nil {
			return fmt.Errorf("first dial, with the port free: %v", err)
		}
		defer first.Close()
		if got := first.LocalAddr().(*net.TCPAddr).Port; got != port {
			return fmt.Errorf("first dial from port %d, want %d: the namespace's range is not in force", got, port)
		}
		tries = 0
		_, _, err = dialSocketTries(ctx, "tcp", to, tried)
		if err := sameAsNet(err, to); err != nil {
			return fmt.Errorf("a dial with no port free: %w", err)
		}
		if tries != 3 {
			return fmt.Errorf("a dial with no port free: %d tries, want 3", tries)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDialSocketMeetsItselfThrice makes a dial meet its own socket at each
// of its three tries, in a kernel with one local port for connects and a
// dial to that port, where nobody listens: dialSocket must not hand such a
// socket over (net's dial does, the third time), and reports the refusal
// a port with nobody on it means, ECONNREFUSED, as a *net.OpError "dial".
//
// The kernel picks the one port again only once it may reuse the
// TIME_WAIT its last self-connect left for the same destination
// (tcp_tw_reuse, set here for the namespace): a second after that
// connection's last timestamp. So the test waits 1.1 s before the second
// and third tries, and runs about 2.2 s.
func TestDialSocketMeetsItselfThrice(t *testing.T) {
	port := selfPort(t)
	var reused bool
	err := inNetns(t, [2]int{port, port}, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/tcp_tw_reuse", []byte("1"), 0); err != nil {
			return fmt.Errorf("tcp_tw_reuse: %w", notPermitted(err))
		}
		tries := 0
		tried := func() {
			tries++
			if tries > 1 {
				time.Sleep(1100 * time.Millisecond)
			}
		}
		self := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port))
		c, ok, err := dialSocketTries(context.Background(), "tcp", self, tried)
		if !ok {
			return errors.New("dialSocket did not take 127.0.0.1")
		}
		if err == nil {
			defer c.Close()
			return fmt.Errorf("a dial that met itself three times returned a connection %v -> %v", c.LocalAddr(), c.RemoteAddr())
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil // this kernel did not reuse the port: reused stays false
		}
		reused = true
		var oe *net.OpError
		if !errors.As(err, &oe) || oe.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("a dial that met itself three times: %v, want a *net.OpError dial with ECONNREFUSED", err)
		}
		if want := fmt.Sprintf("dial tcp %v: connect: connection refused", self); err.Error() != want {
			return fmt.Errorf("a dial that met itself three times:\n got %v\nwant %v", err, want)
		}
		if tries != 3 {
			return fmt.Errorf("a dial that met itself: %d tries, want 3", tries)
		}
		// The refusal is dialSocket's own, not the kernel's: the third
		// socket was connected (to itself) and closed, which leaves the
		// connection from the port to itself in TIME_WAIT (once its own
		// FIN has come back to it: a moment, on a busy machine), where a
		// SYN refused by the kernel leaves nothing.
		n, err := 0, error(nil)
		pollKernel(2*time.Second, func() bool {
			n, err = timeWait(port)
			return n != 0 || err != nil
		})
		if err != nil || n != 1 {
			return fmt.Errorf("connections %d -> %d in TIME_WAIT: %d (%v), want 1", port, port, n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reused {
		t.Skip("this kernel did not pick the port again from its TIME_WAIT (tcp_tw_reuse): no second self-connect to make")
	}
}

// selfPort returns the port the tests in a namespace make its one local
// port for connects: one in the range this process read, so that
// dialSocket's self-connect check runs, with a port below it free for a
// listener. It skips the test when the range has none above 1024.
func selfPort(t *testing.T) int {
	t.Helper()
	lo, hi := localPortRange()
	port := max(int(lo), 1025)
	if port > int(hi) {
		t.Skipf("ip_local_port_range %d-%d has no port above 1024", lo, hi)
	}
	return port
}

// pollKernel calls done every 10 ms until it holds or within has passed.
// It is for the kernel's socket table, which tells nobody when a
// connection enters a state: there is no event to wait on.
func pollKernel(within time.Duration, done func() bool) {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !done() {
		select {
		case <-deadline.C:
			return
		case <-tick.C:
		}
	}
}

// timeWait counts the IPv4 connections from 127.0.0.1:port to itself in
// TIME_WAIT in the calling thread's network namespace.
func timeWait(port int) (int, error) {
	b, err := os.ReadFile("/proc/thread-self/net/tcp")
	if err != nil {
		return 0, err
	}
	// The kernel writes an address as its 4 bytes read as a number in the
	// machine's byte order.
	self := fmt.Sprintf("%08X:%04X", binary.NativeEndian.Uint32([]byte{127, 0, 0, 1}), port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[1] == self && f[2] == self && f[3] == "06" {
			n++
		}
	}
	return n, nil
}

// sameAsNet checks that err, dialSocket's for a dial to ap, says no local
// port was free (EADDRNOTAVAIL) as net.Dial's for the same dial does.
func sameAsNet(err error, ap netip.AddrPort) error {
	var oe *net.OpError
	if !errors.As(err, &oe) || !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("%v, want a *net.OpError with EADDRNOTAVAIL", err)
	}
	c, nerr := net.Dial("tcp", ap.String())
	if nerr == nil {
		c.Close()
		return fmt.Errorf("net.Dial connected %v -> %v where dialSocket did not", c.LocalAddr(), c.RemoteAddr())
	}
	if err.Error() != nerr.Error() {
		return fmt.Errorf("\n got %v\nwant %v (net's)", err, nerr)
	}
	return nil
}
