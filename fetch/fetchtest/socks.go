package fetchtest

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fetch-dev/fetch/internal/loopback"
)

// ErrNoMicrosocks means the microsocks binary (Debian package microsocks)
// is not on PATH, so StartSOCKS5 cannot run. scripts/test.sh installs it;
// the tests that need a SOCKS5 proxy fail without it.
var ErrNoMicrosocks = errors.New("fetchtest: microsocks not found on PATH")

// errExitedEarly means a proxy process (microsocks, tinyproxy) exited
// before accepting connections, usually because its port was taken
// meanwhile.
var errExitedEarly = errors.New("fetchtest: proxy process exited")

// StartSOCKS5 runs the real microsocks binary as a SOCKS5 proxy listening on
// 127.0.0.1 (or opts.Addr) and dialing targets from opts.BindIP, with
// RFC 1929 user/password authentication when opts.User or opts.Password is
// set. It returns once the proxy accepts connections. Latency, Concurrency
// and TLS are not supported. The error wraps ErrNoMicrosocks when the binary is missing.
// Stats always reports zeros. Call Close to kill the process.
func StartSOCKS5(opts ProxyOptions) (*Proxy, error) {
	bin, err := exec.LookPath("microsocks")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoMicrosocks, err)
	}
	if opts.TLS || opts.Latency != 0 || opts.Concurrency != 0 {
		return nil, errors.New("fetchtest: SOCKS5 proxy supports neither TLS, Latency nor Concurrency")
	}
	bindIP, err := loopback.ParseBindIP(opts.BindIP)
	if err != nil {
		return nil, err
	}
	host, port := "127.0.0.1", 0
	if opts.Addr != "" {
		h, ps, err := net.SplitHostPort(opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("fetchtest: bad Addr %q: %w", opts.Addr, err)
		}
		if port, err = strconv.Atoi(ps); err != nil {
			return nil, fmt.Errorf("fetchtest: bad Addr %q: %w", opts.Addr, err)
		}
		if h != "" {
			host = h
		}
	}
	if port != 0 {
		return startMicrosocks(bin, host, port, bindIP.String(), opts)
	}
	return onFreePort("microsocks", host, func(port int) (*Proxy, error) {
		return startMicrosocks(bin, host, port, bindIP.String(), opts)
	})
}

// onFreePort starts a server with start on a free port of host. A free
// port can be taken between freePort and the server's bind, which then
// exits early: it tries a few ports.
func onFreePort(name, host string, start func(port int) (*Proxy, error)) (*Proxy, error) {
	const attempts = 5
	var last error
	for range attempts {
		port, err := freePort(host)
		if err != nil {
			return nil, err
		}
		p, err := start(port)
		if !errors.Is(err, errExitedEarly) {
			return p, err
		}
		last = err
	}
	return nil, fmt.Errorf("fetchtest: %s did not start in %d tries: %w", name, attempts, last)
}

// freePort asks the kernel for a free TCP port on host.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("fetchtest: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startMicrosocks(bin, host string, port int, bindIP string, opts ProxyOptions) (*Proxy, error) {
	args := []string{"-i", host, "-p", strconv.Itoa(port), "-b", bindIP}
	if opts.User != "" || opts.Password != "" {
		args = append(args, "-u", opts.User, "-P", opts.Password)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	kill, err := startServer("microsocks", bin, args, addr)
	if err != nil {
		return nil, err
	}
	return &Proxy{URL: "socks5://" + addr, Addr: addr, opts: opts, close: kill}, nil
}

// startServer runs bin with args and returns once it accepts connections
// on addr, with a function that kills it (safe to call more than once).
// The error wraps errExitedEarly when the process exits first, usually
// because its port was taken meanwhile.
func startServer(name, bin string, args []string, addr string) (kill func(), err error) {
	cmd := exec.Command(bin, args...)
	out := &cappedBuffer{max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fetchtest: start %s: %w", name, err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(done)
	}()
	var once sync.Once
	kill = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			<-done
		})
	}
	// The process tells nothing when it is ready: whether it accepts is
	// polled, every 10 ms, until it does, exits, or within has passed.
	const within = 20 * time.Second // squid, under load, takes seconds
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return kill, nil
		}
		select {
		case <-done:
			return nil, fmt.Errorf("%w: %s: %v: %s", errExitedEarly, name, waitErr, strings.TrimSpace(out.String()))
		case <-deadline.C:
			kill()
			return nil, fmt.Errorf("fetchtest: %s did not accept on %s in %v: %v: %s", name, addr, within, err, strings.TrimSpace(out.String()))
		case <-tick.C:
		}
	}
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := c.max - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (c *cappedBuffer) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return string(c.b)
}
