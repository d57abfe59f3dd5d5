// Package connwatch cuts a connection's waits short when a context ends:
// what context.AfterFunc(ctx, func() { c.SetDeadline(past) }) does, but
// without allocating for a caller that watches one connection after
// another, as the engine's tracker does for every exchange and dial of its
// attempts. The HTTP/1.1 client (internal/h1) and the dialer
// (internal/dialer) watch their connections with Start; a caller that can
// watch them more cheaply puts its Watcher in the context with With.
package connwatch

import (
	"context"
	"net"
	"time"
)

// A Watcher cuts the connection it watches, by setting its deadline in the
// past (see Cut), once the context it was put in (With) ends. Its methods
// are called from the goroutine that dials or exchanges on the connection.
type Watcher interface {
	// Watch has c's reads and writes cut short once the context ends (at
	// once when it has ended), until Unwatch. It returns false, and
	// watches nothing, when it cannot watch c: Start then falls back to
	// context.AfterFunc.
	Watch(c net.Conn) bool
	Unwatcher
}

// An Unwatcher ends a watch (see Start).
type Unwatcher interface {
	// Unwatch ends the watch of c and reports whether c was left alone:
	// false when it was cut, and so has its deadline in the past, or
	// when it was not the connection watched (whether it was cut cannot
	// be told then: the caller closes it rather than keep it).
	Unwatch(c net.Conn) bool
}

type watcherKey struct{}

// With returns a copy of ctx that carries w: Start, given a context made
// from it, has w watch the connection.
func With(ctx context.Context, w Watcher) context.Context {
	return context.WithValue(ctx, watcherKey{}, w)
}

// Start has c cut when ctx ends, until the Unwatcher it returns is told
// to stop: by ctx's Watcher (see With) when it has one that watches c,
// otherwise by context.AfterFunc.
func Start(ctx context.Context, c net.Conn) Unwatcher {
	if w, ok := ctx.Value(watcherKey{}).(Watcher); ok && w.Watch(c) {
		return w
	}
	return afterFunc(context.AfterFunc(ctx, func() { Cut(c) }))
}

// afterFunc is a watch by context.AfterFunc: its stop function.
type afterFunc func() bool

func (f afterFunc) Unwatch(net.Conn) bool { return f() }

// aLongTimeAgo is a deadline in the past: it ends the waits of a
// connection at once.
var aLongTimeAgo = time.Unix(1, 0)

// Cut sets c's deadline in the past: its reads and writes, and the waits
// of its RawConn, end at once, with os.ErrDeadlineExceeded.
func Cut(c net.Conn) { c.SetDeadline(aLongTimeAgo) }
