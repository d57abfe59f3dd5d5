package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestArrivalsByHost: /_arrivals counts the /rate/ requests of all hosts,
// or of the one named by host=, and reset=1 forgets them all.
func TestArrivalsByHost(t *testing.T) {
	tg := &target{alarm: newAlarm(), hosts: map[string]*arrivals{}}
	srv := httptest.NewServer(tg)
	defer srv.Close()
	get := func(host, path string) string {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	count := func(path string) string {
		t.Helper()
		return strings.Fields(get("127.0.0.1:1", path))[0]
	}
	for _, h := range []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:2"} {
		get(h, "/rate/x")
	}
	get("127.0.0.1:1", "/b/0") // not timed
	for path, want := range map[string]string{
		"/_arrivals":                  "3",
		"/_arrivals?host=127.0.0.1:1": "1",
		"/_arrivals?host=127.0.0.1:2": "2",
		"/_arrivals?host=127.0.0.1:3": "0",
	} {
		if got := count(path); got != want {
			t.Errorf("%s: %s arrivals, want %s", path, got, want)
		}
	}
	count("/_arrivals?host=127.0.0.1:2&reset=1")
	for _, path := range []string{"/_arrivals", "/_arrivals?host=127.0.0.1:1", "/_arrivals?host=127.0.0.1:2"} {
		if got := count(path); got != "0" {
			t.Errorf("%s after a reset: %s arrivals, want 0", path, got)
		}
	}
}
