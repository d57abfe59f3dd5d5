package fetch

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/h1"
)

// TestStdError: net/http's errors that have no type are typed by their
// text, once, where net/http is called; classify and the proxy's outcome
// then find them with errors.As, as they find h1's, and their message is
// net/http's, unchanged. The SOCKS errors are worded as net/http's SOCKS
// client words them, in a *net.OpError "socks connect".
func TestStdError(t *testing.T) {
	socks := func(reason string) error {
		return &net.OpError{Op: "socks connect", Net: "tcp", Err: errors.New(reason)}
	}
	for _, tc := range []struct {
		name                 string
		err                  error
		tooLarge             bool
		rejected, targetSide bool
	}{
		{"header limit", errors.New("net/http: server response headers exceeded 1024 bytes; aborted"), true, false, false},
		{"h1's header limit", &h1.HeadersTooLargeError{Limit: 1024}, true, false, false},
		{"socks credentials", socks("username/password authentication failed"), false, true, false},
		{"socks no method", socks("no acceptable authentication methods"), false, true, false},
		{"socks host unreachable", socks("unknown error host unreachable"), false, false, true},
		{"socks refused", socks("unknown error connection refused"), false, false, true},
		{"socks general failure", socks("unknown error general SOCKS server failure"), false, false, false},
		{"reset", fmt.Errorf("read: %w", errors.New("connection reset by peer")), false, false, false},
		// Not net/http's (a redirect's error quotes its Location): not
		// looked at, whatever its text.
		{"a target's text", &redirectError{msg: `bad Location "server response headers exceeded"`}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err
			switch err.(type) {
			case *h1.HeadersTooLargeError, *redirectError: // not net/http's
			default:
				err = stdError(err)
			}
			if err.Error() != tc.err.Error() || !errors.Is(err, tc.err) {
				t.Fatalf("%q, want %q, wrapped", err, tc.err)
			}
			if got := headersTooLarge(err); got != tc.tooLarge {
				t.Errorf("headersTooLarge %v, want %v", got, tc.tooLarge)
			}
			if got := classify(err, results.PhaseHeaders, nil, nil) == results.KindTooLarge; got != tc.tooLarge {
				t.Errorf("kind too_large %v, want %v", got, tc.tooLarge)
			}
			if got := credentialsRejected(err); got != tc.rejected {
				t.Errorf("credentialsRejected %v, want %v", got, tc.rejected)
			}
			if got := targetSide(err); got != tc.targetSide {
				t.Errorf("targetSide %v, want %v", got, tc.targetSide)
			}
		})
	}
}
