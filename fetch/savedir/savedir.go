// Package savedir keeps the bodies of a run in --save-dir, its one job:
// the directory made ready (Prepare), the name each URL's body is saved
// under (Name), and the writer of a body's file, whose errors are the
// directory's (Writer). A body is written to a file whose name starts
// with Partial, renamed to its Name once whole: the engine does that.
package savedir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fetch-dev/fetch/fetch/errkind"
	"github.com/fetch-dev/fetch/fetch/input"
)

// Partial starts the name of a body being written to --save-dir. It is
// renamed to its saved name when whole; one left by a run that was killed
// is never taken for a body (saved names never start with a dot) and is
// removed by the next run's Prepare.
const Partial = ".fetch-partial-"

// Prepare makes dir (and its parents) if missing, checks that a file
// can be written in it, and removes the partial bodies that killed runs
// left there: those not written to for longer than timeout, the longest an
// attempt of a run with that --timeout can live.
func Prepare(dir string, timeout time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	probe, err := os.CreateTemp(dir, Partial+"probe-*")
	if err != nil {
		return fmt.Errorf("cannot write in %s: %w", dir, errors.Unwrap(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	old, err := filepath.Glob(filepath.Join(dir, Partial+"*"))
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

// Name is the file name for a URL's body: its host and path made safe
// (letters, digits, dot, dash and underscore only, never a path separator or
// a name starting with a dot) and cut short, then a hash of the input, line
// and URL so that different lines never share a file.
func Name(j *input.Line) string {
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

// Writer returns a writer to f that marks its write errors as
// *errkind.SaveError, so that they are not taken for the network's.
func Writer(f *os.File) io.Writer { return saveWriter{f} }

// saveWriter is Writer's.
type saveWriter struct{ f *os.File }

func (w saveWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		err = &errkind.SaveError{Err: err}
	}
	return n, err
}
