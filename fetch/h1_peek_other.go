//go:build !unix

package fetch

import (
	"errors"
	"net"
)

// errWouldBlock is peek's answer for a connection with nothing to read.
var errWouldBlock = errors.New("would block")

// peeker cannot look at a socket without reading it here: every idle
// connection is taken to be quiet, and a closed one is found out by the
// request sent on it (see h1.roundTrip).
type peeker struct{}

func (p *peeker) init(net.Conn)         {}
func (p *peeker) peek() ([]byte, error) { return nil, errWouldBlock }
