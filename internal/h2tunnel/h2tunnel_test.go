package h2tunnel

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestHTTP2TunnelClosedAfterRenewal: a transport of proxies closes its
// HTTP/2 tunnels when told to close its idle connections (as a renewal
// and the engine's Close do), the one busy at that moment once its
// request is over, not at its idle timeout 90 s later.
func TestHTTP2TunnelClosedAfterRenewal(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(arrived)
			<-release
		}
		w.Write([]byte("ok"))
	}))
	srv.EnableHTTP2 = true
	var open atomic.Int64
	closed := make(chan struct{}, 1)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
			select {
			case closed <- struct{}{}:
			default:
			}
		}
	}
	srv.StartTLS()
	defer srv.Close()
	px, err := fetchtest.StartHTTPProxy(fetchtest.ProxyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	pxURL, _ := url.Parse(px.URL)

	// As the engine's transports of proxies are: its own TLS settings,
	// HTTP/2 attempted, an idle timeout of 90 s.
	tr := &http.Transport{
		Proxy:               http.ProxyURL(pxURL),
		TLSClientConfig:     &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
		ForceAttemptHTTP2:   true,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	Enable(tr)
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/now", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("proto %s", resp.Proto)
	}
	type answer struct {
		resp *http.Response
		err  error
	}
	held := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/hold", nil)
		resp, err := tr.RoundTrip(req)
		held <- answer{resp, err}
	}()
	<-arrived
	if n := open.Load(); n != 1 {
		t.Fatalf("%d connections at the target, want 1", n)
	}

	tr.CloseIdleConnections() // a renewal, while the tunnel is busy
	close(release)
	a := <-held
	if a.err != nil {
		t.Fatal(a.err)
	}
	io.Copy(io.Discard, a.resp.Body)
	a.resp.Body.Close()
	deadline := time.After(5 * time.Second)
	for open.Load() != 0 {
		select {
		case <-closed:
		case <-deadline:
			t.Fatalf("%d connections at the target still open after their last request", open.Load())
		}
	}
}
