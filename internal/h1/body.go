package h1

import (
	"context"
	"io"
	"net/http"

	"github.com/fetch-dev/fetch/internal/connwatch"
)

// body is a response body of a Client: it gives its connection back, to
// be kept or closed, when it is read to the end or closed. Read and Close
// are not for use at once from two goroutines (the engine reads and
// closes a body in its attempt's): a connection's buffers serve another
// once it is given back.
type body struct {
	t     *Client
	pc    *conn
	ctx   context.Context
	r     io.ReadCloser       // http.ReadResponse's body
	watch connwatch.Unwatcher // cuts the connection when the context ends
	keep  bool                // the connection may serve another request
	done  bool                // the connection is given back
	err   error               // what Read returns once done: io.EOF, its error, or ErrBodyReadAfterClose
}

func (b *body) Read(p []byte) (int, error) {
	if b.done {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	switch {
	case err == io.EOF:
		b.finish(b.keep)
	case err != nil:
		if b.ctx.Err() != nil {
			err = b.ctx.Err()
		}
		b.finish(false)
	}
	b.err = err
	return n, err
}

// Close closes the connection under a body not read to the end, as
// net/http does: what is left of it may be long, or never come.
func (b *body) Close() error {
	if !b.done {
		b.finish(b.keep && b.r == http.NoBody) // a body of none is read to its end
		b.err = http.ErrBodyReadAfterClose
	}
	return nil
}

func (b *body) finish(keep bool) {
	b.done = true
	// unwatch is false when the context was done first: its deadline is
	// on the connection, which is closed then.
	if b.watch.Unwatch(b.pc.c) && keep {
		n := b.pc.br.Buffered()
		if n == 0 {
			b.t.put(b.pc)
			return
		}
		start, _ := b.pc.br.Peek(min(n, 16))
		b.t.unsolicited(start, b.pc.key)
	}
	b.t.close(b.pc)
}
