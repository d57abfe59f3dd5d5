// Package redistest starts throw-away redis-server processes for tests.
package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Server is a redis-server listening on a unix socket in a test's
// temporary directory, with no persistence unless started by StartAOF.
type Server struct {
	Sock string // the socket's path
	URL  string // unix://Sock
	t    testing.TB
	cmd  *exec.Cmd
	dir  string
	aof  bool // an append-only file, fsynced at every write: Restart loads it
}

// Start starts a redis-server for t and stops it when t ends. It fails the
// test (never skips it) if redis-server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, false)
}

// StartAOF starts a redis-server as Start does, but persisting every write
// to an append-only file before answering it (appendfsync always): after
// Stop, even a kill -9, Restart brings back all it had answered.
func StartAOF(t testing.TB) *Server {
	t.Helper()
	return start(t, true)
}

func start(t testing.TB, aof bool) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Server{Sock: filepath.Join(dir, "r.sock"), t: t, dir: dir, aof: aof}
	s.URL = "unix://" + s.Sock
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Restart starts the server again on the same socket after Stop or
// Shutdown: empty, or, started by StartAOF, with what its append-only file
// holds.
func (s *Server) Restart() {
	s.t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		s.t.Fatal("redistest: redis-server is not installed (scripts/test.sh installs it): ", err)
	}
	aof := []string{"--appendonly", "no"}
	if s.aof {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	s.cmd = exec.Command(bin, append([]string{"--port", "0", "--unixsocket", s.Sock, "--unixsocketperm", "700",
		"--save", "", "--dir", s.dir, "--loglevel", "warning"}, aof...)...)
	log, err := os.OpenFile(filepath.Join(s.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal("redistest: ", err)
	}
	defer log.Close()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		s.t.Fatal("redistest: ", err)
	}
	c := s.Client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = poll(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
	if err != nil {
		s.t.Fatal("redistest: redis-server did not answer in 10s: ", err)
	}
}

// Client returns a new client of the server; the caller closes it. It
// does not retry commands by itself.
func (s *Server) Client() *goredis.Client {
	return goredis.NewClient(&goredis.Options{Network: "unix", Addr: s.Sock, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		ContextTimeoutEnabled: true}) // as limits/redis.Dial's
}

// Shutdown stops the server the hard way, losing its data (SHUTDOWN NOSAVE).
func (s *Server) Shutdown() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	c := s.Client()
	err := c.ShutdownNoSave(context.Background()).Err()
	c.Close()
	if err != nil && !strings.Contains(err.Error(), "EOF") && !strings.Contains(err.Error(), "closed") {
		s.t.Log("redistest: shutdown: ", err)
	}
	s.wait()
}

// Stop kills the server if it runs.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	s.wait()
}

// Pause stops the server's process (SIGSTOP) until Resume: a server that
// hangs, neither answering nor closing its connections.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal("redistest: ", err)
	}
}

// Resume lets a paused server go on (SIGCONT).
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal("redistest: ", err)
	}
}

func (s *Server) wait() {
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
	_ = os.Remove(s.Sock)
}

// Do runs one command on a fresh connection, for checks.
func (s *Server) Do(args ...any) (any, error) {
	c := s.Client()
	defer c.Close()
	return c.Do(context.Background(), args...).Result()
}

func (s *Server) String() string { return fmt.Sprintf("redis-server on %s", s.Sock) }
