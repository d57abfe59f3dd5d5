package redis

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/fetch-dev/fetch/limits/redis/redistest"
)

// TestParseTarget: the --redis forms, and values that do not parse, each
// an error naming the problem that shows no part of the password (which
// is "Pa55" or holds "Pa55" in every case below).
func TestParseTarget(t *testing.T) {
	env := func(k string) string {
		if k == PasswordEnv {
			return "fromenv"
		}
		return ""
	}
	for _, tc := range []struct {
		name   string
		in     []string
		kind   Kind
		addrs  []string
		pass   string
		db     int
		tls    bool
		master string
		shown  string
	}{
		{"bare", []string{"127.0.0.1:7000"}, KindServer, []string{"127.0.0.1:7000"}, "fromenv", 0, false, "", "redis://127.0.0.1:7000"},
		{"default port", []string{"redis://h"}, KindServer, []string{"h:6379"}, "fromenv", 0, false, "", "redis://h:6379"},
		{"password and db", []string{"redis://u:Pa55@h:1/2"}, KindServer, []string{"h:1"}, "Pa55", 2, false, "", "redis://***@h:1/2"},
		{"encoded", []string{"rediss://:Pa55%2Fw%40rd@h:1"}, KindServer, []string{"h:1"}, "Pa55/w@rd", 0, true, "", "rediss://***@h:1"},
		{"query password", []string{"redis://h:1?password=Pa55&db=3"}, KindServer, []string{"h:1"}, "Pa55", 3, false, "", "redis://h:1"},
		{"unix", []string{"/tmp/r.sock"}, KindServer, []string{"/tmp/r.sock"}, "fromenv", 0, false, "", "unix:///tmp/r.sock"},
		{"unix url", []string{"unix:///tmp/r.sock?db=1"}, KindServer, []string{"/tmp/r.sock"}, "fromenv", 1, false, "", "unix:///tmp/r.sock"},
		{"ipv6", []string{"redis://[::1]:7000"}, KindServer, []string{"[::1]:7000"}, "fromenv", 0, false, "", "redis://[::1]:7000"},
		{"cluster", []string{"redis://:Pa55@a:1", "redis://:Pa55@b:2"}, KindCluster, []string{"a:1", "b:2"}, "Pa55", 0, false, "", "redis://***@a:1 redis://***@b:2"},
		{"sentinel", []string{"redis+sentinel://:Pa55@s1,s2:26380/mymaster"}, KindSentinel, []string{"s1:26379", "s2:26380"}, "Pa55", 0, false, "mymaster", "redis+sentinel://***@s1:26379,s2:26380/mymaster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg, err := ParseTarget(tc.in, env)
			if err != nil {
				t.Fatal(err)
			}
			if tg.Kind != tc.kind || !slices.Equal(tg.Addrs, tc.addrs) || tg.Password != tc.pass || tg.DB != tc.db || tg.TLS != tc.tls || tg.Master != tc.master {
				t.Errorf("got %+v", *tg)
			}
			if tg.String() != tc.shown {
				t.Errorf("shown as %q, want %q", tg, tc.shown)
			}
		})
	}
	for _, tc := range []struct {
		name string
		in   []string
		want string // in the message
	}{
		{"empty", []string{""}, "empty"},
		{"slash in password", []string{"redis://user:Pa55/word@127.0.0.1:1"}, "percent-encoded"},
		{"quote in password", []string{`redis://user:Pa"55@127.0.0.1:1`}, "percent-encoded"},
		{"tab in password", []string{"redis://user:Pa\t55@127.0.0.1:1"}, "control character"},
		{"bad escape", []string{"redis://user:Pa55%zz@127.0.0.1:1"}, "percent-encoding"},
		{"unknown option", []string{"redis://127.0.0.1:1?password=Pa55&pool=Pa55"}, `unknown option "pool"`},
		{"bad port", []string{"redis://:Pa55@127.0.0.1:99999"}, "port"},
		{"bad db", []string{"redis://:Pa55@127.0.0.1:1/x"}, "database"},
		{"scheme", []string{"http://:Pa55@127.0.0.1:1"}, "unknown scheme"},
		{"two hosts", []string{"redis://:Pa55@a:1,b:2"}, "Cluster"},
		{"cluster of sentinel", []string{"redis://:Pa55@a:1", "redis+sentinel://b/m"}, "Cluster"},
		{"cluster creds", []string{"redis://:Pa55@a:1", "redis://:Pa56@b:1"}, "differ"},
		{"sentinel master", []string{"redis+sentinel://:Pa55@a:1"}, "MASTER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTarget(tc.in, nil)
			if !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrBadURL saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Pa55") {
				t.Errorf("the message shows the password: %v", err)
			}
		})
	}
}

// TestTLSMismatch: rediss:// to a plain server, and redis:// to a TLS one,
// fail naming the mismatch, not with "context deadline exceeded".
func TestTLSMismatch(t *testing.T) {
	plain := redistest.StartTCP(t)
	secure := redistest.StartTLS(t)
	for _, tc := range []struct{ url, want string }{
		{"rediss://" + plain.Addr, "speaks plain Redis, not TLS"},
		{"redis://" + secure.Addr, "speaks TLS"},
	} {
		tg, err := ParseTarget([]string{tc.url}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(context.Background(), tg)
		if err == nil {
			c.Close()
			t.Fatalf("%s: Dial succeeded", tc.url)
		}
		if !strings.Contains(err.Error(), "TLS mismatch") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want the TLS mismatch named", tc.url, err)
		}
	}
	// And TLS to the TLS server works, its certificate unchecked.
	tg, err := ParseTarget([]string{secure.URL + "?skip_verify=true"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(context.Background(), tg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
