// Package workqueue is the shared work queue of fetch's distributed mode:
// its protocol in Redis. Enqueue appends URL lines to a namespace's queue,
// a Redis stream, each once per (input, line); workers take them as one
// consumer group (Worker), acknowledge a line once its record is written,
// and claim the lines of a worker that died once they have been idle for
// the claim period; Status reads the queue's progress.
//
// Every key of a namespace shares the hash tag {namespace}, as those of
// limits/redis do, so that a namespace lives in one slot of a Cluster and
// its scripts may touch all of its keys:
//
//	{ns}:q          the stream: one entry per line, fields i (input), n (line
//	                number), t (text), f (flags of a long line, else absent)
//	{ns}:q:inputs   hash: input name -> the last line number enqueued from it
//	{ns}:q:stats    hash: enqueued, done, failed
//	{ns}:q:rate     hash: unix time / 10s -> lines acknowledged in those 10s
//	{ns}:q:workers  sorted set: worker -> when its heartbeat runs out (ms)
//
// An entry is acknowledged (XACK) and deleted (XDEL) in one script once its
// record is written, and counted done then, only if it was still in the
// stream: a line two workers fetched (one claimed it from the other) is
// counted once, and so is one whose take a Sentinel failover lost (in
// the stream, pending for no one on the new master). Survival of a Redis restart is Redis's: with AOF the stream, the
// group's pending lines and the counts come back.
package workqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Client is a connection to Redis: one server, a Sentinel's master or a
// Cluster (see limits/redis.Dial).
type Client = goredis.UniversalClient

// Group is the name of the consumer group every worker belongs to.
const Group = "workers"

// Queue is one namespace's queue. It holds no state of its own but the
// client's: any number of Queues of any processes may use one namespace at
// once. It is safe for concurrent use.
type Queue struct {
	c    Client
	ns   string
	keys keys
}

type keys struct {
	stream, inputs, stats, rate, workers string
}

// New returns the queue of namespace ns on c.
func New(c Client, ns string) *Queue {
	p := "{" + ns + "}:q"
	return &Queue{c: c, ns: ns, keys: keys{
		stream: p, inputs: p + ":inputs", stats: p + ":stats", rate: p + ":rate", workers: p + ":workers",
	}}
}

// ensureGroup creates the stream and its consumer group, from the stream's
// start, unless they exist.
func (q *Queue) ensureGroup(ctx context.Context) error {
	err := q.c.XGroupCreateMkStream(ctx, q.keys.stream, Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("workqueue: creating the group: %w", err)
	}
	return nil
}

// ErrNoGroup is wrapped by Status's error when nothing was ever enqueued
// in the namespace, nor any worker started there.
var ErrNoGroup = errors.New("workqueue: no queue in this namespace")

// Flags of a long line, in the entry's field f.
const (
	flagLong       = "l"  // longer than a Scanner keeps
	flagLongAtPast = "la" // and an "@" past its kept start
)

// rateBucketSeconds is the width of the buckets of acknowledged lines
// that the rate is computed from (rateBucket in the scripts).
const (
	rateBucketSeconds = 10
	rateBucket        = "10"
)

// enqueueScript adds a batch of lines of one input past the last line
// enqueued from it, and counts them. KEYS: stream, inputs, stats. ARGV:
// input, then (number, text, flags) for each line, numbers rising.
var enqueueScript = goredis.NewScript(`
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
local top, added = last, 0
for i = 2, #ARGV, 3 do
  local n = tonumber(ARGV[i])
  if n > top then
    if ARGV[i+2] == '' then
      redis.call('XADD', KEYS[1], '*', 'i', ARGV[1], 'n', ARGV[i], 't', ARGV[i+1])
    else
      redis.call('XADD', KEYS[1], '*', 'i', ARGV[1], 'n', ARGV[i], 't', ARGV[i+1], 'f', ARGV[i+2])
    end
    top, added = n, added + 1
  end
end
if top > last then redis.call('HSET', KEYS[2], ARGV[1], top) end
if added > 0 then redis.call('HINCRBY', KEYS[3], 'enqueued', added) end
return added`)

// ackScript acknowledges and deletes entries, counting those that were
// still in the stream as done (and failed), and in the rate's bucket of
// now on the Redis clock. An entry leaves the stream once (here, or put
// back as a new one by returnScript), so the count is of lines, however
// many workers fetched them; being pending is not asked, for a failover
// may have lost the take (XACK finds nothing) and not the line. KEYS:
// stream, stats, rate. ARGV: group, then (id, ok "1" or "0") for each
// entry.
var ackScript = goredis.NewScript(`
local done, failed = 0, 0
for i = 2, #ARGV, 2 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    done = done + 1
    if ARGV[i+1] == '0' then failed = failed + 1 end
  end
end
if done > 0 then
  redis.call('HINCRBY', KEYS[2], 'done', done)
  if failed > 0 then redis.call('HINCRBY', KEYS[2], 'failed', failed) end
  local now = redis.call('TIME')
  redis.call('HINCRBY', KEYS[3], math.floor(tonumber(now[1]) / ` + rateBucket + `), done)
end
return done`)

// returnScript puts entries that consumer holds back at the queue's end,
// for any worker to take at once: each is added again as a new entry and
// the old one acknowledged and deleted. An entry another worker has
// claimed meanwhile is left to it. KEYS: stream. ARGV: group, consumer,
// then the ids.
var returnScript = goredis.NewScript(`
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    local e = redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i])
    if e[1] then
      redis.call('XADD', KEYS[1], '*', unpack(e[1][2]))
      n = n + 1
    end
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
    redis.call('XDEL', KEYS[1], ARGV[i])
  end
end
return n`)

// beatScript is a worker's heartbeat: it says the worker lives for three
// beats from now (on the Redis clock, as every time of the queue is),
// resets the idle time of the entries it holds (those no other worker has
// claimed), so that nobody claims a line it is still fetching, and drops
// workers gone for an hour and rate buckets older than two minutes. It
// returns the ids held that are no longer the worker's (another claimed
// them, or they were acknowledged). KEYS: stream, workers, rate. ARGV:
// group, consumer, the beat (ms), then the ids held.
var beatScript = goredis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now + 3 * tonumber(ARGV[3]), ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - 3600000)
local old = math.floor(now / 1000 / ` + rateBucket + `) - 12
for _, b in ipairs(redis.call('HKEYS', KEYS[3])) do
  local k = tonumber(b)
  if k == nil or k < old then redis.call('HDEL', KEYS[3], b) end
end
local lost = {}
for i = 4, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost`)
