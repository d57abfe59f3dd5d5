package cmd

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
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

// warnings writes warnings to errOut, one line each, cut short, from any
// goroutine; a quiet one writes nothing. Whatever else writes to errOut
// while warnings may come (the progress bar) writes through out, so that
// no two writes mix; while the bar is up (barUp), a warning first erases
// its line and the next draw puts it back below the warning.
type warnings struct {
	out   *lockedWriter
	quiet bool
	barUp atomic.Bool
}

func newWarnings(errOut io.Writer, quiet bool) *warnings {
	return &warnings{out: &lockedWriter{w: errOut}, quiet: quiet}
}

// lockedWriter lets one Write at a time through to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
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
	erase := ""
	if ws.barUp.Load() {
		erase = "\r" + eraseLine
	}
	fmt.Fprintf(ws.out, "%sfetch: warning: %s\n", erase, line)
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
