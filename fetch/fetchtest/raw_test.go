package fetchtest_test

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/fetch-dev/fetch/fetch/fetchtest"
)

// TestRawSendsBytesAsGiven: Raw writes each answer byte for byte, however
// malformed, serves requests in turn on one connection, and answers a path
// it does not know with 404.
func TestRawSendsBytesAsGiven(t *testing.T) {
	garbage := "\x00\xffnot HTTP at all\r\n"
	r, err := fetchtest.StartRaw(map[string][]byte{"/g": []byte(garbage)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct{ path, want string }{
		{"/g", garbage},
		{"/none", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"},
		{"/g", garbage},
	} {
		if _, err := io.WriteString(c, "GET "+tc.path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(tc.want))
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != tc.want {
			t.Errorf("%s: got %q, want %q", tc.path, got, tc.want)
		}
	}
	if n := r.Requests(); n != 3 {
		t.Errorf("%d requests, want 3", n)
	}
}
