package fetchtest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// ErrNoTinyproxy means the tinyproxy binary (Debian package tinyproxy) is
// not on PATH, so StartTinyproxy cannot run. scripts/test.sh installs it.
var ErrNoTinyproxy = errors.New("fetchtest: tinyproxy not found on PATH")

// StartTinyproxy runs the real tinyproxy binary as an HTTP forward proxy
// (absolute-form requests and CONNECT) on 127.0.0.1, in a configuration
// written to dir, with Basic authentication when opts.User or opts.Password
// is set: tinyproxy answers 407 to a request or a CONNECT without the right
// credentials. Only User and Password of opts are supported. It returns
// once the proxy accepts connections; Close kills the process.
func StartTinyproxy(dir string, opts ProxyOptions) (*Proxy, error) {
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTinyproxy, err)
	}
	if opts.TLS || opts.Latency != 0 || opts.Concurrency != 0 || opts.BindIP != "" || opts.Addr != "" {
		return nil, errors.New("fetchtest: tinyproxy takes only User and Password")
	}
	return onFreePort("tinyproxy", "127.0.0.1", func(port int) (*Proxy, error) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := fmt.Sprintf("Port %d\nListen 127.0.0.1\nTimeout 60\nMaxClients 512\nAllow 127.0.0.1\nLogLevel Critical\n", port)
		if opts.User != "" || opts.Password != "" {
			conf += fmt.Sprintf("BasicAuth %s %s\n", opts.User, opts.Password)
		}
		name := filepath.Join(dir, "tinyproxy-"+strconv.Itoa(port)+".conf")
		if err := os.WriteFile(name, []byte(conf), 0o600); err != nil {
			return nil, fmt.Errorf("fetchtest: tinyproxy config: %w", err)
		}
		kill, err := startServer("tinyproxy", bin, []string{"-d", "-c", name}, addr)
		if err != nil {
			return nil, err
		}
		return &Proxy{URL: "http://" + addr, Addr: addr, opts: opts, close: kill}, nil
	})
}
