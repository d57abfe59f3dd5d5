//go:build !unix

package fetchtest

import (
	"errors"
	"io"
	"net"
)

func setBacklog(*net.TCPListener, int) error {
	return errors.New("fetchtest: cannot change a listen backlog here")
}

// reservePort finds a free port: nothing listens there, but another
// program could take it.
func reservePort() (string, io.Closer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr, io.NopCloser(nil), nil
}
