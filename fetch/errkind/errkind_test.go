package errkind

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/h1"
	"github.com/fetch-dev/fetch/limits"
)

// TestStdError: net/http's errors that have no type are typed by their
// text, once, where net/http is called; Classify and the proxy's outcome
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
		{"a target's text", &RedirectError{Msg: `bad Location "server response headers exceeded"`}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err
			switch err.(type) {
			case *h1.HeadersTooLargeError, *RedirectError: // not net/http's
			default:
				err = Std(err)
			}
			if err.Error() != tc.err.Error() || !errors.Is(err, tc.err) {
				t.Fatalf("%q, want %q, wrapped", err, tc.err)
			}
			if got := HeadersTooLarge(err); got != tc.tooLarge {
				t.Errorf("HeadersTooLarge %v, want %v", got, tc.tooLarge)
			}
			if got := Classify(err, results.PhaseHeaders, nil, nil) == results.KindTooLarge; got != tc.tooLarge {
				t.Errorf("kind too_large %v, want %v", got, tc.tooLarge)
			}
			if got := CredentialsRejected(err); got != tc.rejected {
				t.Errorf("CredentialsRejected %v, want %v", got, tc.rejected)
			}
			if got := TargetSide(err); got != tc.targetSide {
				t.Errorf("TargetSide %v, want %v", got, tc.targetSide)
			}
		})
	}
}

// TestClassify: the kind of each class of failure, the cause of a
// cancellation first.
func TestClassify(t *testing.T) {
	reset := fmt.Errorf("read: %w", syscall.ECONNRESET)
	for _, tc := range []struct {
		name          string
		err           error
		phase         string
		ctxErr, cause error
		want          string
	}{
		{"a lost lease", context.Canceled, results.PhaseBody, context.Canceled, ErrLeaseLost, results.KindCoordinator},
		{"the coordinator", fmt.Errorf("wait: %w", limits.ErrCoordinator), results.PhaseQueue, nil, nil, results.KindCoordinator},
		{"a phase timer", context.Canceled, results.PhaseConnect, context.Canceled,
			&PhaseTimeout{Phase: results.PhaseConnect, Limit: time.Second, Flag: "--connect-timeout"}, results.KindTimeout},
		{"the URL's deadline", context.DeadlineExceeded, results.PhaseBody, context.DeadlineExceeded, nil, results.KindDeadline},
		{"the run ended it", context.Canceled, results.PhaseBody, context.Canceled, nil, results.KindCancelled},
		{"saving", &SaveError{Err: errors.New("disk full")}, results.PhaseBody, nil, nil, results.KindOther},
		{"--max-body", fmt.Errorf("%w: more than 10 bytes", ErrTooLarge), results.PhaseBody, nil, nil, results.KindTooLarge},
		{"a redirect", &RedirectError{Msg: "stopped after 1 redirects"}, results.PhaseHeaders, nil, nil, results.KindRedirect},
		{"a CONNECT refused", &ProxyStatusError{Code: 403, Status: "403 Forbidden"}, results.PhaseProxy, nil, nil, results.KindProxy},
		{"the proxy's TLS", &ProxyTLSError{Err: errors.New("tls: bad certificate")}, results.PhaseProxy, nil, nil, results.KindTLS},
		{"dns", &net.DNSError{Err: "no such host", Name: "x.invalid"}, results.PhaseDNS, nil, nil, results.KindDNS},
		{"refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), results.PhaseConnect, nil, nil, results.KindRefused},
		{"a reset", reset, results.PhaseHeaders, nil, nil, results.KindReset},
		{"a reset in the handshake", reset, results.PhaseTLS, nil, nil, results.KindTLS},
		{"a reset by the proxy", reset, results.PhaseProxy, nil, nil, results.KindProxy},
		{"anything else", errors.New("malformed MIME header"), results.PhaseHeaders, nil, nil, results.KindOther},
	} {
		if got := Classify(tc.err, tc.phase, tc.ctxErr, tc.cause); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
