package renew

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRenewingReplacesTransport: every third failed round trip replaces
// the transport; the one replaced closes its idle connections, so the
// next request to a live target dials again; successes never renew.
func TestRenewingReplacesTransport(t *testing.T) {
	tg, err := fetchtest.StartTarget(fetchtest.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // nothing listens there now: a refused connect

	errs := 0
	r := New(3, func() *http.Transport { return &http.Transport{MaxIdleConnsPerHost: 4} },
		func(err error) error { errs++; return err })
	defer r.CloseIdleConnections()
	client := &http.Client{Transport: r}
	// get fetches url and reports whether it had a kept-alive connection.
	get := func(url string) (reused bool, err error) {
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		_, err = io.Copy(io.Discard, resp.Body)
		return reused, err
	}
	for i := range 5 {
		reused, err := get(tg.URL + "/ok")
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && !reused {
			t.Fatalf("request %d did not reuse the kept-alive connection", i)
		}
	}
	first := r.cur.Load()
	for i := range 5 {
		if _, err := get(fmt.Sprintf("http://%s/%d", dead, i)); err == nil {
			t.Fatalf("request %d to a closed port succeeded", i)
		}
		if want := int64((i + 1) / 3); r.renewals.Load() != want {
			t.Fatalf("after %d failures: %d renewals, want %d", i+1, r.renewals.Load(), want)
		}
	}
	if errs != 5 {
		t.Errorf("%d errors handed to mapErr, want 5", errs)
	}
	if r.cur.Load() == first {
		t.Fatal("the transport was not replaced")
	}
	reused, err := get(tg.URL + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	if reused {
		t.Error("the new transport reused a connection of the replaced one")
	}
	if reused, err := get(tg.URL + "/ok"); err != nil || !reused {
		t.Errorf("the new transport keeps connections alive: reused %v, err %v", reused, err)
	}
}
