// Command minimal is the least a Go program does to fetch a list of URLs:
// read the lines, fetch them c at once with net/http's client (one
// transport, keep-alive), read every body to its end, exit. No records,
// limits, tracing or retries, and no flags beyond -c.
//
//	go run ./bench/minimal -c 64 urls.txt
//
// bench/suite.sh times it in the latency-bound case, from start to exit as
// it times the clients: its makespan is what Go's runtime, net/http, the
// machine and the target cost on their own, start and end included, the
// floor under fetch's figure there (see README, Performance). It prints
// how many answers had status 200. Loopback only: every URL must be on a
// loopback address.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
)

func main() {
	c := flag.Int("c", 64, "requests at once")
	flag.Parse()
	if flag.NArg() != 1 || *c < 1 {
		fmt.Fprintln(os.Stderr, "usage: minimal [-c N] URL_FILE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "minimal:", err)
		os.Exit(1)
	}
	defer f.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: *c}}
	urls := make(chan string, *c)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range *c {
		wg.Go(func() {
			for u := range urls {
				resp, err := client.Get(u)
				if err != nil {
					continue
				}
				if _, err := io.Copy(io.Discard, resp.Body); err == nil && resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !loopback(sc.Text()) {
			fmt.Fprintf(os.Stderr, "minimal: %q is not on a loopback address\n", sc.Text())
			os.Exit(2)
		}
		urls <- sc.Text()
	}
	close(urls)
	wg.Wait()
	fmt.Println(ok.Load(), "ok")
}

// loopback reports whether raw is an http URL whose host is a loopback IP.
func loopback(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return false
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}
