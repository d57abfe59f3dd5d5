package fetch

import "strings"

// stdError types the errors of net/http's transport that the engine tells
// apart but that net/http gives no type: response headers over its
// MaxResponseHeaderBytes, and the refusals of its SOCKS client. Their text
// is read here, once per failed round trip and nowhere else, so that
// classify finds them with errors.As, as it finds h1's (whose errors are
// typed). Any other error is returned as it is. The typed error keeps
// err's message and wraps it.
func stdError(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "server response headers exceeded"):
		return &stdHeadersTooLargeError{err: err}
	case strings.Contains(msg, "socks connect"):
		if se := socksRefusal(err, msg); se != nil {
			return se
		}
	}
	return err
}

// stdHeadersTooLargeError is net/http's error for an answer whose headers
// pass its transport's MaxResponseHeaderBytes (see stdError); h1's is
// h1.HeadersTooLargeError.
type stdHeadersTooLargeError struct{ err error }

func (e *stdHeadersTooLargeError) Error() string { return e.err.Error() }
func (e *stdHeadersTooLargeError) Unwrap() error { return e.err }

// socksError is a SOCKS5 proxy's refusal, as net/http's SOCKS client
// words it (see stdError): of the credentials it was given, or of any
// method fetch offered (it wants credentials that were not given), or of
// the target, which it could not reach.
type socksError struct {
	err        error
	rejected   bool // the proxy refused its credentials, or wants some
	targetSide bool // the proxy could not reach the target
}

func (e *socksError) Error() string { return e.err.Error() }
func (e *socksError) Unwrap() error { return e.err }

// socksRefusal is err, whose text is msg, as a *socksError when it is a
// SOCKS refusal that classify tells apart; nil otherwise.
func socksRefusal(err error, msg string) *socksError {
	if strings.HasSuffix(msg, "username/password authentication failed") || strings.HasSuffix(msg, "no acceptable authentication methods") {
		return &socksError{err: err, rejected: true}
	}
	for _, reply := range []string{"network unreachable", "host unreachable", "connection refused", "TTL expired"} {
		if strings.HasSuffix(msg, "unknown error "+reply) {
			return &socksError{err: err, targetSide: true}
		}
	}
	return nil
}
