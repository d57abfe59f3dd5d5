// Command loopback serves the side-by-side benchmarks in bench/: it starts a
// fetchtest target and forward proxies on loopback, writes a URL list and a
// proxy list, and serves until it is interrupted or -for runs out.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

func main() {
	dir := flag.String("dir", ".", "where to write urls.txt and proxies.txt")
	n := flag.Int("urls", 2000, "URLs in urls.txt")
	size := flag.Int("size", 4096, "body bytes of each URL")
	proxyCount := flag.Int("proxies", 3, "forward proxies to start")
	latency := flag.Duration("latency", 0, "latency each proxy adds to a request")
	life := flag.Duration("for", 10*time.Minute, "serve at most this long")
	flag.Parse()
	if err := run(*dir, *n, *size, *proxyCount, *latency, *life); err != nil {
		fmt.Fprintln(os.Stderr, "loopback:", err)
		os.Exit(1)
	}
}

func run(dir string, n, size, proxyCount int, latency, life time.Duration) error {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		return err
	}
	defer tg.Close()
	urls, err := os.Create(filepath.Join(dir, "urls.txt"))
	if err != nil {
		return err
	}
	for i := range n {
		fmt.Fprintf(urls, "%s/b/%d?size=%d\n", tg.URL, i, size)
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
