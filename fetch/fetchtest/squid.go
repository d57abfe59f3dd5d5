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

// ErrNoSquid means the squid binary (Debian package squid) is not on PATH,
// so StartSquid cannot run. scripts/test.sh installs it.
var ErrNoSquid = errors.New("fetchtest: squid not found on PATH")

// StartSquid runs the real squid as an HTTP forward proxy (absolute-form
// requests and CONNECT to any port) on 127.0.0.1, with no cache and no
// logs but its cache.log, in a configuration written to dir (which it
// makes writable for squid's own user). It returns once the proxy accepts
// connections; Close kills the process. Squid answers a target's failure
// with its own error pages (503 with X-Squid-Error), and a CONNECT to a
// refused port with 503.
func StartSquid(dir string) (*Proxy, error) {
	bin, err := exec.LookPath("squid")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSquid, err)
	}
	return onFreePort("squid", "127.0.0.1", func(port int) (*Proxy, error) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		d := filepath.Join(dir, "squid-"+strconv.Itoa(port))
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, fmt.Errorf("fetchtest: squid dir: %w", err)
		}
		_ = os.Chmod(d, 0o777) // squid drops root for its own user
		name := filepath.Join(d, "squid.conf")
		if err := os.WriteFile(name, []byte(squidConf(addr, d)), 0o644); err != nil {
			return nil, fmt.Errorf("fetchtest: squid config: %w", err)
		}
		kill, err := startServer("squid", bin, []string{"-N", "-f", name}, addr)
		if err != nil {
			return nil, err
		}
		return &Proxy{URL: "http://" + addr, Addr: addr, close: kill}, nil
	})
}

// squidConf is a forward proxy on addr with no cache and no logs but
// dir/cache.log. Its name server, 127.0.0.1:53, does not answer, so a
// name that does not resolve fails once dns_timeout has passed: 2 s with
// a query sent again after 1 s, not squid's default of 30 s.
func squidConf(addr, dir string) string {
	return fmt.Sprintf(`http_port %s
http_access allow all
cache deny all
access_log none
cache_store_log none
cache_log %s/cache.log
pid_filename %s/squid.pid
coredump_dir %s
dns_nameservers 127.0.0.1
dns_timeout 2 seconds
dns_retransmit_interval 1 seconds
pinger_enable off
shutdown_lifetime 0 seconds
via off
forwarded_for delete
`, addr, dir, dir, dir)
}
