package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Sentinel is a master redis-server, one replica of it and one Redis
// Sentinel that monitors them, each on a free 127.0.0.1 TCP port, with no
// persistence, their logs in a temporary directory.
type Sentinel struct {
	Master       string // the name the sentinel knows the master by: "mymaster"
	SentinelAddr string // the sentinel's host:port
	URL          string // redis+sentinel://SentinelAddr/Master

	servers  [2]*proc // the master at start, then its replica
	sentinel *proc
	sc       *goredis.SentinelClient
	admin    [2]*goredis.Client // the helper's own clients of servers

	fo sync.Mutex // held by Failover: one at a time

	mu      sync.Mutex
	stopped bool
}

// StartSentinel starts a master, a replica of it and a sentinel that
// monitors the master (quorum 1, down after 1 s, failover timeout 5 s) for
// t, and returns once the replica is in sync and the sentinel knows both.
// It stops them all when t ends and fails the test (never skips it) if
// redis-server is not installed.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	dir := tempDir(t, "redistest-sentinel")
	s := &Sentinel{Master: "mymaster"}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			for _, p := range []*proc{s.servers[0], s.servers[1], s.sentinel} {
				if p != nil {
					t.Logf("redistest: the end of %s's log:\n%s", p.name, p.tail(40))
				}
			}
		}
	})
	server := func(i int, extra ...string) {
		t.Helper()
		p, err := launch(dir, fmt.Sprintf("server-%d", i), 1, func(ports []int) ([]string, error) {
			// No delay before a diskless full sync (5 s by default).
			return append([]string{"--port", strconv.Itoa(ports[0]), "--bind", "127.0.0.1",
				"--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
				"--dir", dir, "--loglevel", "notice"}, extra...), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		s.servers[i], s.admin[i] = p, adminClient(p.addr)
		s.mu.Unlock()
	}
	server(0)
	server(1, "--replicaof", "127.0.0.1", strconv.Itoa(s.servers[0].ports[0]))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.waitReplica(ctx, 1, 0); err != nil {
		t.Fatalf("redistest: the replica did not sync in 30s: %v", err)
	}

	conf := filepath.Join(dir, "sentinel.conf")
	p, err := launch(dir, "sentinel", 1, func(ports []int) ([]string, error) {
		// Written for each try: the sentinel rewrites its file.
		cfg := fmt.Sprintf("bind 127.0.0.1\ndir %q\nsentinel resolve-hostnames no\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %[2]s 1000\n"+
			"sentinel failover-timeout %[2]s 5000\n"+
			"sentinel parallel-syncs %[2]s 1\n", dir, s.Master, s.servers[0].ports[0])
		if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel", "--port", strconv.Itoa(ports[0]), "--loglevel", "notice"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.sentinel = p
	s.sc = goredis.NewSentinelClient(&goredis.Options{Addr: p.addr, MaxRetries: -1,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		ContextTimeoutEnabled: true, PoolSize: 2})
	s.mu.Unlock()
	s.SentinelAddr = p.addr
	s.URL = "redis+sentinel://" + p.addr + "/" + s.Master
	// The sentinel learns of the servers by itself.
	err = poll(ctx, 50*time.Millisecond, func(ctx context.Context) error { return s.knows(ctx, 0, 1) })
	if err != nil {
		t.Fatalf("redistest: the sentinel did not know the master and its replica in 30s: %v", err)
	}
	return s
}

// knows checks that the sentinel sees servers[m] as the master, up, and
// servers[r] as its replica, up, in sync and fit to be promoted.
func (s *Sentinel) knows(ctx context.Context, m, r int) error {
	mi, err := s.sc.Master(ctx, s.Master).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	if addr := net.JoinHostPort(mi["ip"], mi["port"]); addr != s.servers[m].addr || mi["flags"] != "master" {
		return fmt.Errorf("the sentinel sees %s as master with flags %s, want %s up", addr, mi["flags"], s.servers[m].addr)
	}
	reps, err := s.sc.Replicas(ctx, s.Master).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	for _, rep := range reps {
		if net.JoinHostPort(rep["ip"], rep["port"]) != s.servers[r].addr {
			continue
		}
		if rep["flags"] != "slave" || rep["master-link-status"] != "ok" {
			return fmt.Errorf("the sentinel sees the replica %s with flags %s, master link %s",
				s.servers[r].addr, rep["flags"], rep["master-link-status"])
		}
		return nil
	}
	return fmt.Errorf("the sentinel does not list %s as a replica (it lists %d)", s.servers[r].addr, len(reps))
}

// MasterAddr returns the master's host:port as the sentinel names it
// (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.masterAddr(ctx)
}

func (s *Sentinel) masterAddr(ctx context.Context) (string, error) {
	a, err := s.sc.GetMasterAddrByName(ctx, s.Master).Result()
	if err != nil {
		return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME %s: %w", s.Master, err)
	}
	if len(a) != 2 {
		return "", fmt.Errorf("redistest: SENTINEL GET-MASTER-ADDR-BY-NAME %s: %q", s.Master, a)
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// Failover makes the sentinel promote the replica (SENTINEL FAILOVER) and
// returns the new master's address once the sentinel names it, its
// failover over, and the server reports role:master. Before, it waits
// until the replica has every write the master had acknowledged, so none
// is lost; after, it makes the old master a replica of the new one, as the
// sentinel itself would some 10 s later, and waits until that is in sync:
// there are never two masters, and Failover can be called again to go
// back. It gives up after 30 s or when ctx ends. Calls are serialised.
func (s *Sentinel) Failover(ctx context.Context) (newMaster string, err error) {
	s.fo.Lock()
	defer s.fo.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cur, err := s.masterAddr(ctx)
	if err != nil {
		return "", err
	}
	m := -1
	for i, p := range s.servers {
		if p.addr == cur {
			m = i
		}
	}
	if m < 0 {
		return "", fmt.Errorf("redistest: Failover: the sentinel names %s as master, neither of %s and %s",
			cur, s.servers[0].addr, s.servers[1].addr)
	}
	r := 1 - m
	fail := func(what string, err error) (string, error) {
		return "", fmt.Errorf("redistest: Failover from %s to %s: %s: %w", s.servers[m].addr, s.servers[r].addr, what, err)
	}
	if err := s.waitReplica(ctx, r, m); err != nil {
		return fail("the replica did not catch up", err)
	}
	// NOGOODSLAVE until the sentinel has seen the replica again, INPROG
	// while a failover it started itself goes on.
	err = poll(ctx, 50*time.Millisecond, func(ctx context.Context) error { return s.sc.Failover(ctx, s.Master).Err() })
	if err != nil {
		return fail("SENTINEL FAILOVER", err)
	}
	err = poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		// Flags "master" alone: the failover is over, +switch-master
		// published, and the sentinel is connected to the new master.
		mi, err := s.sc.Master(ctx, s.Master).Result()
		if err != nil {
			return err
		}
		if a := net.JoinHostPort(mi["ip"], mi["port"]); a != s.servers[r].addr || mi["flags"] != "master" {
			return fmt.Errorf("the sentinel names %s as master, flags %s", a, mi["flags"])
		}
		info, err := s.replInfo(ctx, r)
		if err == nil && info["role"] != "master" {
			err = fmt.Errorf("%s reports role:%s", s.servers[r].addr, info["role"])
		}
		return err
	})
	if err != nil {
		return fail("the replica was not promoted", err)
	}
	if err := s.admin[m].Do(ctx, "REPLICAOF", "127.0.0.1", s.servers[r].ports[0]).Err(); err != nil {
		return fail("REPLICAOF on the old master", err)
	}
	if err := s.waitReplica(ctx, m, r); err != nil {
		return fail("the old master did not sync with the new", err)
	}
	return s.servers[r].addr, nil
}

// waitReplica waits until servers[r] is a replica of servers[m], its link
// up, with all of m's replication stream that m had when it began.
func (s *Sentinel) waitReplica(ctx context.Context, r, m int) error {
	mi, err := s.replInfo(ctx, m)
	if err != nil {
		return err
	}
	want, _ := strconv.ParseInt(mi["master_repl_offset"], 10, 64)
	return poll(ctx, 20*time.Millisecond, func(ctx context.Context) error {
		ri, err := s.replInfo(ctx, r)
		if err != nil {
			return err
		}
		got, _ := strconv.ParseInt(ri["slave_repl_offset"], 10, 64)
		switch {
		case ri["role"] != "slave" || ri["master_port"] != strconv.Itoa(s.servers[m].ports[0]):
			return fmt.Errorf("%s reports role:%s, master_port:%s", s.servers[r].addr, ri["role"], ri["master_port"])
		case ri["master_link_status"] != "up":
			return fmt.Errorf("%s reports master_link_status:%s", s.servers[r].addr, ri["master_link_status"])
		case got < want:
			return fmt.Errorf("%s is at offset %d of %d", s.servers[r].addr, got, want)
		}
		return nil
	})
}

// replInfo returns the fields of INFO replication of servers[i].
func (s *Sentinel) replInfo(ctx context.Context, i int) (map[string]string, error) {
	txt, err := s.admin[i].Info(ctx, "replication").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO replication on %s: %w", s.servers[i].addr, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// Stop kills the sentinel and both servers; it is called when the test
// ends.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.sc != nil {
		_ = s.sc.Close()
	}
	for _, a := range s.admin {
		if a != nil {
			_ = a.Close()
		}
	}
	for _, p := range []*proc{s.sentinel, s.servers[0], s.servers[1]} {
		if p != nil {
			p.stop()
		}
	}
}
