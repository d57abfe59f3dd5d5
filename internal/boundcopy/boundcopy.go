// Package boundcopy copies a body within a bound, its one job: at most so
// many bytes of a reader (Copy), or the first bytes of what is written
// (Head).
package boundcopy

import (
	"errors"
	"io"
)

// Copy copies src to dst through buf, as io.CopyBuffer does, but
// stops after max bytes when max >= 0. It makes no wrapper per call (such
// as io.LimitReader), and never hands src to dst's ReadFrom.
func Copy(dst io.Writer, src io.Reader, buf []byte, max int64) (int64, error) {
	var n int64
	for max < 0 || n < max {
		b := buf
		if max >= 0 && int64(len(b)) > max-n {
			b = b[:max-n]
		}
		nr, rerr := src.Read(b)
		if nr > 0 {
			nw, werr := dst.Write(b[:nr])
			if nw < 0 || nr < nw {
				nw = 0
				if werr == nil {
					werr = errors.New("fetch: invalid write result")
				}
			}
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			if nw != nr {
				return n, io.ErrShortWrite
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
	return n, nil
}

// Head is a writer that keeps the first Max bytes written to it, in B,
// and takes the rest without keeping it.
type Head struct {
	Max int64
	B   []byte
}

func (h *Head) Write(p []byte) (int, error) {
	if room := h.Max - int64(len(h.B)); room > 0 {
		h.B = append(h.B, p[:min(room, int64(len(p)))]...)
	}
	return len(p), nil
}
