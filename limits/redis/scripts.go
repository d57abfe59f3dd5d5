package redis

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
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

// scripts are the scheduler's Lua scripts. Run tries EVALSHA and falls back
// to EVAL on NOSCRIPT, so a restarted or failed-over Redis gets them back on
// first use. They are made by New, not at package init: every run of the
// fetch binary links this package, and hashing the scripts at start would
// cost the runs that never use Redis.
type scripts struct {
	acquire, renew, release, setup *goredis.Script
}

func newScripts() scripts {
	return scripts{
		acquire: goredis.NewScript(commonLua + acquireLua),
		renew:   goredis.NewScript(commonLua + renewLua),
		release: goredis.NewScript(commonLua + releaseLua),
		setup:   goredis.NewScript(commonLua + setupLua),
	}
}

// keyNames are the namespace's keys, in the order common.lua takes them.
var keyNames = []string{
	"epoch", "cfg", "limits", "bidx", "pidx", "leases", "linfo", "pin", "pused", "bin",
	"bused", "tat", "hosts", "hexp", "bench", "probe", "health", "bavail", "want", "seq",
	"procs",
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
func (s *Scheduler) run(ctx context.Context, sc *goredis.Script, args ...any) ([]any, error) {
	all := s.argv(args)
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout)
	defer cancel()
	v, err := sc.Run(ctx, s.c, s.keys, all...).Slice()
	if err != nil {
		s.noteErr(err)
		return nil, err
	}
	s.noteOK()
	return v, nil
}

// runConfirmed is run for a script whose writes must reach s.replicas
// replicas before they are used: the grants of a Sentinel-managed master,
// so that a failover to a replica never loses a lease in use. The script
// and a WAIT go in one pipeline, so on one connection, and WAIT waits for
// that script's writes. Fewer acknowledgements than asked within half a
// call's timeout is an error: the caller gives the grants back.
func (s *Scheduler) runConfirmed(ctx context.Context, sc *goredis.Script, args ...any) ([]any, error) {
	all := s.argv(args)
	wait := max(s.opTimeout/2, time.Millisecond)
	v, acked, err := s.evalWait(ctx, sc, all, wait, true)
	if err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") {
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
func (s *Scheduler) evalWait(ctx context.Context, sc *goredis.Script, all []any, wait time.Duration, sha bool) ([]any, int64, error) {
	// Redis ends a WAIT on its timer, which ticks every 100ms (hz 10).
	ctx, cancel := context.WithTimeout(ctx, s.opTimeout+wait+100*time.Millisecond)
	defer cancel()
	pipe := s.c.Pipeline()
	var ev *goredis.Cmd
	if sha {
		ev = sc.EvalSha(ctx, pipe, s.keys, all...)
	} else {
		ev = sc.Eval(ctx, pipe, s.keys, all...)
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

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
