//go:build !unix

package h1

import (
	"errors"
	"net"
)

// errWouldBlock is peek's answer for a connection with nothing to read.
var errWouldBlock = errors.New("would block")

// sock cannot look at a socket without reading it here: every idle
// connection is taken to be quiet, and a closed one is found out by the
// request sent on it (see Client.RoundTrip). Requests are written and answers
// read as on any net.Conn.
type sock struct{}

func (s *sock) init(net.Conn)         {}
func (s *sock) peek() ([]byte, error) { return nil, errWouldBlock }
func (s *sock) canSend() bool         { return false }

func (s *sock) read(net.Conn, []byte) (int, error) { panic("h1: read without a socket") }

func (s *sock) sendThenRead(net.Conn, []byte, []byte, owing) (int, []byte, error, error) {
	panic("h1: sendThenRead without a socket")
}
