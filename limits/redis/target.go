package redis

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Target is where the --redis values point: one server, a Redis Cluster
// (its seed nodes) or the master a Sentinel names. ParseTarget makes one;
// Dial connects to it.
type Target struct {
	Kind     Kind
	Network  string   // "tcp" or "unix"
	Addrs    []string // host:port (or a socket's path); the sentinels' for KindSentinel
	Username string
	Password string // never in any message: see String
	DB       int
	TLS      bool   // rediss:// (or rediss+sentinel://)
	Insecure bool   // ?skip_verify=true: the server's certificate is not checked
	Master   string // KindSentinel: the name of the master the sentinels watch
	shown    []string
}

// Kind is what a Target is.
type Kind int

const (
	// KindServer is one server, or a Cluster node found to have
	// cluster_enabled:1 when Dial connects to it.
	KindServer Kind = iota
	// KindCluster is a Redis Cluster, given by several seed addresses.
	KindCluster
	// KindSentinel is the master that Sentinel names (redis+sentinel://).
	KindSentinel
)

// ErrBadURL is wrapped by the errors of ParseTarget. Their messages name
// the problem and show the value without any part of its password.
var ErrBadURL = errors.New("bad Redis URL")

// PasswordEnv is the environment variable a password is read from when the
// URL has none, as redis-cli reads it: a password there is not shown by ps.
const PasswordEnv = "REDISCLI_AUTH"

// String is the target's address for messages: scheme, "***@" when it has
// user information, the addresses and the database or master, never a
// password or the query.
func (t *Target) String() string { return strings.Join(t.shown, " ") }

// ParseTarget reads the values of --redis, given once or more:
//
//	redis://[user:password@]host[:port][/db]   (port 6379)
//	rediss://...                                TLS
//	unix:///path/to/socket[?db=N]  or  /path/to/socket
//	host:port                                   as redis://host:port
//	redis+sentinel://[:password@]host[:port][,host[:port]...]/MASTER   (port 26379)
//
// Several values are the seed nodes of a Redis Cluster (redis:// or
// rediss://, database 0). The query may hold db, password and
// skip_verify=true. A password left out of the URL is read from getenv's
// REDISCLI_AUTH (getenv may be nil). An empty value, or one that does not
// parse, is an error wrapping ErrBadURL that shows no part of the password.
func ParseTarget(values []string, getenv func(string) string) (*Target, error) {
	if len(values) == 0 {
		return nil, fmt.Errorf("%w: none given", ErrBadURL)
	}
	var t *Target
	for i, v := range values {
		one, err := parseOne(v)
		if err != nil {
			return nil, err
		}
		switch {
		case i == 0:
			t = one
		case one.Kind != KindServer || t.Kind == KindSentinel || one.Network != "tcp" || t.Network != "tcp":
			return nil, fmt.Errorf("%w: several --redis values name the nodes of one Redis Cluster: each redis:// or rediss://, not %s", ErrBadURL, one)
		case one.TLS != t.TLS || one.Username != t.Username || one.Password != t.Password || one.Insecure != t.Insecure:
			return nil, fmt.Errorf("%w: the Redis Cluster nodes %s and %s differ in TLS or credentials", ErrBadURL, t.shown[0], one)
		case one.DB != 0 || t.DB != 0:
			return nil, fmt.Errorf("%w: a Redis Cluster has only database 0", ErrBadURL)
		default:
			t.Kind = KindCluster
			t.Addrs = append(t.Addrs, one.Addrs...)
			t.shown = append(t.shown, one.shown...)
		}
	}
	if t.Password == "" && getenv != nil {
		t.Password = getenv(PasswordEnv)
	}
	return t, nil
}

// parseOne reads one value. It parses by hand, not with url.Parse, whose
// errors quote the whole value, password and all.
func parseOne(v string) (*Target, error) {
	if v == "" {
		return nil, fmt.Errorf("%w: --redis is empty (an unset variable?)", ErrBadURL)
	}
	scheme, rest, ok := strings.Cut(v, "://")
	switch {
	case !ok && strings.HasPrefix(v, "/"):
		scheme, rest = "unix", v
	case !ok:
		scheme, rest = "redis", v
	}
	scheme = strings.ToLower(scheme)
	t := &Target{Network: "tcp"}
	var userinfo string
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		userinfo, rest = rest[:i], rest[i+1:]
	}
	prefix := scheme + "://"
	if userinfo != "" {
		prefix += "***@"
	}
	shown := prefix + cutQuery(rest) // for messages until the whole is known
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w %s: "+format, append([]any{ErrBadURL, shown}, a...)...)
	}
	if i := strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		if i < len(v)-len(rest) {
			return nil, bad("white space or a control character in the user information (the password is not shown; percent-encode it, or give it in %s)", PasswordEnv)
		}
		return nil, bad("white space or a control character")
	}
	if userinfo != "" {
		if c := strings.IndexFunc(userinfo, func(r rune) bool { return !userinfoChar(r) }); c >= 0 {
			return nil, bad("the user information holds a character that must be percent-encoded (the password is not shown; or give it in %s)", PasswordEnv)
		}
		user, pass, _ := strings.Cut(userinfo, ":")
		var err1, err2 error
		t.Username, err1 = url.PathUnescape(user)
		t.Password, err2 = url.PathUnescape(pass)
		if err1 != nil || err2 != nil {
			return nil, bad("bad percent-encoding in the user information (the password is not shown)")
		}
	}
	rest, query, _ := strings.Cut(rest, "?")
	switch scheme {
	case "redis", "rediss", "redis+sentinel", "rediss+sentinel":
	case "unix":
		t.Network = "unix"
	default:
		return nil, bad("unknown scheme %q: want redis://, rediss://, unix:// or redis+sentinel://", scheme)
	}
	t.TLS = strings.HasPrefix(scheme, "rediss")
	hosts, path, _ := strings.Cut(rest, "/")
	if err := t.readQuery(query); err != nil {
		return nil, bad("%v", err)
	}
	if t.Network == "unix" {
		if hosts != "" || path == "" {
			return nil, bad("want unix:///path/to/socket")
		}
		t.Addrs = []string{"/" + path}
		t.shown = []string{prefix + "/" + path}
		return t, nil
	}
	sentinel := strings.HasSuffix(scheme, "+sentinel")
	port := "6379"
	if sentinel {
		t.Kind, port = KindSentinel, "26379"
	}
	for _, h := range strings.Split(hosts, ",") {
		addr, err := hostPort(h, port)
		if err != nil {
			return nil, bad("%v", err)
		}
		t.Addrs = append(t.Addrs, addr)
	}
	if len(t.Addrs) > 1 && !sentinel {
		return nil, bad("one host:port; several --redis values name the nodes of a Redis Cluster")
	}
	switch {
	case sentinel:
		if path == "" || strings.Contains(path, "/") {
			return nil, bad("want redis+sentinel://host:port[,host:port...]/MASTER")
		}
		t.Master = path
	case path != "":
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 {
			return nil, bad("the path is the database number: want /0, /1, ...")
		}
		t.DB = db
	}
	t.shown = []string{prefix + strings.Join(t.Addrs, ",") + "/" + path}
	if path == "" {
		t.shown[0] = strings.TrimSuffix(t.shown[0], "/")
	}
	return t, nil
}

// readQuery takes the options a query may hold: db, password and
// skip_verify. An unknown one is named, never its value.
func (t *Target) readQuery(query string) error {
	if query == "" {
		return nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return errors.New("the query does not parse")
	}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "db":
			db, err := strconv.Atoi(v)
			if err != nil || db < 0 {
				return errors.New("db: want a database number")
			}
			t.DB = db
		case "password":
			t.Password = v
		case "skip_verify":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("skip_verify: want true or false")
			}
			t.Insecure = b
		default:
			return fmt.Errorf("unknown option %q in the query: want db, password or skip_verify", k)
		}
	}
	return nil
}

// hostPort checks host[:port] and adds the default port.
func hostPort(h, port string) (string, error) {
	if h == "" {
		return "", errors.New("no host")
	}
	host, p, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "[") {
			return "", errors.New("an IPv6 address goes in brackets: [::1]:6379")
		}
		host, p = strings.Trim(h, "[]"), port
	}
	n, err := strconv.Atoi(p)
	if host == "" || err != nil || n < 1 || n > 65535 {
		return "", errors.New("want host:port with a port from 1 to 65535")
	}
	return net.JoinHostPort(host, p), nil
}

// cutQuery drops a query, which may hold a password, from s.
func cutQuery(s string) string {
	s, _, _ = strings.Cut(s, "?")
	return s
}

// userinfoChar reports whether r may stand unencoded in a URL's user
// information (RFC 3986: unreserved, sub-delims, ':' and '%').
func userinfoChar(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return true
	}
	return strings.ContainsRune("-._~!$&'()*+,;=:%", r)
}
