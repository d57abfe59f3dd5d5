package cmd

import (
	"bytes"
	"io"
	"os"

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
