package fetch_test

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch"
	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/proxies"
)

// sameFields is what a record says apart from its timings, for comparing
// the records of the two transports.
func sameFields(r *results.Record) string {
	if r == nil {
		return "no record"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ok=%v status=%d proxy=%s attempts=%d bytes=%d error=%s tries=[",
		r.OK, r.Status, r.Proxy, r.Attempts, r.Bytes, errString(r.Error))
	for _, tr := range r.Tries {
		fmt.Fprintf(&b, "{%s %d %s}", tr.Proxy, tr.Status, errString(tr.Error))
	}
	return b.String() + "]"
}

func errString(e *results.Error) string {
	if e == nil {
		return "null"
	}
	return e.Phase + "/" + e.Kind + ": " + ports.ReplaceAllString(e.Message, "$1:PORT")
}

// ports are the port numbers in a message, which differ from run to run.
var ports = regexp.MustCompile(`(127\.0\.0\.1|\[::1\]):[0-9]+`)

// TestTransportsAgree: the same lines, directly and through an HTTP proxy,
// tinyproxy and SOCKS5, give the same records on --transport fast and std
// but for timings: statuses, bytes, attempts, errors and their messages.
func TestTransportsAgree(t *testing.T) {
	env := startFaultEnv(t)
	tiny, err := fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatalf("%v (scripts/test.sh installs tinyproxy)", err)
	}
	t.Cleanup(tiny.Close)
	plain := env.plain.URL
	lines := []string{
		plain + "/a?size=10",
		plain + "/b?size=100000",
		plain + "/c?size=5000&chunks=5",
		plain + "/d?status=404&size=3",
		plain + "/e?status=204",
		plain + "/redirect?to=" + "/f%3Fsize%3D7",
		plain + "/loop",
		plain + "/g?size=300000", // over --max-body
		plain + "/h?fail=1&failstatus=503&size=4",
		env.f.URL + "/cut?head=20",
		env.f.URL + "/cut?head=58",
		env.f.URL + "/reset?size=800",
		"http://" + env.f.Refused + "/x",
		env.secure.URL + "/i?size=10",
	}
	// Each transport's lines are URIs of their own: a target counts the
	// failures it owes a URI (fail=1).
	linesOf := func(tp fetch.Transport, route string) []string {
		out := make([]string, len(lines))
		for i, l := range lines {
			sep := "?"
			if strings.Contains(l, "?") {
				sep = "&"
			}
			out[i] = l + sep + "t=" + tp.String() + "-" + url.QueryEscape(route)
		}
		return out
	}
	for _, route := range []struct{ name, proxy string }{
		{"direct", ""},
		{"http proxy", env.httpProxy.URL},
		{"tinyproxy", tiny.URL},
		{"socks5", env.socksProxy.URL},
	} {
		t.Run(route.name, func(t *testing.T) {
			recs := map[fetch.Transport]map[int]*results.Record{}
			for _, tp := range transports {
				cfg := faultConfig(env.roots)
				cfg.Transport = tp
				cfg.MaxBody = 200000
				cfg.Retries = 1
				// No line here waits for a timeout: limits far above what
				// a loaded machine takes, so that the records compare what
				// each client made of the answers, not how busy the machine
				// was (with the fault rows' 2 s, a retry under load ran out
				// of its deadline on one transport and not the other).
				cfg.ConnectTimeout, cfg.HeaderTimeout, cfg.IdleTimeout = 10*time.Second, 10*time.Second, 10*time.Second
				cfg.Timeout = 30 * time.Second
				if route.proxy != "" {
					cfg.Proxies = []proxies.Proxy{proxyOf(t, route.proxy, nil)}
					cfg.ProxyMaxFailures = 0
				}
				recs[tp], _ = run(t, cfg, linesOf(tp, route.name)...)
			}
			for i, line := range lines {
				fast, std := sameFields(recs[fetch.TransportFast][i+1]), sameFields(recs[fetch.TransportStd][i+1])
				if fast != std {
					t.Errorf("%s:\n  fast %s\n  std  %s", line, fast, std)
				}
			}
		})
	}
}
