// Package fetch is the engine: it reads URL lines (with fetch/input), turns
// them into jobs, runs each job's attempts through the proxy that can start
// it soonest within every limit (limits), traces the phases of each
// attempt, retries, classifies failures, and writes one record per URL
// line (fetch/results) plus a report (fetch/report). Plain http:// requests
// go through its own HTTP/1.1 client (internal/h1, with internal/dialer),
// the rest through net/http.
//
// Its files follow its parts: engine.go (Engine, New), run.go (Run's
// stages: reader, workers, writer; stopping), attempt.go (a job's attempts
// and what they say of the proxy), trace.go and hooks.go (the tracker: an
// attempt's phases and timers, and the hooks it is told through),
// transport.go (routes, gateways, the transports), failure.go (an
// attempt's error as a record has it), proxystatus.go (what a proxy's
// answer says, applied to an attempt), facts.go (what the tracker keeps
// of a response), collect.go (the report as a run builds it), and
// config.go, retry.go, body.go, request.go, hostdown.go, queue.go,
// ban.go, observe.go and clock.go.
//
// Jobs of their own are packages beside it: fetch/errkind (the kind of a
// failure), fetch/proxystatus (what a proxy's Proxy-Status or
// X-Squid-Error says; its parser is internal/sfv), fetch/facts (a
// record's response facts), fetch/savedir (bodies in --save-dir),
// internal/follow (the client that follows redirects), internal/h2tunnel
// (HTTP/2 per tunnel), internal/renew (the renewed transports) and
// internal/boundcopy (a body copied within a bound).
package fetch
