package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

var (
	//go:embed common.lua
	commonLua string
	//go:embed acquire.lua
	acquireLua string
	//go:embed renew.lua
	renewLua string
	//go:embed release.lua
	releaseLua string
	//go:embed setup.lua
	setupLua string
)

// scripts are the scheduler's Lua entry points. On Redis 7 and later they
// are the functions of one library, loaded by New (FUNCTION LOAD) and again
// when a call finds it missing (a Redis restarted without its data): a
// library's functions are made once, when it loads, where a script makes
// every one of its functions again at each call, a fifth of the scripts'
// cost to Redis. Before Redis 7, or when a library cannot be loaded, they
// are scripts: Run tries EVALSHA and falls back to EVAL on NOSCRIPT, so a
// restarted or failed-over Redis gets them back on first use. They are
// made by New, not at package init: every run of the fetch binary links
// this package, and hashing the scripts at start would cost the runs that
// never use Redis.
type scripts struct {
	acquire, renew, release, setup *script
	lib                            string // the library's code, for FUNCTION LOAD
}

// script is one entry point: a function of the library, and the same code
// as a script.
type script struct {
	fn string          // its function's name
	ev *goredis.Script // the script
}

// Hash is the SHA1 digest of the script, as EVALSHA takes it.
func (sc *script) Hash() string { return sc.ev.Hash() }

func newScripts() scripts {
	code := commonLua + acquireLua + renewLua + releaseLua + setupLua
	sum := sha1.Sum([]byte(code))
	// The library's name carries its code's digest: fetch versions with
	// other code load theirs beside it, not over it.
	lib := "fetch_limits_" + hex.EncodeToString(sum[:6])
	var b strings.Builder
	b.WriteString("#!lua name=" + lib + "\n" + code)
	mk := func(name, body string) *script {
		fn := lib + "_" + name
		fmt.Fprintf(&b, "\nredis.register_function('%s', function(keys, args) begin(keys, args) return %s() end)", fn, name)
		return &script{fn: fn, ev: goredis.NewScript("local KEYS0, ARGV0 = KEYS, ARGV\n" + commonLua + body +
			"\nbegin(KEYS0, ARGV0)\nreturn " + name + "()\n")}
	}
	sc := scripts{acquire: mk("acquire", acquireLua), renew: mk("renew", renewLua),
		release: mk("release", releaseLua), setup: mk("setup", setupLua)}
	sc.lib = b.String()
	return sc
}

// keyNames are the namespace's keys, in the order common.lua takes them.
var keyNames = []string{
	"limits", "st", "bidx", "pidx", "leases", "hexp", "bench", "procs",
}

// keys returns namespace ns's keys, all under the hash tag {ns} so that they
// live in one Redis Cluster slot.
func keys(ns string) []string {
	out := make([]string, len(keyNames))
	for i, k := range keyNames {
		out[i] = "{" + ns + "}:" + k
	}
	return out
}

// rediser is what the scheduler needs of a client: *goredis.Client,
// *goredis.Ring and *goredis.ClusterClient all have it.
type rediser interface {
	goredis.Scripter
	FCall(ctx context.Context, function string, keys []string, args ...any) *goredis.Cmd
	FunctionLoadReplace(ctx context.Context, code string) *goredis.StringCmd
	Subscribe(ctx context.Context, channels ...string) *goredis.PubSub
	Pipeline() goredis.Pipeliner
}

// argv is the header, with a fresh random seed, and args.
func (s *Scheduler) argv(args []any) []any {
	all := make([]any, 0, len(s.hdr)+len(args))
	all = append(all, s.hdr...)
	all[seedArg] = strconv.FormatUint(uint64(s.rand()>>33), 10)
	return append(all, args...)
}

// run runs sc with the header and args, and returns its reply.
func (s *Scheduler) run(ctx context.Context, sc *script, args ...any) ([]any, error) {
	return s.runWithin(ctx, s.opTimeout, sc, args...)
}

// runWithin is run with a timeout of its own.
func (s *Scheduler) runWithin(ctx context.Context, within time.Duration, sc *script, args ...any) ([]any, error) {
	all := s.argv(args)
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	v, err := s.call(ctx, sc, all).Slice()
	if err != nil {
		s.noteErr(err)
		return nil, err
	}
	s.noteOK()
	return v, nil
}

// call runs sc with the header and args all: as a function of the
// library, loading it again if Redis has lost it, or as a script.
func (s *Scheduler) call(ctx context.Context, sc *script, all []any) *goredis.Cmd {
	if !s.fns.Load() {
		return sc.ev.Run(ctx, s.c, s.keys, all...)
	}
	cmd := s.c.FCall(ctx, sc.fn, s.keys, all...)
	if s.reload(ctx, cmd.Err()) {
		cmd = s.c.FCall(ctx, sc.fn, s.keys, all...)
	}
	return cmd
}

// reload loads the library again when err says Redis does not have its
// function, and reports whether it did.
func (s *Scheduler) reload(ctx context.Context, err error) bool {
	if err == nil || !s.fns.Load() || !strings.Contains(err.Error(), "Function not found") {
		return false
	}
	return s.loadLibrary(ctx, s.opTimeout) == nil
}

// loadLibrary loads the library of the scripts (FUNCTION LOAD REPLACE), on
// every master of a Cluster.
func (s *Scheduler) loadLibrary(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if cc, ok := s.c.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return c.FunctionLoadReplace(ctx, s.scripts.lib).Err()
		})
	}
	return s.c.FunctionLoadReplace(ctx, s.scripts.lib).Err()
}

// runConfirmed is run for a script whose writes must reach s.replicas
// replicas before they are used: the grants of a Sentinel-managed master,
// so that a failover to a replica never loses a lease in use. The script
// and a WAIT go in one pipeline, so on one connection, and WAIT waits for
// that script's writes. Fewer acknowledgements than asked within half a
// call's timeout is an error: the caller gives the grants back.
func (s *Scheduler) runConfirmed(ctx context.Context, sc *script, args ...any) ([]any, error) {
	all := s.argv(args)
	wait := max(s.opTimeout/2, time.Millisecond)
	v, acked, err := s.evalWait(ctx, sc, all, wait, true)
	if err != nil && (goredis.HasErrorPrefix(err, "NOSCRIPT") || s.reload(ctx, err)) {
		v, acked, err = s.evalWait(ctx, sc, all, wait, false)
	}
	if err == nil && acked < int64(s.replicas) {
		err = fmt.Errorf("limits/redis: %d of %d replicas acknowledged a grant within %s", acked, s.replicas, wait)
	}
	if err != nil {
		s.noteErr(err)
		return nil, err
	}
	s.noteOK()
	return v, nil
}

// evalWait sends sc (by its hash, or whole) and WAIT in one pipeline, and
// returns the script's reply and how many replicas acknowledged it.
func (s *Scheduler) evalWait(ctx context.Context, sc *script, all []any, wait time.Duration, sha bool) ([]any, int64, error) {
	// Redis ends a WAIT on its timer, which ticks every 100ms (hz 10).
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout+wait+100*time.Millisecond)
	defer cancel()
	pipe := s.c.Pipeline()
	var ev *goredis.Cmd
	switch {
	case s.fns.Load():
		ev = pipe.FCall(ctx, sc.fn, s.keys, all...)
	case sha:
		ev = sc.ev.EvalSha(ctx, pipe, s.keys, all...)
	default:
		ev = sc.ev.Eval(ctx, pipe, s.keys, all...)
	}
	w := pipe.Do(ctx, "WAIT", s.replicas, wait.Milliseconds())
	_, _ = pipe.Exec(ctx)
	v, err := ev.Slice()
	if err != nil {
		return nil, 0, err
	}
	n, err := w.Int64()
	return v, n, err
}

// str is the i-th element of a script's reply as a string.
func str(v []any, i int) string {
	if i >= len(v) {
		return ""
	}
	switch x := v[i].(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(v[i])
}

// The scripts' replies, decoded in one place: each script's comment says
// its reply; these are those replies as Go values.

// acquireReply is the acquire script's reply for one request.
type acquireReply struct {
	kind string // "ok", "wait", "banned", "reset" or "dead"; "" for a reply not understood
	err  error  // why, for ""

	// "ok": the lease was taken.
	proxy, budget               string
	proxyInFlight, hostInFlight int
	epoch                       string
	probe                       bool  // the proxy's probe after a bench
	now                         int64 // µs on the Redis clock, also of "wait"
	charged                     int64 // when the rate tokens were charged; 0 with no rate
	next                        int64 // when the request's next global and proxy token comes due; 0 none
	global                      int64 // when the global rate's next token comes due; 0 none
	hostNext                    int64 // when the host rate's next token comes due; 0 none

	// "wait": nothing started.
	hostOnly bool   // only the request's host is limited: other hosts may go
	waitUs   int64  // before anything can start; -1: until a release
	hard     bool   // nothing of any process starts before: the global rate or a grace
	why      string // what it waits for (see acquire.lua and waitCause)

	// "banned": the host banned every proxy that could serve it, this many.
	bannedBy int

	// "dead": the pool cannot serve.
	total, rejected int
	deadFor         int64 // µs no proxy has been healthy
}

// decodeAcquire reads one element of the acquire script's reply.
func decodeAcquire(v []any) acquireReply {
	r := acquireReply{kind: str(v, 0)}
	switch r.kind {
	case "ok":
		r.proxy, r.budget = str(v, 1), str(v, 2)
		r.proxyInFlight, r.hostInFlight = int(num(v, 3)), int(num(v, 4))
		r.epoch, r.probe = str(v, 5), str(v, 6) == "1"
		r.now, r.charged, r.next, r.global, r.hostNext = num(v, 7), num(v, 8), num(v, 9), num(v, 10), num(v, 11)
	case "wait":
		r.hostOnly = str(v, 1) == "host"
		r.waitUs, r.now, r.hard, r.why = num(v, 2), num(v, 3), str(v, 4) == "1", str(v, 5)
	case "banned":
		r.bannedBy = int(num(v, 1))
	case "dead":
		r.total, r.rejected, r.deadFor = int(num(v, 1)), int(num(v, 2)), num(v, 3)
	case "reset":
	default:
		return acquireReply{err: fmt.Errorf("limits/redis: unexpected reply %v", v)}
	}
	return r
}

// renewReply is the renew script's reply: reset (Redis lost the
// namespace), or the epoch and whether each lease is still held.
type renewReply struct {
	reset bool
	epoch string
	held  []bool
}

func decodeRenew(v []any, n int) renewReply {
	if str(v, 0) == "reset" {
		return renewReply{reset: true}
	}
	r := renewReply{epoch: str(v, 1), held: make([]bool, n)}
	for i := range r.held {
		r.held[i] = str(v, 2+i) == "1"
	}
	return r
}

// setupReply is the setup script's reply: its first word (install, match,
// differ, ok, incomplete) and the epoch of match and ok.
type setupReply struct {
	step, epoch string
}

func decodeSetup(v []any) setupReply { return setupReply{step: str(v, 0), epoch: str(v, 1)} }

// releaseReply is what the release script says of one lease: the proxy's
// new health state ("" when unchanged) and its cooldown.
type releaseReply struct {
	state    string
	cooldown time.Duration
}

func decodeRelease(v []any, i int) releaseReply {
	return releaseReply{state: str(v, 3*i+1), cooldown: time.Duration(num(v, 3*i+2)) * time.Microsecond}
}

// num is the i-th element of a script's reply as an integer, 0 when it is
// none.
func num(v []any, i int) int64 {
	if i < len(v) {
		if n, ok := v[i].(int64); ok {
			return n
		}
	}
	n, _ := strconv.ParseInt(str(v, i), 10, 64)
	return n
}
