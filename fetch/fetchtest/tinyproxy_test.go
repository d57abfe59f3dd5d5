package fetchtest_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// TestTinyproxyAuth: the real tinyproxy forwards with the right
// credentials, and answers 407 to plain requests and to CONNECT without
// them.
func TestTinyproxyAuth(t *testing.T) {
	p, err := fetchtest.StartTinyproxy(t.TempDir(), fetchtest.ProxyOptions{User: "alice", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer target.Close()
	tlsTarget := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	defer tlsTarget.Close()

	for _, tt := range []struct {
		name, proxy, url string
		want             int // status, or 0 for a CONNECT refused
	}{
		{"plain with credentials", p.AuthURL(), target.URL, 200},
		{"plain without", p.URL, target.URL, 407},
		{"CONNECT with credentials", p.AuthURL(), tlsTarget.URL, 200},
		{"CONNECT with a wrong password", "http://alice:wrong@" + p.Addr, tlsTarget.URL, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pu, _ := url.Parse(tt.proxy)
			tr := tlsTarget.Client().Transport.(*http.Transport).Clone()
			tr.Proxy = http.ProxyURL(pu)
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(tt.url)
			if tt.want == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("status %d, want the CONNECT refused", resp.StatusCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
}
