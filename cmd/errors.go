package cmd

import (
	"errors"
	"fmt"
)

// UsageError is a problem with how fetch was invoked: a bad flag value, a
// malformed proxy list, or a file that cannot be read or created. It is
// always found before any request is sent, and it exits with status 2.
type UsageError struct {
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usageErrorf formats a UsageError; %w wraps as in fmt.Errorf.
func usageErrorf(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// usageError marks err as a UsageError; nil stays nil.
func usageError(err error) error {
	if err == nil {
		return nil
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return err
	}
	return &UsageError{Err: err}
}

// ErrNotAllOK is returned by a run in which at least one record is not ok.
// Nothing is printed for it: the records and the summary already say why.
var ErrNotAllOK = errors.New("fetch: at least one record not ok")
