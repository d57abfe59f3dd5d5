package h1

import "context"

// Hooks are told what the client learns of an exchange that the
// httptrace hooks do not say: whether, and when, the first read of a GET's
// answer waits for its body too (see conn.owedAnswer). The caller puts
// them in the request's context with WithHooks; their methods are called
// from the goroutine of RoundTrip, during RoundTrip, and must not block.
// The engine's tracker implements them, and moves the attempt into its
// body phase, under its idle timeout, when told.
type Hooks interface {
	// BodyWanted reports whether the caller reads a body of length bytes
	// with status code to its end, rather than deciding on the head alone
	// (the engine does for a ban, or a body over its limit): only then
	// may the read wait for the body.
	BodyWanted(code int, length int64) bool
	// BodyBytes is told when the read begins to wait for the body, and
	// after each read of it that leaves more to wait for.
	BodyBytes()
}

// RemoteHooks are Hooks that are also told the remote address of the
// connection each exchange goes on (the target's, or the proxy's),
// formatted once per connection, before the request is written.
type RemoteHooks interface {
	Hooks
	Remote(addr string)
}

type hooksKey struct{}

// WithHooks returns a copy of ctx that carries h, for the requests made
// with it, or with a context made from it.
func WithHooks(ctx context.Context, h Hooks) context.Context {
	return context.WithValue(ctx, hooksKey{}, h)
}

// hooksOf returns the hooks ctx carries, or nil.
func hooksOf(ctx context.Context) Hooks {
	h, _ := ctx.Value(hooksKey{}).(Hooks)
	return h
}
