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
// transport.go (routes, gateways, the transports), classify.go,
// failure.go and stderror.go (an attempt's error), collect.go (the report
// as a run builds it), and config.go, retry.go, body.go, redirect.go,
// request.go, hostdown.go, queue.go, renew.go, ban.go and clock.go.
package fetch
