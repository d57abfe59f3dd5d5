package redis

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Client is a connection to what a Target names: *goredis.Client for one
// server or a Sentinel's master, *goredis.ClusterClient for a Cluster.
type Client = goredis.UniversalClient

// dialTimeout bounds Dial's first answer from the server.
const dialTimeout = 5 * time.Second

// Dial connects to t and checks that it answers, within ctx and 5 seconds.
// A single server that reports cluster_enabled:1 is used as a Cluster's
// seed. Errors name the target as t.String() does, never its password; a
// server that speaks TLS to a redis:// URL, or plain Redis to a rediss://
// one, is named as such.
func Dial(ctx context.Context, t *Target) (Client, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	c := newClient(t)
	err := c.Ping(ctx).Err()
	if err == nil && t.Kind == KindServer && t.Network == "tcp" {
		var cluster bool
		cluster, err = clusterEnabled(ctx, c)
		if err == nil && cluster {
			_ = c.Close()
			ct := *t
			ct.Kind = KindCluster
			c = newClient(&ct)
			err = c.Ping(ctx).Err()
		}
	}
	if err != nil {
		_ = c.Close()
		if why := tlsMismatch(t); why != "" {
			return nil, fmt.Errorf("limits/redis: cannot reach Redis at %s: %s", t, why)
		}
		return nil, fmt.Errorf("limits/redis: cannot reach Redis at %s: %s", t, clean(err, t))
	}
	return c, nil
}

// newClient makes the client for t. Commands are not retried by go-redis
// (the scheduler retries what is safe to retry), and a call's context
// bounds its socket reads and writes too: without that, go-redis waits for
// a server that hangs until its ReadTimeout (3s), whatever the scheduler's
// timeout of a call (LeaseTTL/6). Cluster redirections (MOVED, ASK) are
// followed up to 8 times a command.
func newClient(t *Target) Client {
	var tc *tls.Config
	if t.TLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.Insecure}
		if t.Network == "tcp" && t.Kind != KindSentinel {
			tc.ServerName, _, _ = net.SplitHostPort(t.Addrs[0])
		}
	}
	switch t.Kind {
	case KindCluster:
		return goredis.NewClusterClient(&goredis.ClusterOptions{
			Addrs: t.Addrs, Username: t.Username, Password: t.Password, TLSConfig: tc,
			MaxRetries: -1, MaxRedirects: 8, ContextTimeoutEnabled: true,
		})
	case KindSentinel:
		return goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName: t.Master, SentinelAddrs: t.Addrs, Username: t.Username, Password: t.Password,
			DB: t.DB, TLSConfig: tc, MaxRetries: -1, ContextTimeoutEnabled: true,
		})
	}
	return goredis.NewClient(&goredis.Options{
		Network: t.Network, Addr: t.Addrs[0], Username: t.Username, Password: t.Password, DB: t.DB,
		TLSConfig: tc, MaxRetries: -1, ContextTimeoutEnabled: true,
	})
}

// clusterEnabled reports whether the server c talks to is a Cluster node.
func clusterEnabled(ctx context.Context, c Client) (bool, error) {
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		return false, err
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

// tlsMismatch tells, for a server Dial could not use, whether it speaks
// the other protocol than t says: a plain server behind rediss://, a TLS
// one behind redis://. It returns "" when it cannot tell.
func tlsMismatch(t *Target) string {
	if t.Network != "tcp" {
		return ""
	}
	addr := t.Addrs[0]
	d := net.Dialer{Timeout: time.Second}
	if t.TLS {
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			return ""
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write([]byte("PING\r\n")); err != nil {
			return ""
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		if strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH") || strings.HasPrefix(line, "-ERR") {
			return "TLS mismatch: the server speaks plain Redis, not TLS (use redis://, not rediss://)"
		}
		return ""
	}
	conn, err := tls.DialWithDialer(&d, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return ""
	}
	_ = conn.Close()
	return "TLS mismatch: the server speaks TLS (use rediss://, not redis://)"
}

// clean is err's text for a message about t: go-redis's errors name
// addresses but not passwords; one is taken out anyway, should it appear.
func clean(err error, t *Target) string {
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		msg = "no answer within " + dialTimeout.String()
	}
	if t.Password != "" {
		msg = strings.ReplaceAll(msg, t.Password, "***")
	}
	return msg
}
