// Command bare is the least a Go client can do per URL through a forward
// proxy that closes every connection (tinyproxy does): dial, write the
// request in absolute form, read the answer to its Content-Length, close.
// No records, limits, tracing or retries. Its req/s and CPU per URL are
// what Go's runtime and the kernel cost on their own, the floor under
// fetch's figure through such a proxy (see README, Performance).
//
//	go run ./bench/bare -proxy 127.0.0.1:8888 -target http://127.0.0.1:8080
//
// It sends n requests, c at once, for target/b/I?size=1024, I from 0 to
// n-1, and prints how many came back with a complete answer and the rate.
// Loopback only: the proxy and the target must be loopback addresses.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	proxy := flag.String("proxy", "", "the proxy's loopback host:port")
	target := flag.String("target", "", "the target's base URL, http://host:port")
	n := flag.Int("n", 20000, "requests")
	c := flag.Int("c", 64, "requests at once")
	flag.Parse()
	hostport := strings.TrimPrefix(*target, "http://")
	if !loopback(*proxy) || !strings.HasPrefix(*target, "http://") || !loopback(hostport) {
		fmt.Fprintln(os.Stderr, "bare: -proxy must be a loopback IP:port and -target http://IP:port, a loopback IP too")
		os.Exit(2)
	}
	var next, ok atomic.Int64
	d := &net.Dialer{KeepAlive: -1}
	start := time.Now()
	var wg sync.WaitGroup
	for range *c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 8192)
			for i := next.Add(1) - 1; i < int64(*n); i = next.Add(1) - 1 {
				req := fmt.Sprintf("GET %s/b/%d?size=1024 HTTP/1.1\r\nHost: %s\r\nUser-Agent: bare\r\n\r\n", *target, i, hostport)
				if answered(d, *proxy, req, buf) {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	fmt.Printf("%d of %d ok in %v: %.0f/s\n", ok.Load(), *n, el.Round(time.Millisecond), float64(ok.Load())/el.Seconds())
}

func loopback(hostport string) bool {
	ap, err := netip.ParseAddrPort(hostport)
	return err == nil && ap.Addr().IsLoopback()
}

// answered sends req on a new connection to proxy and reports whether a
// whole answer with a Content-Length came back.
func answered(d *net.Dialer, proxy, req string, buf []byte) bool {
	conn, err := d.Dial("tcp", proxy)
	if err != nil {
		return false
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(req)); err != nil {
		return false
	}
	got := 0
	for got < len(buf) {
		m, err := conn.Read(buf[got:])
		got += m
		if h := bytes.Index(buf[:got], []byte("\r\n\r\n")); h >= 0 {
			cl := bytes.Index(buf[:h], []byte("Content-Length: "))
			if cl < 0 {
				return false
			}
			e := bytes.IndexByte(buf[cl:h+2], '\r')
			l, perr := strconv.Atoi(string(buf[cl+len("Content-Length: ") : cl+e]))
			if perr != nil {
				return false
			}
			if got >= h+4+l {
				return true
			}
		}
		if err != nil {
			return false
		}
	}
	return false
}
