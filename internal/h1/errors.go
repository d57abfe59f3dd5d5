package h1

import (
	"errors"
	"fmt"
)

// HeadersTooLargeError is the error of an answer whose headers, 1xx
// answers included, pass the client's limit (Options.MaxHeader). Its
// message is net/http's for the same failure, word for word (net/http
// gives its own no type); find it with errors.As.
type HeadersTooLargeError struct {
	Limit int64 // Options.MaxHeader
}

func (e *HeadersTooLargeError) Error() string {
	return fmt.Sprintf("net/http: server response headers exceeded %d bytes; aborted", e.Limit)
}

// readError is err, met reading a response's headers on pc, as net/http
// words it. A read cut at the header limit may show as another error (a
// header line cut short), so the limit is read, as net/http does.
func (t *Client) readError(pc *conn, err error) error {
	if pc.limit <= 0 || errors.Is(err, errHeaderLimit) {
		return &HeadersTooLargeError{Limit: t.maxHeader}
	}
	return fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", err)
}
