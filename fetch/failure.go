package fetch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/results"
)

// failure is the error of an attempt that failed with err in phase: its
// kind and message. ctx is the attempt's context and tr its tracker, which
// knows why it cancelled the attempt, if it did (see errkind.Classify).
//
// The context's Err is read before the tracker's cause, and only once. The
// tracker sets the cause, then cancels the context; a phase timer may fire
// just after err came back (the dialer's own connect timeout and the
// tracker's connect timer run out together), and a cause read first could
// then be nil while the context read after it is cancelled: a connect
// timeout recorded as cancelled ("interrupted").
func (e *Engine) failure(err error, phase string, ctx context.Context, tr *tracker) *results.Error {
	ctxErr := ctx.Err()
	cause := tr.cause()
	kind := errkind.Classify(err, phase, ctxErr, cause)
	if kind == results.KindTooLarge && errkind.HeadersTooLarge(err) {
		phase = results.PhaseHeaders // net/http may see the limit pass before the request is written
	}
	return e.newError(phase, kind, e.message(kind, err, cause))
}

// newError makes an Error for a record. Every Error of an attempt is made
// here, and its message made fit to write out: credentials removed, then
// bounded (see boundMessage), since it may quote whatever a server sent.
func (e *Engine) newError(phase, kind, msg string) *results.Error {
	return &results.Error{Phase: phase, Kind: kind, Message: e.redactMessage(msg)}
}

// redactWindow is how much of a long message is redacted before it is
// bounded: a message is cut to maxMessage bytes anyway, and redacting all
// of a message of megabytes would cost time for nothing.
const redactWindow = 16 << 10

// redactMessage removes credentials from msg, then bounds it. A message cut
// to redactWindow first is redacted whole when redacting the window leaves
// too little of it: then a credential cut by the window could show.
func (e *Engine) redactMessage(msg string) string {
	if len(msg) > redactWindow {
		if r := e.redactor.String(msg[:redactWindow]); len(r) > maxMessage {
			return boundMessage(r)
		}
	}
	return boundMessage(e.redactor.String(msg))
}

// message is the error text for a record of kind: the cause of a timeout,
// a deadline or a lost lease where there is one, else err's.
func (e *Engine) message(kind string, err, cause error) string {
	var pt *errkind.PhaseTimeout
	switch {
	case errors.Is(cause, errkind.ErrLeaseLost):
		return errkind.ErrLeaseLost.Error()
	case errors.As(cause, &pt):
		return pt.Error()
	case kind == results.KindDeadline:
		return fmt.Sprintf("total deadline of %s (-t) exceeded", e.cfg.Timeout)
	case kind == results.KindCancelled:
		return "interrupted"
	case errkind.HeadersTooLarge(err):
		return fmt.Sprintf("response headers larger than --max-header (%s)", formatSize(e.cfg.maxHeader()))
	}
	// A coordinator's error names its address, never a password.
	return err.Error()
}

// maxMessage is the most bytes of a record's error message; cutMark ends
// one that was cut to fit.
const (
	maxMessage = 200
	cutMark    = "…(cut)"
)

// boundMessage returns s fit for a record whatever a server put into it:
// valid UTF-8 (each invalid byte replaced by U+FFFD) of at most maxMessage
// bytes. A longer s is cut on a rune boundary and ends with cutMark. Only
// the start of s is read.
func boundMessage(s string) string {
	if len(s) <= maxMessage && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(maxMessage + utf8.UTFMax)
	// fits is the length of b at the last rune that leaves room for
	// cutMark. An invalid byte comes as utf8.RuneError, written as U+FFFD.
	fits := 0
	for _, r := range s {
		b.WriteRune(r)
		if b.Len() > maxMessage {
			return b.String()[:fits] + cutMark
		}
		if b.Len() <= maxMessage-len(cutMark) {
			fits = b.Len()
		}
	}
	return b.String()
}

// formatSize writes n bytes as the flags take it: "100KiB", "64MiB", or
// plain bytes when no unit divides it.
func formatSize(n int64) string {
	for _, u := range []struct {
		size int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
