package fetchtest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// A target behind a proxy that dials from its own loopback address, so the
// target can tell how many requests the proxy had in flight.
func ExampleStartHTTPProxy() {
	target, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer target.Close()
	bind := fetchtest.LoopbackIP(0)
	proxy, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{BindIP: bind})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer proxy.Close()

	proxyURL, _ := url.Parse(proxy.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(target.URL + "/file?size=2048&fail=1")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, len(body) > 0)

	resp, err = (&http.Client{Transport: tr}).Get(target.URL + "/file?size=2048&fail=1")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, len(body))
	fmt.Println(target.Hits("/file?size=2048&fail=1"), target.MaxInFlightFrom(bind), proxy.Stats().Requests)
	// Output:
	// 503 true
	// 200 2048
	// 2 1 2
}
