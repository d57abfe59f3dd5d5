package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/h1"
	"github.com/fetch-dev/fetch/limits"
)

// errLeaseLost is the cause when a shared scheduler loses an attempt's
// lease (it could not be renewed): the attempt stops at once, since its
// permit may be given to another process.
var errLeaseLost = errors.New("lease lost: the coordinator could not renew it in time")

// errTooLarge is the cause when a body passes --max-body.
var errTooLarge = errors.New("body larger than --max-body")

// classify names the kind of an attempt's failure. phase is where the
// attempt was when it failed; ctxErr is the attempt's context's Err, and
// cause is why the attempt's tracker cancelled it (the URL's deadline, a
// per-phase timer, a lost lease), or nil, read after ctxErr (see failure).
func classify(err error, phase string, ctxErr, cause error) string {
	if errors.Is(cause, errLeaseLost) || errors.Is(err, limits.ErrCoordinator) {
		// The coordinator could not be reached: waiting for a lease ran
		// out of time, or a lease was lost and its attempt stopped.
		return results.KindCoordinator
	}
	var pt *phaseTimeout
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
		pse  *proxyStatusError
		ptls *proxyTLSError
		re   *redirectError
		dnse *net.DNSError
		cve  *tls.CertificateVerificationError
		ue   x509.UnknownAuthorityError
		he   x509.HostnameError
		cie  x509.CertificateInvalidError
		rhe  tls.RecordHeaderError
		ae   tls.AlertError
	)
	var se *saveError
	switch {
	case errors.As(err, &se):
		return results.KindOther
	case errors.Is(err, errTooLarge), headersTooLarge(err):
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

// headersTooLarge reports whether err is an answer's headers over the
// limit: h1's error, or net/http's (typed by stdError).
func headersTooLarge(err error) bool {
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

// credentialsRejected reports whether err is a proxy refusing its
// credentials: a CONNECT answered 407 (or 401, which some proxies send), or
// a SOCKS5 proxy failing the user/password authentication (or accepting no
// method fetch offered: it wants credentials that were not given). A 407
// to a plain request is seen by the caller, as a response.
func credentialsRejected(err error) bool {
	var pse *proxyStatusError
	if errors.As(err, &pse) {
		return pse.code == http.StatusProxyAuthRequired || pse.code == http.StatusUnauthorized
	}
	var se *socksError
	return errors.As(err, &se) && se.rejected
}

// targetSide reports whether err is a proxy saying that it could not reach
// the target: a CONNECT answered 5xx (502 Bad Gateway, 504), or a SOCKS
// reply that the target's host or network is unreachable or refused. That
// is news about the target, and must not bench a proxy that did its job.
func targetSide(err error) bool {
	var pse *proxyStatusError
	if errors.As(err, &pse) {
		return pse.code >= 500
	}
	var se *socksError
	return errors.As(err, &se) && se.targetSide
}
