// Package dialer dials TCP connections to IP addresses with the socket's
// own system calls, and hands them to Go's poller: net.Dialer's work
// without what a connection used once does not need (see dialSocket). It
// is the HTTP/1.1 client's dialer (internal/h1), where a proxy that closes
// every connection, or a crawl of many hosts, makes a dial for every
// request. Its connections behave, and fail, as net's do: the same
// net.Conn methods, the same *net.OpError errors word for word, and the
// same deadlines; a dial it cannot make so (an address with a zone, a
// name, another system than Linux) is net.Dialer's.
package dialer

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/fetch-dev/fetch/internal/connwatch"
)

// Dialer dials TCP connections. Its zero value dials without TCP
// keep-alive. It is safe for concurrent use.
type Dialer struct {
	// KeepAliveConfig is the TCP keep-alive of every connection: given to
	// net.Dialer for the dials it makes, and set on a socket of the
	// Dialer's own (its first probe after Idle) at the dial when
	// KeepAliveAtDial, else by KeepAlive, when the caller asks.
	KeepAliveConfig net.KeepAliveConfig

	// KeepAliveAtDial sets TCP keep-alive on a socket of the Dialer's own
	// at the dial: two system calls more for each connection. Without it
	// a connection used once (a proxy that closes each after its answer)
	// costs two calls less, and the caller sets it with KeepAlive when it
	// uses a connection again.
	KeepAliveAtDial bool
}

// Dial connects to addr on network ("tcp", "tcp4" or "tcp6"). An addr that
// is an IP and a port is dialled with the socket's own system calls on
// Linux; any other, and any on other systems, by net.Dialer. The dial ends
// when ctx does, with ctx's error (the wait for the connect is cut by
// connwatch: a Watcher in ctx watches it without allocating); ctx's
// deadline is not looked at, so that no timer is set for it: a caller that
// wants one ends ctx when it passes. Errors are net's: a *net.OpError
// "dial", with the connect's errno as an *os.SyscallError.
func (d *Dialer) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		c, done, err := dialSocket(ctx, network, ap)
		if done {
			if err == nil && d.KeepAliveAtDial {
				keepAliveSock(c, d.KeepAliveConfig)
			}
			return c, err
		}
	}
	nd := net.Dialer{KeepAliveConfig: d.KeepAliveConfig}
	return nd.DialContext(withoutDeadline{ctx}, network, addr)
}

// KeepAlive sets TCP keep-alive on c, once, when c is a socket of the
// Dialer's own that has none: the caller is using it again, and it may
// stay quiet longer than the first probe. net's connections have
// keep-alive from their dialer; for them, KeepAlive does nothing.
func (d *Dialer) KeepAlive(c net.Conn) { keepAliveSock(c, d.KeepAliveConfig) }

// withoutDeadline is a context with its parent's cancellation and values
// but no deadline. The caller ends the context when its deadline passes
// (the engine's tracker does); with a deadline on the context as well,
// net's connect set it on the socket and took it off again, a timer added
// and removed for every dial.
type withoutDeadline struct{ context.Context }

func (withoutDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// watch has c cut when ctx ends (see connwatch.Start).
func watch(ctx context.Context, c net.Conn) connwatch.Unwatcher { return connwatch.Start(ctx, c) }
