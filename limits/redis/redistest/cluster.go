package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// numSlots is the number of hash slots of a Redis Cluster.
const numSlots = 16384

// Cluster is a Redis Cluster of masters without replicas, each a
// redis-server on a free 127.0.0.1 TCP port with no persistence, its logs in
// a temporary directory.
type Cluster struct {
	Addrs []string // host:port of each master, in order
	URLs  []string // redis://Addrs[i]

	t     testing.TB
	nodes []*proc
	ids   []string          // the nodes' IDs, in order
	admin []*goredis.Client // the helper's own client of each node

	mig          sync.Mutex // held by MigrateSlot: one migration at a time
	afterMigrate func()     // for tests: called after each MIGRATE of MigrateSlot

	mu      sync.Mutex
	stopped bool
}

// StartCluster starts a cluster of masters redis-servers for t, joins them
// and gives each an even share of the slots, in order (of 3: 0-5460,
// 5461-10921, 10922-16383), and returns once every node reports
// cluster_state:ok and all agree on the slot map. It stops the cluster when t ends and fails the
// test (never skips it) if redis-server is not installed.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("redistest: StartCluster(%d): want 1 master or more", masters)
	}
	dir := tempDir(t, "redistest-cluster")
	c := &Cluster{t: t}
	t.Cleanup(func() {
		c.Stop()
		if t.Failed() {
			for _, p := range c.nodes {
				t.Logf("redistest: the end of %s's log:\n%s", p.name, p.tail(40))
			}
		}
	})
	for i := range masters {
		name := fmt.Sprintf("node-%d", i)
		conf := filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", i))
		p, err := launch(dir, name, 2, func(ports []int) ([]string, error) {
			// A try that lost its port to another process may have
			// written the file: start afresh.
			if err := os.Remove(conf); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
			return []string{"--cluster-enabled", "yes", "--cluster-config-file", conf,
				"--port", strconv.Itoa(ports[0]), "--cluster-port", strconv.Itoa(ports[1]),
				"--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
				"--cluster-node-timeout", "5000", "--dir", dir, "--loglevel", "notice"}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.nodes = append(c.nodes, p)
		c.admin = append(c.admin, adminClient(p.addr))
		c.mu.Unlock()
		c.Addrs = append(c.Addrs, p.addr)
		c.URLs = append(c.URLs, "redis://"+p.addr)
	}

	// As redis-cli --cluster create: the slots and distinct config
	// epochs first, then the meetings, whose handshakes carry the slots.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := make([]int, numSlots)
	for i, a := range c.admin {
		id, err := a.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatalf("redistest: CLUSTER MYID on %s: %v", c.Addrs[i], err)
		}
		c.ids = append(c.ids, id)
		lo, hi := i*numSlots/masters, (i+1)*numSlots/masters-1
		if err := a.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE %d %d on %s: %v", lo, hi, c.Addrs[i], err)
		}
		for s := lo; s <= hi; s++ {
			want[s] = i
		}
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER SET-CONFIG-EPOCH on %s: %v", c.Addrs[i], err)
		}
	}
	// Every pair meets, not waiting for gossip to introduce them.
	for i := range masters {
		for j := i + 1; j < masters; j++ {
			if err := c.admin[i].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", c.nodes[j].ports[0], c.nodes[j].ports[1]).Err(); err != nil {
				t.Fatalf("redistest: CLUSTER MEET %s on %s: %v", c.Addrs[j], c.Addrs[i], err)
			}
		}
	}
	// The nodes agree by gossip among themselves.
	err := poll(ctx, 50*time.Millisecond, func(ctx context.Context) error {
		owners, err := c.agreed(ctx)
		if err != nil {
			return err
		}
		if s := firstDiff(owners, want); s >= 0 {
			return fmt.Errorf("the nodes agree that node %d owns slot %d, not node %d as assigned", owners[s], s, want[s])
		}
		return nil
	})
	if err != nil {
		t.Fatalf("redistest: the cluster of %d did not come up in 30s: %v", masters, err)
	}
	return c
}

// Slot returns key's hash slot, as CLUSTER KEYSLOT does: CRC16 (XMODEM) of
// the key, or of its hash tag (what is between the first { and the next }
// if that is not empty), modulo 16384.
func (c *Cluster) Slot(key string) int { return keySlot(key) }

func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % numSlots
}

// NodeFor returns the index of the node that owns slot now: the one that
// claims it itself (the one with the higher config epoch if, in the moment
// of a migration, two do). It returns -1, and marks the test failed, if
// no node answers with it.
func (c *Cluster) NodeFor(slot int) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	i, err := c.owner(ctx, slot)
	if err != nil {
		c.t.Errorf("redistest: NodeFor(%d): %v", slot, err)
		return -1
	}
	return i
}

// owner returns the index of the node that claims slot itself.
func (c *Cluster) owner(ctx context.Context, slot int) (int, error) {
	if slot < 0 || slot >= numSlots {
		return -1, fmt.Errorf("slot %d out of range", slot)
	}
	best, bestEpoch := -1, int64(-1)
	for i, a := range c.admin {
		txt, err := a.ClusterNodes(ctx).Result()
		if err != nil {
			return -1, fmt.Errorf("CLUSTER NODES on %s: %w", c.Addrs[i], err)
		}
		for _, n := range parseNodes(txt) {
			if n.myself && n.owns(slot) && n.epoch > bestEpoch {
				best, bestEpoch = i, n.epoch
			}
		}
	}
	if best < 0 {
		return -1, fmt.Errorf("no node claims slot %d", slot)
	}
	return best, nil
}

// MigrateSlot moves slot, with all its keys, from the node that owns it to
// node to, as redis-cli --cluster reshard does: CLUSTER SETSLOT IMPORTING
// on the target, MIGRATING on the source, MIGRATE of the keys 100 at a
// time until the source has none left, then SETSLOT NODE on the target,
// the source and every other master. It returns once every node agrees on
// the new owner. Clients may run commands and scripts on the slot all
// along: while it moves they get ASK (keys already moved or new) or
// TRYAGAIN (a command's keys split between the two nodes), which cluster
// clients follow or retry, then MOVED. Calls are serialised. On an error,
// or if ctx ends, the slot may be left migrating.
func (c *Cluster) MigrateSlot(ctx context.Context, slot, to int) error {
	if to < 0 || to >= len(c.admin) {
		return fmt.Errorf("redistest: MigrateSlot(%d, %d): no node %d of %d", slot, to, to, len(c.admin))
	}
	c.mig.Lock()
	defer c.mig.Unlock()
	from, err := c.owner(ctx, slot)
	if err != nil {
		return fmt.Errorf("redistest: MigrateSlot(%d, %d): %w", slot, to, err)
	}
	if from == to {
		return nil
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("redistest: moving slot %d from node %d (%s) to node %d (%s): %s: %w",
			slot, from, c.Addrs[from], to, c.Addrs[to], what, err)
	}
	src, dst := c.admin[from], c.admin[to]
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from]).Err(); err != nil {
		return fail("SETSLOT IMPORTING on the target", err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to]).Err(); err != nil {
		return fail("SETSLOT MIGRATING on the source", err)
	}
	// From here the source makes no new key in the slot (it answers ASK
	// for a missing key), so the loop ends.
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		if err != nil {
			return fail("GETKEYSINSLOT", err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", c.nodes[to].ports[0], "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY (the keys went meanwhile) is a status reply, not an error.
		if err := src.Do(ctx, args...).Err(); err != nil {
			return fail("MIGRATE", err)
		}
		if c.afterMigrate != nil {
			c.afterMigrate()
		}
	}
	// The target first: it takes the slot (bumping its epoch), so that
	// whoever the source sends on with ASK is served from then on.
	order := []int{to, from}
	for i := range c.admin {
		if i != to && i != from {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if err := c.admin[i].Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[to]).Err(); err != nil {
			return fail("SETSLOT NODE on "+c.Addrs[i], err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The nodes agree by gossip among themselves.
	err = poll(wctx, 20*time.Millisecond, func(ctx context.Context) error {
		owners, err := c.agreed(ctx)
		if err == nil && owners[slot] != to {
			err = fmt.Errorf("the nodes agree on node %d", owners[slot])
		}
		return err
	})
	if err != nil {
		return fail("the nodes did not agree on the new owner", err)
	}
	return nil
}

// agreed returns the slots' owners (node indexes) if every node reports
// cluster_state:ok, knows every other as a connected master, has no slot
// migrating or importing, and sees the same owners of all slots.
func (c *Cluster) agreed(ctx context.Context) ([]int, error) {
	index := map[string]int{}
	for i, id := range c.ids {
		index[id] = i
	}
	var first []int
	for i, a := range c.admin {
		info, err := a.ClusterInfo(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER INFO on node %d: %w", i, err)
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return nil, fmt.Errorf("node %d: not cluster_state:ok", i)
		}
		txt, err := a.ClusterNodes(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES on node %d: %w", i, err)
		}
		nodes := parseNodes(txt)
		if len(nodes) != len(c.ids) {
			return nil, fmt.Errorf("node %d knows %d nodes, not %d", i, len(nodes), len(c.ids))
		}
		owners := make([]int, numSlots)
		for s := range owners {
			owners[s] = -1
		}
		for _, n := range nodes {
			j, ok := index[n.id]
			switch {
			case !ok:
				return nil, fmt.Errorf("node %d knows a node %s not of this cluster", i, n.id)
			case !n.master || n.link != "connected" || n.bad != "":
				return nil, fmt.Errorf("node %d sees node %d as %s (%s)", i, j, n.flags, n.link)
			case n.moving:
				return nil, fmt.Errorf("node %d has a slot migrating or importing", i)
			}
			for _, r := range n.slots {
				for s := r[0]; s <= r[1]; s++ {
					owners[s] = j
				}
			}
		}
		if first == nil {
			first = owners
		} else if s := firstDiff(owners, first); s >= 0 {
			return nil, fmt.Errorf("node 0 sees slot %d owned by node %d, node %d by node %d", s, first[s], i, owners[s])
		}
	}
	for s, o := range first {
		if o < 0 {
			return nil, fmt.Errorf("slot %d has no owner", s)
		}
	}
	return first, nil
}

func firstDiff(a, b []int) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// clusterNode is a line of CLUSTER NODES: <id> <ip:port@cport[,hostname]>
// <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state>
// <slot>...
type clusterNode struct {
	id, flags, link string
	myself, master  bool
	bad             string // the flag fail, fail?, handshake or noaddr, if any
	epoch           int64
	slots           [][2]int // ranges, inclusive
	moving          bool     // a [slot->-id] or [slot-<-id] entry
}

func parseNodes(txt string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(txt, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n := clusterNode{id: f[0], flags: f[2], link: f[7]}
		n.epoch, _ = strconv.ParseInt(f[6], 10, 64)
		for _, fl := range strings.Split(f[2], ",") {
			switch fl {
			case "myself":
				n.myself = true
			case "master":
				n.master = true
			case "fail", "fail?", "handshake", "noaddr":
				n.bad = fl
			}
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				n.moving = true
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 == nil && err2 == nil {
				n.slots = append(n.slots, [2]int{a, b})
			}
		}
		out = append(out, n)
	}
	return out
}

func (n clusterNode) owns(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// Stop kills every node of the cluster; it is called when the test ends.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	for _, a := range c.admin {
		_ = a.Close()
	}
	for _, p := range c.nodes {
		p.stop()
	}
}

// The helpers below are shared with sentinel.go.

// proc is a redis-server process listening on 127.0.0.1:ports[0].
type proc struct {
	name  string
	ports []int
	addr  string
	log   string
	cmd   *exec.Cmd
	done  chan struct{} // closed once the process has exited
	once  sync.Once
}

var errExited = errors.New("redis-server exited")

// launch starts redis-server with the arguments args makes for nports
// free ports, logging to dir/name.log, and waits until it answers PING on
// 127.0.0.1:ports[0]. If the server exits because a port was taken in the
// meantime, it tries again with other ports.
func launch(dir, name string, nports int, args func(ports []int) ([]string, error)) (*proc, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redistest: redis-server is not installed (scripts/test.sh installs it): %w", err)
	}
	logPath := filepath.Join(dir, name+".log")
	for try := 1; ; try++ {
		ports, err := freePorts(nports)
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		argv, err := args(ports)
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		p := &proc{name: name, ports: ports, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
			log: logPath, done: make(chan struct{})}
		log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		p.cmd = exec.Command(bin, argv...)
		p.cmd.Stdout, p.cmd.Stderr = log, log
		err = p.cmd.Start()
		log.Close()
		if err != nil {
			return nil, fmt.Errorf("redistest: %s: %w", name, err)
		}
		go func() { _ = p.cmd.Wait(); close(p.done) }()
		err = p.waitReady(20 * time.Second)
		if err == nil {
			return p, nil
		}
		p.stop()
		tail := p.tail(10)
		if errors.Is(err, errExited) && strings.Contains(tail, "already in use") && try < 5 {
			continue
		}
		return nil, fmt.Errorf("redistest: %s (%s): %w; the end of its log:\n%s", name, p.addr, err, tail)
	}
}

// waitReady waits until the server answers PING, for at most d.
func (p *proc) waitReady(d time.Duration) error {
	c := goredis.NewClient(&goredis.Options{Addr: p.addr, MaxRetries: -1, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := poll(ctx, 10*time.Millisecond, func(ctx context.Context) error {
		select {
		case <-p.done:
			return errExited
		default:
		}
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
	if err != nil && !errors.Is(err, errExited) {
		return fmt.Errorf("no answer in %v: %w", d, err)
	}
	return err
}

// stop kills the process and waits for it.
func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
}

// tail returns the last n lines of the process's log.
func (p *proc) tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 just now.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tempDir makes a temporary directory removed when t ends.
func tempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal("redistest: ", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// adminClient is the helpers' own client of a server: no retries, and
// room for MIGRATE's 5 s timeout.
func adminClient(addr string) *goredis.Client {
	return goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 5 * time.Second, ContextTimeoutEnabled: true,
		PoolSize: 2})
}
