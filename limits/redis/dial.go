package redis

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Dial connects to the Redis server named by rawURL and checks that it
// answers. It accepts redis://[user:password@]host:port[/db],
// rediss://… (TLS), unix:///path/to/socket[?db=N] and a bare host:port. It
// returns the client, the server's address for messages (never with a
// password), and an error naming that address if the server does not
// answer within ctx or 5 seconds.
func Dial(ctx context.Context, rawURL string) (*goredis.Client, string, error) {
	u := rawURL
	if !strings.Contains(u, "://") {
		if strings.HasPrefix(u, "/") {
			u = "unix://" + u
		} else {
			u = "redis://" + u
		}
	}
	addr := Redact(u)
	opt, err := goredis.ParseURL(u)
	if err != nil {
		return nil, addr, fmt.Errorf("limits/redis: bad Redis URL %s: %s", addr, strings.ReplaceAll(err.Error(), rawURL, addr))
	}
	opt.MaxRetries = -1 // the scheduler retries what is safe to retry
	// A call's context bounds its socket reads and writes too: without
	// this, go-redis waits for a server that hangs until its ReadTimeout
	// (3s), whatever the scheduler's timeout of a call (LeaseTTL/6).
	opt.ContextTimeoutEnabled = true
	c := goredis.NewClient(opt)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, addr, fmt.Errorf("limits/redis: cannot reach Redis at %s: %v", addr, err)
	}
	return c, addr, nil
}

// Redact returns a Redis URL without its password, for messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if i := strings.LastIndex(rawURL, "@"); i >= 0 {
			return "redacted@" + rawURL[i+1:]
		}
		return rawURL
	}
	if u.User != nil {
		u.User = url.User(u.User.Username())
		if u.User.Username() == "" {
			u.User = nil
		}
	}
	return u.String()
}
