//go:build !linux

package dialer

import (
	"context"
	"net"
	"net/netip"
)

// dialSocket dials nothing here: net.Dialer dials every connection (see
// dial_linux.go).
func dialSocket(context.Context, string, netip.AddrPort) (net.Conn, bool, error) {
	return nil, false, nil
}

// keepAliveSock does nothing here: net's connections have keep-alive from
// their dialer.
func keepAliveSock(net.Conn, net.KeepAliveConfig) {}
