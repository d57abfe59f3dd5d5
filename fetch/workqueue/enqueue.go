package workqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/fetch-dev/fetch/fetch/input"
	goredis "github.com/redis/go-redis/v9"
)

// enqueueBatch is how many lines one call of the enqueue script adds.
const enqueueBatch = 256

// Enqueue appends the lines of in that a run would take (blank and comment
// lines passed over) to the queue, each with in's name and its line
// number, but only those past the last line enqueued from an input of that
// name: enqueueing an input again, after it grew or after an enqueue that
// was interrupted, adds only what is new. It streams in: memory does not
// grow with its length. It returns how many lines it added; on ctx's end or
// an error, the lines added until then stay, and a later Enqueue goes on
// from there.
func (q *Queue) Enqueue(ctx context.Context, in input.Source) (int64, error) {
	if err := q.ensureGroup(ctx); err != nil {
		return 0, err
	}
	last, err := q.c.HGet(ctx, q.keys.inputs, in.Name).Int()
	if err != nil && !errors.Is(err, goredis.Nil) {
		return 0, fmt.Errorf("workqueue: %w", err)
	}
	var added int64
	args := make([]any, 0, 1+3*enqueueBatch)
	flush := func() error {
		if len(args) <= 1 {
			return nil
		}
		n, err := enqueueScript.Run(ctx, q.c, []string{q.keys.stream, q.keys.inputs, q.keys.stats}, args...).Int64()
		if err != nil {
			return fmt.Errorf("workqueue: enqueueing %s: %w", in.Name, err)
		}
		added += n
		args = args[:1]
		return nil
	}
	args = append(args, in.Name)
	s := input.NewScanner(in, input.Shard{}, nil)
	for s.Scan() {
		r := s.Raw()
		if r.Number <= last {
			continue
		}
		flags := ""
		if r.Long {
			flags = flagLong
			if r.AtPastKept {
				flags = flagLongAtPast
			}
		}
		args = append(args, strconv.Itoa(r.Number), string(r.Text), flags)
		if len(args) == cap(args) {
			if err := flush(); err != nil {
				return added, err
			}
			if err := ctx.Err(); err != nil {
				return added, err
			}
		}
	}
	if err := s.Err(); err != nil {
		return added, err
	}
	return added, flush()
}
