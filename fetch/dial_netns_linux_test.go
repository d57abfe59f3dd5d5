//go:build linux

package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"testing"
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
// for the same dial, word for word. (Three self-connects in a row, after
// which dialSocket reports the refusal such a port means where net hands
// over the socket, cannot be made: the kernel never picks a port in
// TIME_WAIT for the same destination.)
func TestDialSocketTriesAgain(t *testing.T) {
	// A port in the range this process read, so that the self-connect
	// check runs, with a port below it for the listener.
	lo, hi := localPortRange()
	port := max(int(lo), 1025)
	if port > int(hi) {
		t.Skipf("ip_local_port_range %d-%d has no port above 1024", lo, hi)
	}
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
