package fetch

import (
	"context"
	"errors"
	"fmt"
	"net/url"
)

// failure is the error of an attempt that failed with err in phase: its
// kind and message. attemptCtx is the attempt's context and jobCtx the
// URL's, whose causes say whether a timer or the deadline ended it.
func (e *Engine) failure(err error, phase string, attemptCtx, jobCtx context.Context) *Error {
	return e.newError(phase, classify(err, phase, attemptCtx, jobCtx), e.message(err, attemptCtx, jobCtx))
}

// newError makes an Error for a record, its message made fit to write out:
// every Error of an attempt is made here.
func (e *Engine) newError(phase, kind, msg string) *Error {
	return &Error{Phase: phase, Kind: kind, Message: e.redactor.String(msg)}
}

// message is the error text for a record: the cause of a timeout or
// deadline where there is one.
func (e *Engine) message(err error, attemptCtx, jobCtx context.Context) string {
	if c := context.Cause(attemptCtx); c != nil && !errors.Is(c, context.Canceled) {
		var pt *phaseTimeout
		if errors.As(c, &pt) {
			return pt.Error()
		}
	}
	if jobCtx.Err() != nil {
		if errors.Is(context.Cause(jobCtx), context.DeadlineExceeded) {
			return fmt.Sprintf("total deadline of %s (-t) exceeded", e.cfg.Timeout)
		}
		return "interrupted"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
