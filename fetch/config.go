package fetch

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"time"

	"github.com/fetch-dev/fetch/fetch/input"
	"github.com/fetch-dev/fetch/fetch/report"
	"github.com/fetch-dev/fetch/fetch/results"
	"github.com/fetch-dev/fetch/internal/clock"
	"github.com/fetch-dev/fetch/limits"
	"github.com/fetch-dev/fetch/proxies"
)

// Defaults, as the command-line contract fixes them.
const (
	DefaultConcurrency      = 64
	DefaultProxyConcurrency = 4
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHeaderTimeout    = 30 * time.Second
	DefaultIdleTimeout      = 30 * time.Second
	DefaultTimeout          = 60 * time.Second
	DefaultRetries          = 2
	DefaultRetryBackoff     = 200 * time.Millisecond
	DefaultMaxRedirects     = 10
	DefaultMaxBody          = 64 << 20
	DefaultMaxHeader        = 100 << 10 // near curl's limit on response headers
	DefaultGrace            = 5 * time.Second
	DefaultPoolWait         = 2 * time.Minute
	DefaultMaxFailures      = 5
	DefaultCooldown         = 30 * time.Second
	DefaultCooldownMax      = 10 * time.Minute
	DefaultPushbackDelay    = time.Second
	DefaultPushbackMax      = time.Minute
	DefaultRetryAfterMax    = 5 * time.Minute
	DefaultBanScan          = 64 << 10
	DefaultHostMaxFailures  = 30
	DefaultMaxRequestBody   = input.DefaultMaxRequestBody
)

// DefaultRetryStatus lists the statuses retried by default.
var DefaultRetryStatus = []int{429, 502, 503, 504}

// maxHeader is the limit on response headers in force.
func (c *Config) maxHeader() int64 {
	if c.MaxHeader <= 0 {
		return DefaultMaxHeader
	}
	return c.MaxHeader
}

// bannedStatus reports whether a response with status code is a ban by
// --ban-status.
func (c *Config) bannedStatus(code int) bool { return slices.Contains(c.BanStatus, code) }

// tooLarge reports whether a body of length bytes is over --max-body.
func (c *Config) tooLarge(length int64) bool { return c.MaxBody > 0 && length > c.MaxBody }

// decidesOnHead reports whether an answer with status code and a body of
// length is decided on its head, with none of its body read: a ban by
// --ban-status, or possibly by --ban-match in its headers, or a body over
// --max-body (see Engine.respond).
func (c *Config) decidesOnHead(code int, length int64) bool {
	return c.bannedStatus(code) || c.BanMatch != nil || c.tooLarge(length)
}

// Config is everything a run needs. The zero value is not usable: start from
// DefaultConfig and change what you need.
type Config struct {
	Concurrency int // jobs in flight at once, all proxies together

	Proxies          []proxies.Proxy // none: requests go direct
	ProxyConcurrency int             // per proxy or pool, unless the proxy line says otherwise
	ProxyRate        limits.Rate     // per proxy or pool; zero is unlimited
	ProxyBurst       int
	HostConcurrency  int // per target host:port; 0 is unlimited
	HostRate         limits.Rate
	HostBurst        int
	Rate             limits.Rate   // all attempts together, burst 1
	Policy           limits.Policy // tie-break between proxies; the zero value is least-inflight

	// Proxy health: after ProxyMaxFailures consecutive failures that are
	// the proxy's fault a proxy is benched for ProxyCooldown, doubling on
	// each relapse up to ProxyCooldownMax. 0 failures: never bench.
	ProxyMaxFailures int
	ProxyCooldown    time.Duration
	ProxyCooldownMax time.Duration
	// Pushback: a 429 or 503 through a proxy narrows the window of that
	// proxy's attempts in flight to that host, halving it on each; once it
	// is down to one, it spaces their starts PushbackDelay apart, doubling
	// up to PushbackMax. Each success undoes one step. 0 delay: never.
	PushbackDelay time.Duration
	PushbackMax   time.Duration
	// RetryAfterMax: when one host answers 429 or 503 with a Retry-After
	// through two or more proxies within a minute, every proxy's attempts
	// to it wait until the time given, at most this long. 0: never.
	RetryAfterMax time.Duration

	// ProxyRotate is when connections to a proxy are replaced, unless its
	// line says (rotate=): RotateNever (the zero value RotateDefault too)
	// keeps them alive; RotateRequest opens a new one, and a new tunnel,
	// for every attempt, so that a rotating gateway gives a new exit each
	// time.
	ProxyRotate proxies.Rotation

	// Bans: a response whose status is in BanStatus, or where BanMatch
	// matches its status line and headers or the first BanScan bytes of
	// its body, is a ban of that proxy by that host. The URL is retried
	// on another proxy, the pair slows down as on pushback, a proxy
	// banned by limits.BanHosts hosts in a row is benched, and a URL
	// whose last attempt was a ban fails with kind banned. A host that
	// has banned every proxy not rejected, with no success through it
	// since, has its waiting and remaining URLs fail at once with kind
	// banned, phase queue (limits.HostBannedError).
	BanStatus []int
	BanMatch  *regexp.Regexp
	BanScan   int64 // 0 is DefaultBanScan

	// HostMaxFailures: after that many attempts in a row to one host
	// failed before any response (dns, refused, connect timeout, tls;
	// through a proxy only what the proxy reports as the target's
	// failure), the host's other URLs fail at once with kind skipped. Any
	// response resets the count. 0 never skips.
	HostMaxFailures int

	// Scheduler, if set, replaces the in-process scheduler built from the
	// limits above. It must know the proxies in the order of Proxies (one
	// route, index 0, when Proxies is empty). The caller closes it.
	Scheduler limits.Scheduler

	// NewScheduler, if set (and Scheduler is not), builds the scheduler
	// from the configuration New derives from the limits above, in place
	// of the in-process one: the Redis scheduler of distributed mode. The
	// engine closes it.
	NewScheduler func(limits.Config) (limits.Scheduler, error)

	// Shard, if N > 0, takes only the input lines of shard K of N (see
	// input.Shard).
	Shard input.Shard

	ConnectTimeout time.Duration // dns + connect + proxy handshake + tls, one attempt
	HeaderTimeout  time.Duration // request written -> response headers, one attempt
	IdleTimeout    time.Duration // no progress while sending or receiving
	Timeout        time.Duration // everything for one URL
	Retries        int
	RetryBackoff   time.Duration
	RetryStatus    []int

	Method       string
	Header       http.Header // replaces default headers of the same name
	MaxRedirects int         // 0 does not follow
	MaxBody      int64
	// MaxRequestBody is the largest body a JSON request line may carry
	// (input.Request); 0 is DefaultMaxRequestBody.
	MaxRequestBody int64
	MaxHeader      int64 // most bytes of response headers, status line included; 0 is DefaultMaxHeader
	SaveDir        string
	Insecure       bool
	RootCAs        *x509.CertPool // nil: the system pool; trusted for targets and https proxies

	// RecordHeaders names the response headers a record copies (any
	// case); RecordAllHeaders copies every one. Either way a record holds
	// at most MaxRecordedHeaders bytes of them (see Record.Headers).
	RecordHeaders    []string
	RecordAllHeaders bool
	// RecordHash adds the hex SHA-256 of each body read whole to its
	// record, hashed as it is read.
	RecordHash bool

	// ListDropped, when set, is called by New once the engine holds no
	// reference to Proxies, before it builds the scheduler (see New).
	ListDropped func()

	// Transport is which client sends the requests: TransportFast (the
	// zero value) sends plain http:// requests, direct and through http://
	// proxies, on fetch's own HTTP/1.1 client and the rest on net/http;
	// TransportStd sends every request on net/http. Records are the same
	// on both but for timings: std is the fallback for a server the fast
	// path misreads, and the reference the fast path is tested against.
	Transport Transport

	Grace time.Duration // how long work in flight may finish after the run is interrupted

	// ReportHosts is how many hosts the report lists with their own counts,
	// the busiest (see Report); 0 lists none, every host goes to
	// Report.HostsOther. DefaultConfig sets report.DefaultHosts.
	ReportHosts int

	// ReportProxies is how many proxies the report lists with their own
	// counts, the busiest (see Report); 0 lists none, every proxy goes to
	// Report.ProxiesOther. DefaultConfig sets report.DefaultProxies.
	ReportProxies int

	// PoolWait is how long every proxy may be unusable (benched or
	// rejected) before the run stops, as on an interrupt, with an error
	// wrapping limits.ErrNoUsableProxy; a pool whose every proxy is
	// rejected stops at once. 0 never stops: URLs wait within their own
	// deadlines.
	PoolWait time.Duration

	// Warn, if set, is told what the user should know at once, such as a
	// proxy that refused its credentials. It is called from the engine's
	// goroutines, at most once per proxy and cause.
	Warn func(msg string)

	// KeepBody, if positive, keeps up to that many bytes of each final
	// attempt's body in Record.Body (which is not written out).
	KeepBody int64

	// Clock is the engine's time source; the zero value is the real clock.
	Clock clock.Clock

	// Done, if set, lists the lines that already have a final record (for
	// --resume): they are skipped without a new record.
	Done *results.DoneSet

	// Observer, if set, is told of every attempt, record and change of a
	// proxy's state as the run goes (see Observer): --metrics.
	Observer Observer

	// renewEvery, when positive, replaces renewFailures: tests set it
	// low to see transports renewed (see renew.Transport).
	renewEvery int64
}

// DefaultConfig returns the configuration the command line starts from.
func DefaultConfig() Config {
	return Config{
		Concurrency:      DefaultConcurrency,
		ProxyConcurrency: DefaultProxyConcurrency,
		ProxyBurst:       1,
		HostBurst:        1,
		Policy:           limits.LeastInFlight,
		ProxyMaxFailures: DefaultMaxFailures,
		ProxyCooldown:    DefaultCooldown,
		ProxyCooldownMax: DefaultCooldownMax,
		PushbackDelay:    DefaultPushbackDelay,
		PushbackMax:      DefaultPushbackMax,
		RetryAfterMax:    DefaultRetryAfterMax,
		ProxyRotate:      proxies.RotateNever,
		BanScan:          DefaultBanScan,
		HostMaxFailures:  DefaultHostMaxFailures,
		ConnectTimeout:   DefaultConnectTimeout,
		HeaderTimeout:    DefaultHeaderTimeout,
		IdleTimeout:      DefaultIdleTimeout,
		Timeout:          DefaultTimeout,
		Retries:          DefaultRetries,
		RetryBackoff:     DefaultRetryBackoff,
		RetryStatus:      append([]int(nil), DefaultRetryStatus...),
		Method:           http.MethodGet,
		MaxRedirects:     DefaultMaxRedirects,
		MaxBody:          DefaultMaxBody,
		MaxRequestBody:   DefaultMaxRequestBody,
		MaxHeader:        DefaultMaxHeader,
		Grace:            DefaultGrace,
		ReportHosts:      report.DefaultHosts,
		ReportProxies:    report.DefaultProxies,
		PoolWait:         DefaultPoolWait,
	}
}

// Transport is which HTTP client an engine sends its requests with (see
// Config.Transport).
type Transport uint8

const (
	TransportFast Transport = iota // fetch's HTTP/1.1 client for plain requests, net/http for the rest
	TransportStd                   // net/http for every request
)

// ParseTransport reads "fast" or "std".
func ParseTransport(s string) (Transport, error) {
	switch s {
	case "fast":
		return TransportFast, nil
	case "std":
		return TransportStd, nil
	}
	return 0, fmt.Errorf("%w %q: want fast or std", ErrBadTransport, s)
}

// ErrBadTransport is wrapped by ParseTransport's errors.
var ErrBadTransport = errors.New("fetch: bad transport")

// String formats t as ParseTransport reads it.
func (t Transport) String() string {
	if t == TransportStd {
		return "std"
	}
	return "fast"
}
