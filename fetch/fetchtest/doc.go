// Package fetchtest starts real servers on loopback for exercising fetch:
// target sites whose behaviour is chosen by the URL query (size, status,
// delays, slow bodies, planned failures, redirects, echo), HTTP and HTTPS
// forward proxies, SOCKS5 proxies backed by the microsocks binary, and a
// raw server (Raw) that answers with any bytes it is given.
//
// The servers are real because the behaviour under test is real: connection
// reuse, CONNECT tunnels, TLS handshakes, slow bodies and per-proxy
// concurrency only show up faithfully on real sockets. Each proxy dials
// targets from its own loopback source address (see LoopbackIP), so a
// Target can count requests in flight per proxy (Target.MaxInFlightFrom).
//
// The target and the HTTP proxies are those of internal/loopback, which
// `fetch demo` uses, extended with what only tests need: TLS, proxy
// authentication, sick proxies, request counters, hang=1, /echo and the
// redirect paths, SOCKS5 and the fault servers (see Faults). The binary
// never imports fetchtest.
//
// The package does not import "testing": it is used by tests and
// benchmarks. Constructors return errors; every server has a Close
// method that stops all of its goroutines and closes all of its connections
// before it returns, so callers can check for leaks with goleak.
//
// All types are safe for concurrent use.
package fetchtest
