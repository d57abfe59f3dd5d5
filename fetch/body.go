package fetch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/savedir"
	"github.com/fetch-dev/fetch/internal/boundcopy"
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
	var head *boundcopy.Head
	var also io.Writer // what gets a copy of the bytes read
	if e.cfg.KeepBody > 0 {
		head = &boundcopy.Head{Max: e.cfg.KeepBody}
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
	return n, file, head.B, err
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
	tmp, err := os.CreateTemp(e.cfg.SaveDir, savedir.Partial+"*")
	if err != nil {
		return 0, "", &errkind.SaveError{Err: err}
	}
	defer func() {
		if tmp != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	dst := savedir.Writer(tmp)
	if also != nil {
		dst = io.MultiWriter(dst, also)
	}
	n, err := e.copyLimited(dst, body, buf)
	if err != nil {
		return n, "", err
	}
	name := filepath.Join(e.cfg.SaveDir, savedir.Name(j))
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
	n, err := boundcopy.Copy(dst, body, buf, read)
	if err != nil {
		return n, err
	}
	if limit > 0 && n > limit {
		return n, fmt.Errorf("%w: more than %d bytes", errkind.ErrTooLarge, limit)
	}
	return n, nil
}

// PrepareSaveDir makes dir ready for a run's bodies (see savedir.Prepare).
func PrepareSaveDir(dir string, timeout time.Duration) error { return savedir.Prepare(dir, timeout) }
