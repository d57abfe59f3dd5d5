package workqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Status is a queue's progress.
type Status struct {
	Enqueued int64 // lines ever enqueued
	Done     int64 // lines whose final record was written and acknowledged, ok or not
	Failed   int64 // of Done, those not ok
	Pending  int64 // lines taken by a worker and not acknowledged
	// PendingBy is Pending by worker (consumer name), those holding none
	// left out.
	PendingBy map[string]int64
	Workers   int64   // workers alive: their heartbeat has not run out
	RatePerS  float64 // lines done a second over the last minute
	// ETA is how long the lines not done take at RatePerS; -1 when the
	// rate is 0 with lines left.
	ETA time.Duration
}

// rateWindow is the time the rate is averaged over.
const rateWindow = time.Minute

// Status reads the queue's progress, now being the Redis clock's time. It
// wraps ErrNoGroup when the namespace has no queue.
func (q *Queue) Status(ctx context.Context) (Status, error) {
	var st Status
	now, err := q.c.Time(ctx).Result()
	if err != nil {
		return st, fmt.Errorf("workqueue: %w", err)
	}
	stats, err := q.c.HGetAll(ctx, q.keys.stats).Result()
	if err != nil {
		return st, fmt.Errorf("workqueue: %w", err)
	}
	st.Enqueued = atoi(stats["enqueued"])
	st.Done = atoi(stats["done"])
	st.Failed = atoi(stats["failed"])
	p, err := q.c.XPending(ctx, q.keys.stream, Group).Result()
	switch {
	case err != nil && (strings.HasPrefix(err.Error(), "NOGROUP") || errors.Is(err, goredis.Nil)):
		if len(stats) == 0 {
			return st, ErrNoGroup
		}
	case err != nil:
		return st, fmt.Errorf("workqueue: %w", err)
	default:
		st.Pending = p.Count
		st.PendingBy = p.Consumers
	}
	if st.Workers, err = q.c.ZCount(ctx, q.keys.workers, strconv.FormatInt(now.UnixMilli(), 10), "+inf").Result(); err != nil {
		return st, fmt.Errorf("workqueue: %w", err)
	}
	buckets, err := q.c.HGetAll(ctx, q.keys.rate).Result()
	if err != nil {
		return st, fmt.Errorf("workqueue: %w", err)
	}
	st.RatePerS, st.ETA = rate(buckets, now, st.Enqueued-st.Done)
	return st, nil
}

// rate is the lines done a second over the last minute, from buckets (unix
// time / rateBucketSeconds -> lines), and the time the lines left take at
// that rate (-1 when never). A run younger than a minute is averaged from
// the start of its first bucket, not over the whole minute.
func rate(buckets map[string]string, now time.Time, left int64) (float64, time.Duration) {
	cur := now.Unix() / rateBucketSeconds
	// The whole buckets of the last minute and the one under way.
	first := cur - int64(rateWindow/time.Second)/rateBucketSeconds + 1
	var n int64
	since := cur + 1 // the first bucket with lines
	for b, v := range buckets {
		if k, err := strconv.ParseInt(b, 10, 64); err == nil && k >= first && k <= cur {
			n += atoi(v)
			since = min(since, k)
		}
	}
	var r float64
	if span := now.Sub(time.Unix(since*rateBucketSeconds, 0)); n > 0 && span > 0 {
		r = float64(n) / span.Seconds()
	}
	switch {
	case left <= 0:
		return r, 0
	case r == 0:
		return r, -1
	}
	return r, time.Duration(float64(left) / r * float64(time.Second))
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
