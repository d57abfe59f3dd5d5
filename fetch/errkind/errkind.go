// Package errkind names the kind of an attempt's failure (a results.Kind*),
// its one job: from the error the attempt's round trip or body gave, where
// the attempt was, and why its context was cancelled (Classify). It has
// the error types that the engine makes so that Classify can tell them
// apart, types the errors net/http gives no type (Std), and tells which
// of a proxy's refusals are of its credentials and which of the target
// (CredentialsRejected, TargetSide).
package errkind

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/fetch-dev/fetch/fetch/proxystatus"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/h1"
	"github.com/fetch-dev/fetch/limits"
)

// ErrLeaseLost is the cause when a shared scheduler loses an attempt's
// lease (it could not be renewed): the attempt stops at once, since its
// permit may be given to another process.
var ErrLeaseLost = errors.New("lease lost: the coordinator could not renew it in time")

// ErrTooLarge is the cause when a body passes --max-body.
var ErrTooLarge = errors.New("body larger than --max-body")

// Classify names the kind of an attempt's failure. phase is where the
// attempt was when it failed; ctxErr is the attempt's context's Err, and
// cause is why the attempt's tracker cancelled it (the URL's deadline, a
// per-phase timer, a lost lease), or nil, read after ctxErr (see the
// engine's failure).
func Classify(err error, phase string, ctxErr, cause error) string {
	if errors.Is(cause, ErrLeaseLost) || errors.Is(err, limits.ErrCoordinator) {
		// The coordinator could not be reached: waiting for a lease ran
		// out of time, or a lease was lost and its attempt stopped.
		return results.KindCoordinator
	}
	var pt *PhaseTimeout
	if errors.As(cause, &pt) {
		return results.KindTimeout
	}
	if errors.Is(cause, context.DeadlineExceeded) || errors.Is(ctxErr, context.DeadlineExceeded) {
		return results.KindDeadline
	}
	if ctxErr != nil {
		return results.KindCancelled // the run ended it: an interrupt, a failed write
	}
	var (
		pse  *ProxyStatusError
		ptls *ProxyTLSError
		re   *RedirectError
		dnse *net.DNSError
		cve  *tls.CertificateVerificationError
		ue   x509.UnknownAuthorityError
		he   x509.HostnameError
		cie  x509.CertificateInvalidError
		rhe  tls.RecordHeaderError
		ae   tls.AlertError
	)
	var se *SaveError
	switch {
	case errors.As(err, &se):
		return results.KindOther
	case errors.Is(err, ErrTooLarge), HeadersTooLarge(err):
		return results.KindTooLarge
	case errors.As(err, &re):
		return results.KindRedirect
	case errors.As(err, &pse):
		return results.KindProxy
	case errors.As(err, &ptls):
		if errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
			return results.KindTimeout // the handshake's deadline, not a TLS failure
		}
		return results.KindTLS
	case errors.As(err, &dnse):
		return results.KindDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return results.KindRefused
	case errors.As(err, &cve), errors.As(err, &ue), errors.As(err, &he), errors.As(err, &cie),
		errors.As(err, &rhe), errors.As(err, &ae):
		return results.KindTLS
	case errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		// A deadline on the connection (the dialer's handshake bound), the
		// dialer's own --connect-timeout, or the transport's TLS handshake
		// timeout, when one of them fires just before the phase timer.
		return results.KindTimeout
	case phase == results.PhaseTLS && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		return results.KindTLS
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		if phase == results.PhaseProxy {
			return results.KindProxy
		}
		return results.KindReset
	case phase == results.PhaseProxy:
		return results.KindProxy
	case strings.Contains(err.Error(), "tls:"):
		return results.KindTLS
	}
	return results.KindOther
}

// HeadersTooLarge reports whether err is an answer's headers over the
// limit: h1's error, or net/http's (typed by Std).
func HeadersTooLarge(err error) bool {
	var he *h1.HeadersTooLargeError
	var se *stdHeadersTooLargeError
	return errors.As(err, &he) || errors.As(err, &se)
}

// isTimeout reports whether err says it is a timeout, as the dialer's and
// the TLS handshake's do.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// CredentialsRejected reports whether err is a proxy refusing its
// credentials: a CONNECT answered 407 (or 401, which some proxies send), or
// a SOCKS5 proxy failing the user/password authentication (or accepting no
// method fetch offered: it wants credentials that were not given). A 407
// to a plain request is seen by the caller, as a response.
func CredentialsRejected(err error) bool {
	var pse *ProxyStatusError
	if errors.As(err, &pse) {
		return pse.Code == http.StatusProxyAuthRequired || pse.Code == http.StatusUnauthorized
	}
	var se *socksError
	return errors.As(err, &se) && se.rejected
}

// TargetSide reports whether err is a proxy saying that it could not reach
// the target: a CONNECT answered 5xx (502 Bad Gateway, 504), or a SOCKS
// reply that the target's host or network is unreachable or refused. That
// is news about the target, and must not bench a proxy that did its job.
func TargetSide(err error) bool {
	var pse *ProxyStatusError
	if errors.As(err, &pse) {
		return pse.Code >= 500
	}
	var se *socksError
	return errors.As(err, &se) && se.targetSide
}

// PhaseTimeout is the cancellation cause when a per-phase limit runs out.
type PhaseTimeout struct {
	Phase string        // a results.Phase*
	Limit time.Duration // the limit that ran out
	Flag  string        // the flag that set the limit
}

func (e *PhaseTimeout) Error() string {
	return fmt.Sprintf("no progress in %s for %s (%s)", e.Phase, e.Limit, e.Flag)
}

// ProxyStatusError is a proxy's refusal of a CONNECT, and what it says
// of it (see proxystatus.Read).
type ProxyStatusError struct {
	Code   int              // the answer's status code
	Status string           // and its status line: "502 Bad Gateway"
	Says   proxystatus.Says // what its headers say
}

func (e *ProxyStatusError) Error() string { return "proxy refused CONNECT: " + e.Status }

// ProxyTLSError is a failed TLS handshake with an https proxy.
type ProxyTLSError struct{ Err error }

func (e *ProxyTLSError) Error() string { return "tls handshake with proxy: " + e.Err.Error() }
func (e *ProxyTLSError) Unwrap() error { return e.Err }

// RedirectError is the cause when --max-redirects is exceeded or a redirect
// leads to a scheme other than http or https.
type RedirectError struct{ Msg string }

func (e *RedirectError) Error() string { return e.Msg }

// SaveError is a failure to write a body to --save-dir: a local problem
// (directory gone, disk full) that another attempt would not mend.
type SaveError struct{ Err error }

func (e *SaveError) Error() string { return "saving body: " + e.Err.Error() }
func (e *SaveError) Unwrap() error { return e.Err }

// Std types the errors of net/http's transport that the engine tells
// apart but that net/http gives no type: response headers over its
// MaxResponseHeaderBytes, and the refusals of its SOCKS client. Their text
// is read here, once per failed round trip and nowhere else, so that
// Classify finds them with errors.As, as it finds h1's (whose errors are
// typed). Any other error is returned as it is. The typed error keeps
// err's message and wraps it.
func Std(err error) error {
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
// pass its transport's MaxResponseHeaderBytes (see Std); h1's is
// h1.HeadersTooLargeError.
type stdHeadersTooLargeError struct{ err error }

func (e *stdHeadersTooLargeError) Error() string { return e.err.Error() }
func (e *stdHeadersTooLargeError) Unwrap() error { return e.err }

// socksError is a SOCKS5 proxy's refusal, as net/http's SOCKS client
// words it (see Std): of the credentials it was given, or of any
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
// SOCKS refusal that Classify tells apart; nil otherwise.
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
