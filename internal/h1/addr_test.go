package h1

import (
	"net"
	"testing"
)

// TestAddrString: addrString formats a TCP address as its String does:
// IPv4 (in 4 or 16 bytes), IPv6, with a zone; and any other address too.
func TestAddrString(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1).To4(), Port: 8080},
		&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 443}, // 16 bytes
		&net.TCPAddr{IP: net.IPv6loopback, Port: 80},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 3128, Zone: "eth0"},
		&net.UnixAddr{Name: "/tmp/s", Net: "unix"},
	} {
		if got, want := addrString(a), a.String(); got != want {
			t.Errorf("addrString(%#v) = %q, want %q", a, got, want)
		}
	}
}
