// Command loopback serves the side-by-side benchmarks in bench/: it starts a
// plain Go target and forward proxies on loopback, writes a URL list, a proxy
// list and the target's base URL, and serves until it is interrupted or -for
// runs out.
//
// The target answers any path with a body of size= bytes (default 1024) after
// delay= (default none), ended on time (see alarm). It does no bookkeeping
// per URL, so a list of millions of distinct URLs costs it nothing more than
// one URL repeated. Requests whose path starts with /rate/ are timed on
// arrival: GET /_arrivals answers "COUNT FIRST_NS LAST_NS" (Unix
// nanoseconds) for them, and ?reset=1 forgets them after answering.
//
// With -hosts N the target also listens on N-1 more ports, each a host of
// its own for a client's per-host limits, and writes each one's base URL
// to hosts.txt (the first is target.txt's). GET /_arrivals?host=HOST:PORT
// answers for the requests sent to that host alone.
//
// With -free-ports N it prints N free loopback TCP ports, one a line, and
// exits (for servers such as nginx that need a port in their config).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

func main() {
	dir := flag.String("dir", ".", "where to write urls.txt, proxies.txt and target.txt")
	n := flag.Int("urls", 2000, "URLs in urls.txt")
	size := flag.Int("size", 4096, "body bytes of each URL in urls.txt")
	proxyCount := flag.Int("proxies", 3, "forward proxies to start")
	latency := flag.Duration("latency", 0, "latency each proxy adds to a request")
	life := flag.Duration("for", 10*time.Minute, "serve at most this long")
	freePorts := flag.Int("free-ports", 0, "print this many free loopback ports and exit")
	hosts := flag.Int("hosts", 1, "ports the target listens on, each a host of its own (hosts.txt)")
	flag.Parse()
	var err error
	if *freePorts > 0 {
		err = printFreePorts(*freePorts)
	} else {
		err = run(*dir, *n, *size, *proxyCount, *hosts, *latency, *life)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
}

func printFreePorts(n int) error {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l)
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

func run(dir string, n, size, proxyCount, hosts int, latency, life time.Duration) error {
	tg := &target{alarm: newAlarm(), hosts: map[string]*arrivals{}}
	alarmCtx, stopAlarm := context.WithCancel(context.Background())
	defer stopAlarm()
	go tg.alarm.run(alarmCtx)
	srv := &http.Server{Handler: tg, ReadHeaderTimeout: 10 * time.Second}
	defer srv.Close()
	var bases []string
	for range max(hosts, 1) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go srv.Serve(ln)
		bases = append(bases, "http://"+ln.Addr().String())
	}
	base := bases[0]
	if err := os.WriteFile(filepath.Join(dir, "target.txt"), []byte(base+"\n"), 0o644); err != nil {
		return err
	}
	hostsFile := filepath.Join(dir, "hosts.txt")
	if hosts > 1 {
		if err := os.WriteFile(hostsFile, []byte(strings.Join(bases, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	} else if err := os.Remove(hostsFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	urls, err := os.Create(filepath.Join(dir, "urls.txt"))
	if err != nil {
		return err
	}
	for i := range n {
		fmt.Fprintf(urls, "%s/b/%d?size=%d\n", base, i, size)
	}
	if err := urls.Close(); err != nil {
		return err
	}
	list, err := os.Create(filepath.Join(dir, "proxies.txt"))
	if err != nil {
		return err
	}
	for i := range proxyCount {
		px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: fetchtest.LoopbackIP(i), Latency: latency})
		if err != nil {
			return err
		}
		defer px.Close()
		fmt.Fprintln(list, px.URL)
	}
	if err := list.Close(); err != nil {
		return err
	}
	fmt.Println("ready")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	select {
	case <-ctx.Done():
	case <-time.After(life):
	}
	return nil
}

// target is the plain Go target: a body of size= bytes after delay=.
type target struct {
	alarm *alarm
	mu    sync.Mutex
	all   arrivals
	hosts map[string]*arrivals // by the Host header; one a listening port
}

// arrivals are the /rate/ requests that arrived: how many, the first's and
// the last's time.
type arrivals struct {
	count       int
	first, last int64
}

func (a *arrivals) add(now int64) {
	if a.count == 0 {
		a.first = now
	}
	a.count++
	a.last = now
}

const maxBody = 64 << 20

var zeros = make([]byte, 64<<10)

func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_arrivals" {
		q := r.URL.Query()
		t.mu.Lock()
		a := &t.all
		if h := q.Get("host"); h != "" {
			a = t.hosts[h]
			if a == nil {
				a = &arrivals{}
			}
		}
		fmt.Fprintf(w, "%d %d %d\n", a.count, a.first, a.last)
		if q.Get("reset") == "1" {
			t.all = arrivals{}
			clear(t.hosts)
		}
		t.mu.Unlock()
		return
	}
	if strings.HasPrefix(r.URL.Path, "/rate/") {
		now := time.Now().UnixNano()
		t.mu.Lock()
		t.all.add(now)
		a := t.hosts[r.Host]
		if a == nil && len(t.hosts) < 1024 { // a Host header of the client's choosing
			a = &arrivals{}
			t.hosts[r.Host] = a
		}
		if a != nil {
			a.add(now)
		}
		t.mu.Unlock()
	}
	q := r.URL.Query()
	size := 1024
	if v := q.Get("size"); v != "" {
		s, err := strconv.Atoi(v)
		if err != nil || s < 0 || s > maxBody {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		size = s
	}
	if v := q.Get("delay"); v != "" {
		start := time.Now() // read here, not for every request
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > time.Minute {
			http.Error(w, "bad delay", http.StatusBadRequest)
			return
		}
		if t.alarm.sleep(r.Context(), start, d) != nil {
			return
		}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.Itoa(size))
	for size > 0 {
		k := min(size, len(zeros))
		if _, err := w.Write(zeros[:k]); err != nil {
			return
		}
		size -= k
	}
}
