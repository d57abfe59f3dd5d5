package fetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/input"
)

// copyBufferSize is the size of a body's copy buffer, io.Copy's own.
const copyBufferSize = 32 << 10

// buffers is a bounded free list of copy buffers. A sync.Pool would not
// do: the garbage collector empties one at every cycle, and a fast run,
// whose live heap is small, collects every few hundred URLs, so each copy
// allocated its 32 KiB anew (a fifth of all the bytes a run allocated). It
// keeps at most cap(free) buffers; more may be in use at once.
type buffers struct{ free chan *[]byte }

func newBuffers(n int) *buffers { return &buffers{free: make(chan *[]byte, n)} }

func (b *buffers) get() *[]byte {
	select {
	case p := <-b.free:
		return p
	default:
		p := make([]byte, copyBufferSize)
		return &p
	}
}

func (b *buffers) put(p *[]byte) {
	select {
	case b.free <- p:
	default: // enough are kept
	}
}

// readBody reads the whole body, within --max-body, into the save file when
// --save-dir is set and to nowhere otherwise. It returns the bytes read,
// the file written, and the start of the body with Config.KeepBody. With
// --record-hash, and the body read whole, sum is set to the hex SHA-256 of
// its bytes, hashed as they are read.
func (e *Engine) readBody(j *input.Line, resp *http.Response, body io.Reader, sum *string) (int64, string, []byte, error) {
	var head *headWriter
	var also io.Writer // what gets a copy of the bytes read
	if e.cfg.KeepBody > 0 {
		head = &headWriter{max: e.cfg.KeepBody}
		also = head
	}
	var h hash.Hash
	if e.cfg.RecordHash {
		h = sha256.New()
		if also == nil {
			also = h
		} else {
			also = io.MultiWriter(head, h)
		}
	}
	n, file, err := e.copyBody(j, resp, body, also)
	if h != nil && err == nil {
		*sum = hex.EncodeToString(h.Sum(nil))
	}
	if head == nil {
		return n, file, nil, err
	}
	return n, file, head.b, err
}

// headWriter keeps the first max bytes written to it.
type headWriter struct {
	max int64
	b   []byte
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - int64(len(h.b)); room > 0 {
		h.b = append(h.b, p[:min(room, int64(len(p)))]...)
	}
	return len(p), nil
}

// copyBody copies body within --max-body: into a file of --save-dir when
// it is set, and to also when it is not nil. Saving is a function of its own
// so that each has few enough returns for its defers to be open-coded.
func (e *Engine) copyBody(j *input.Line, resp *http.Response, body io.Reader, also io.Writer) (int64, string, error) {
	if e.cfg.tooLarge(resp.ContentLength) {
		return 0, "", fmt.Errorf("%w: Content-Length %d > %d", errkind.ErrTooLarge, resp.ContentLength, e.cfg.MaxBody)
	}
	bp := e.buffers.get()
	defer e.buffers.put(bp)
	if e.cfg.SaveDir != "" {
		return e.saveBody(j, body, also, *bp)
	}
	var dst io.Writer = io.Discard
	if also != nil {
		dst = also
	}
	n, err := e.copyLimited(dst, body, *bp)
	return n, "", err
}

// saveBody copies body into a temporary file of --save-dir through buf
// (and to also when it is not nil), and renames the file to the URL's save
// name once all of it is there; on any failure the file is removed.
func (e *Engine) saveBody(j *input.Line, body io.Reader, also io.Writer, buf []byte) (int64, string, error) {
	tmp, err := os.CreateTemp(e.cfg.SaveDir, partialPrefix+"*")
	if err != nil {
		return 0, "", &errkind.SaveError{Err: err}
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	var dst io.Writer = saveWriter{tmp}
	if also != nil {
		dst = io.MultiWriter(dst, also)
	}
	n, err := e.copyLimited(dst, body, buf)
	if err != nil {
		return n, "", err
	}
	name := filepath.Join(e.cfg.SaveDir, saveName(j))
	if err := tmp.Close(); err != nil {
		return n, "", &errkind.SaveError{Err: err}
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return n, "", &errkind.SaveError{Err: err}
	}
	tmp = nil
	return n, name, nil
}

// copyLimited copies body to dst through buf, failing with errkind.ErrTooLarge
// past --max-body.
func (e *Engine) copyLimited(dst io.Writer, body io.Reader, buf []byte) (int64, error) {
	limit := e.cfg.MaxBody
	read := int64(-1) // all of it
	if limit > 0 {
		read = limit + 1
	}
	n, err := copyAtMost(dst, body, buf, read)
	if err != nil {
		return n, err
	}
	if limit > 0 && n > limit {
		return n, fmt.Errorf("%w: more than %d bytes", errkind.ErrTooLarge, limit)
	}
	return n, nil
}

// copyAtMost copies src to dst through buf, as io.CopyBuffer does, but
// stops after max bytes when max >= 0. It makes no wrapper per call (such
// as io.LimitReader), and never hands src to dst's ReadFrom.
func copyAtMost(dst io.Writer, src io.Reader, buf []byte, max int64) (int64, error) {
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

// partialPrefix starts the name of a body being written to --save-dir. It is
// renamed to its saved name when whole; one left by a run that was killed
// is never taken for a body (saved names never start with a dot) and is
// removed by the next run's PrepareSaveDir.
const partialPrefix = ".fetch-partial-"

// PrepareSaveDir makes dir (and its parents) if missing, checks that a file
// can be written in it, and removes the partial bodies that killed runs
// left there: those not written to for longer than timeout, the longest an
// attempt of a run with that --timeout can live.
func PrepareSaveDir(dir string, timeout time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	probe, err := os.CreateTemp(dir, partialPrefix+"probe-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, errors.Unwrap(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	old, err := filepath.Glob(filepath.Join(dir, partialPrefix+"*"))
	if err != nil {
		return err
	}
	for _, name := range old {
		if fi, err := os.Lstat(name); err == nil && fi.Mode().IsRegular() && time.Since(fi.ModTime()) > timeout {
			os.Remove(name)
		}
	}
	return nil
}

// saveWriter marks write errors as errkind.SaveErrors, so they are not taken for
// the network's.
type saveWriter struct{ f *os.File }

func (w saveWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = &errkind.SaveError{Err: err}
	}
	return n, err
}

// saveName is the file name for a URL's body: its host and path made safe
// (letters, digits, dot, dash and underscore only, never a path separator or
// a name starting with a dot) and cut short, then a hash of the input, line
// and URL so that different lines never share a file.
func saveName(j *input.Line) string {
	var b strings.Builder
	for _, r := range j.URL.Host + j.URL.EscapedPath() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 100 {
			break
		}
	}
	base := strings.TrimLeft(b.String(), ".")
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d\x00%s", j.Input, j.Number, j.URL.String())))
	return base + "-" + hex.EncodeToString(sum[:6])
}
