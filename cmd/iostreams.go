package cmd

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/term"
)

// IOStreams are the standard streams a command reads and writes. Commands
// never touch os.Stdin, os.Stdout or os.Stderr directly, so tests can hand
// them buffers (see Test).
//
// The zero value has nil streams and is not usable; use System or Test.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer

	stderrTTY         bool
	stderrTTYOverride bool

	stderrOnce   sync.Once
	stderrLocked *lockedWriter
}

// System returns the process's standard streams, with the terminal check
// done on the real standard error.
func System() *IOStreams {
	return &IOStreams{
		In:     os.Stdin,
		Out:    os.Stdout,
		ErrOut: os.Stderr,
	}
}

// Test returns streams backed by buffers: the input, the output and the
// error output. Standard error is not a terminal until SetStderrTTY(true).
func Test() (*IOStreams, *bytes.Buffer, *bytes.Buffer, *bytes.Buffer) {
	in, out, errOut := &bytes.Buffer{}, &bytes.Buffer{}, &bytes.Buffer{}
	return &IOStreams{In: in, Out: out, ErrOut: errOut, stderrTTYOverride: true}, in, out, errOut
}

// SetStderrTTY overrides the terminal check of standard error.
func (s *IOStreams) SetStderrTTY(isTTY bool) {
	s.stderrTTY = isTTY
	s.stderrTTYOverride = true
}

// IsStderrTTY reports whether standard error is a terminal, so that a
// progress bar may be drawn on it.
func (s *IOStreams) IsStderrTTY() bool {
	if s.stderrTTYOverride {
		return s.stderrTTY
	}
	if f, ok := s.ErrOut.(*os.File); ok {
		return term.IsTerminal(int(f.Fd()))
	}
	return false
}

// stderrColumns is the width of the terminal on standard error, or 0
// when it is not a terminal or its width is unknown.
func (s *IOStreams) stderrColumns() int {
	if f, ok := s.ErrOut.(*os.File); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil {
			return w
		}
	}
	return 0
}

// warnings writes warnings to out, one line each, cut short, from any
// goroutine; a quiet one writes nothing.
type warnings struct {
	out   *lockedWriter
	quiet bool
}

func newWarnings(out *lockedWriter, quiet bool) *warnings {
	return &warnings{out: out, quiet: quiet}
}

// stderr is ErrOut behind the one lock that all who write to it while a
// run goes on share: the progress bar, warnings and the messages of
// interrupts. It is made on first use.
func (s *IOStreams) stderr() *lockedWriter {
	s.stderrOnce.Do(func() { s.stderrLocked = &lockedWriter{w: s.ErrOut} })
	return s.stderrLocked
}

// lockedWriter lets one Write at a time through to w, and knows whether a
// progress line is drawn there: a Write while it is erases it first, so
// that what is written starts its own line, and the next draw puts the
// bar back below it.
type lockedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	barUp bool // a progress line is drawn and not erased
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.eraseBar()
	return l.w.Write(p)
}

// drawBar writes line, a progress line that starts at the start of the
// line ("\r") and does not end it.
func (l *lockedWriter) drawBar(line []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.barUp = true
	l.w.Write(line) //nolint:errcheck // a terminal that cannot be drawn on loses only the bar
}

// clearBar erases the progress line, if one is drawn.
func (l *lockedWriter) clearBar() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.eraseBar()
}

// eraseBar erases the progress line, if one is drawn; l.mu is held.
func (l *lockedWriter) eraseBar() {
	if l.barUp {
		l.barUp = false
		io.WriteString(l.w, "\r"+eraseLine) //nolint:errcheck // a broken stream shows in the next write
	}
}

// maxWarning bounds one warning line: what a library logs may quote what a
// server sent.
const maxWarning = 300

// warn writes msg as one warning line.
func (ws *warnings) warn(msg string) {
	if ws.quiet {
		return
	}
	line := strings.ToValidUTF8(strings.TrimRight(msg, "\n"), "?")
	line = strings.ReplaceAll(line, "\n", " ")
	if len(line) > maxWarning {
		cut := maxWarning
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + "..."
	}
	fmt.Fprintf(ws.out, "fetch: warning: %s\n", line)
}

// Write makes warnings an io.Writer for the log package: each write is
// one line.
func (ws *warnings) Write(p []byte) (int, error) {
	ws.warn(string(p))
	return len(p), nil
}

// routeLog sends what Go's own packages log to ws, as warnings (none when
// quiet): net/http's transport logs "Unsolicited response received on idle
// HTTP channel" when a server sends bytes that nobody asked for (a 204 with
// a body) over https; fetch's own client of plain http says so through
// Config.Warn, once. It returns a function that puts the log package's output back.
func routeLog(ws *warnings) (restore func()) {
	w, flags, prefix := log.Writer(), log.Flags(), log.Prefix()
	log.SetOutput(ws)
	log.SetFlags(0)
	log.SetPrefix("")
	return func() {
		log.SetOutput(w)
		log.SetFlags(flags)
		log.SetPrefix(prefix)
	}
}
