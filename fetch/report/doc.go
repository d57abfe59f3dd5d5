// Package report is the report of a run: what a run's records and attempts
// add up to (Report: by kind and phase, per proxy and per host, with the
// phases' quantiles), built in memory that does not grow with the number
// of hosts or proxies (the top-k tables that list the busiest, HostTable,
// ProxyStats and ListProxies), and rebuilt from results files by
// Summarize, and printed for people by WriteSummary. The engine's
// collector fills one in as a run goes; fetch summarize rebuilds one
// without an engine.
package report
