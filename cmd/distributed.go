package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/limits"
	redislimits "github.com/fetch-dev/fetch/limits/redis"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// redisLog is go-redis's logger, writing warnings.
type redisLog struct{ w *warnings }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.w.warn(fmt.Sprintf(format, v...))
}

// validNamespace reports whether s may be a --namespace: 1 to 64 letters,
// digits, '.', '_', ':' or '-'. It names Redis keys under one hash tag, so
// braces and white space are out. A loop, not a regular expression: every
// run checks it, and compiling [...]{1,64} cost a millisecond of each
// start.
func validNamespace(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '-':
		default:
			return false
		}
	}
	return true
}

// completeDistributed checks the distributed-mode flags.
func (opts *FetchOptions) completeDistributed(cmd *cobra.Command) error {
	if opts.Shard != "" {
		sh, err := input.ParseShard(opts.Shard)
		if err != nil {
			return fmt.Errorf("--shard: %w", err)
		}
		opts.Config.Shard = sh
	}
	if !validNamespace(opts.Namespace) {
		return fmt.Errorf("--namespace %q: want 1 to 64 letters, digits, '.', '_', ':' or '-'", opts.Namespace)
	}
	if opts.LeaseTTL < time.Second || opts.LeaseTTL > time.Hour {
		return fmt.Errorf("--lease-ttl %s: want from 1s to 1h", opts.LeaseTTL)
	}
	if len(opts.Redis) == 0 {
		for _, name := range []string{"namespace", "lease-ttl"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --redis", name)
			}
		}
	}
	return nil
}

// dialCoordinator connects to --redis, before any request, and sets the
// engine up to build its scheduler there. The returned function closes the
// connection; call it after the engine is closed. A --redis value that is
// empty or does not parse, Redis that cannot be reached and limits that
// differ from those live in the namespace are usage errors, naming the
// address (never its password).
func (opts *FetchOptions) dialCoordinator(ctx context.Context, warn *warnings) (closeFn func(), err error) {
	if len(opts.Redis) == 0 {
		return func() {}, nil
	}
	target, err := redislimits.ParseTarget(opts.Redis, os.Getenv)
	if err != nil {
		return nil, usageError(fmt.Errorf("--redis: %w", err))
	}
	// go-redis logs its connection troubles itself: they are warnings, cut
	// short, and -q silences them.
	goredis.SetLogger(redisLog{warn})
	client, err := redislimits.Dial(ctx, target)
	if err != nil {
		return nil, usageError(fmt.Errorf("--redis: %w", err))
	}
	if opts.work != nil {
		opts.work.client = client // the queue's too
	}
	ro := redislimits.Options{Namespace: opts.Namespace, LeaseTTL: opts.LeaseTTL, Addr: target.String()}
	if target.Kind == redislimits.KindSentinel {
		ro.Replicas = 1 // a failover to the replica keeps every lease in use
	}
	opts.Config.NewScheduler = func(lc limits.Config) (limits.Scheduler, error) {
		s, err := redislimits.New(ctx, client, ro, lc)
		if err != nil {
			if errors.Is(err, redislimits.ErrConflict) {
				return nil, fmt.Errorf("--namespace %s: %w", opts.Namespace, err)
			}
			return nil, fmt.Errorf("--redis: %w", err)
		}
		return s, nil
	}
	return func() { client.Close() }, nil
}
