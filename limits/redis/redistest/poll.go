package redistest

import (
	"context"
	"errors"
	"time"
)

// poll calls check every interval until it returns nil, and then returns
// nil. When ctx ends first it returns check's last error (which names
// what was awaited); when check's error is errExited, at once.
//
// Everything redistest waits for is the state of other processes: a
// redis-server that says nothing when it is ready, nodes that agree by
// gossip, a sentinel's view, replication between servers. None tells this
// process when it changes, so there is no event to wait on: it is polled,
// here and nowhere else.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) error) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := check(ctx)
		if err == nil || errors.Is(err, errExited) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}
