// Package loopback starts the servers that `fetch demo` fetches from: a
// target site whose answers are chosen by the URL query (body size, status,
// delays, slow bodies, planned failures) and HTTP forward proxies with a
// latency and a concurrency cap, all on loopback.
//
// It is part of the binary, so it holds only what the demo needs and nothing
// that tests alone use: fetch/fetchtest builds its test servers (TLS,
// authentication, sick proxies, counters, SOCKS5, fault servers) on top of
// this package through the Wrap and Paths options and Server.
//
// Constructors return errors; every server has a Close method that stops
// all of its goroutines and closes all of its connections before it
// returns. All types are safe for concurrent use.
package loopback
