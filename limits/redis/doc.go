// Package redis is a limits.Scheduler that shares every limit through
// Redis, so that many fetch processes together keep each proxy's, pool's
// and host's concurrency and rate, and the global rate, as one process
// would. Proxy health (benching, the one probe at a time after a bench),
// pushback per proxy-host pair and the least-used counts are shared too.
//
// # Guarantees
//
// Concurrency: an attempt runs under a lease, a member of a sorted set
// scored by its expiry on the Redis clock. One script per attempt chooses
// the proxy by the policy, checks every cap, rate and bench, and takes the
// lease and every token at once, so no cap is exceeded across processes.
// A lease is renewed every TTL/3 while held and released exactly once
// (a second release is harmless). A process that dies holds its permits
// at most until its leases expire: within TTL plus one renewal interval of
// its death, and the next acquire by anyone that would otherwise wait
// sweeps them (others sweep at most every 100ms, or TTL/8).
//
// Rates use GCRA with T = period/N and tolerance τ = T·burst, timed by
// Redis's TIME in microseconds: in any half-open window of length W at
// most burst−1+⌈W/T⌉ attempts are charged a token, across all processes.
// Burst is how many may start at once after a quiet spell; burst 1 means
// evenly spaced charges, so "60/m burst 1" never charges more than 60 in
// any 60s. They are kept by schedule, as limits.GCRA is in one process:
// while attempts of a process wait, it keeps a logical time, when its next
// token comes due, as Redis told it with a wait or with its last grant, and
// sends it with every ask; an ask that arrives within 10ms after that time
// (acquire.lua's LATE) is charged at it, or when its own token came due if
// that is later. The host rate is kept so for each host on its own (one
// time for the global and proxy rates, one for each host whose attempts
// wait), and the process does not ask for a host's waiters before its
// token comes due. So neither the lateness of a process's timer nor its round
// trips add up over a run, whether it waits between tokens or asks for the
// next while the last is still on its way. An attempt starts at most that
// much after its charge, and a process that stalled catches up by at most
// that much: after a stall of L ≤ 10ms, up to about L/T more attempts than
// the burst may start at once. An Acquire that finds none of its process
// waiting is charged when it reaches Redis. While the global rate holds
// every waiter back, a process does not ask before its next token comes due
// (a grant's reply and a wait tell when). A process's waiters ask together:
// one call tries up to 16 of them in the queue's order, all charged from
// the process's logical time (each limiter's token at the later of that
// time and when the token came due, so that after a grant on one proxy the
// next waiter is charged on schedule whether it goes to the same proxy or
// another), and starts every one whose limits allow, so a round trip longer
// than a token's period does not hold a rate to one start a round trip. Under host limits a call asks for at most one
// more of a host's waiters than its limits may let start (its burst and the
// tokens of a late ask, or its concurrency cap), so that a busy host's
// waiters do not fill the calls while other hosts' wait behind them.
//
// Client clocks do not matter: a process's clock only schedules its own
// renewals and timers.
//
// # Failing closed
//
// With Redis unreachable nothing new starts anywhere. Acquire keeps
// waiting, backing off with jitter, and when its context ends returns an
// error wrapping limits.ErrCoordinator and the context's error. Attempts
// in flight go on while their lease may still be valid: a lease whose
// renewals keep failing is lost 3/4 of a TTL after its last successful
// renewal, and Lease.Lost is closed so that the attempt is cancelled.
//
// Redis restarted without its data (or failed over to a replica that lacks
// it): the scripts find the namespace's epoch missing, and the first
// process to notice installs the limits again under a new epoch that
// refuses acquires for one lease TTL (or the longest burst tolerance, if
// longer). Meanwhile every process still holding a lease registers it
// again with its next renewal, so that when acquires resume the counts
// include it. An outage longer than about half a TTL loses the leases in
// flight instead (their attempts are cancelled). A process that had never
// seen the old epoch and is the first to reach the empty Redis cannot tell
// a restart from a new namespace, so it goes by Redis's uptime: when Redis
// started less than one grace ago, acquires wait until one grace after its
// start, and holders register their leases again meanwhile. A namespace
// emptied by hand (FLUSHALL, DEL) on a Redis up for longer is taken for a
// new one: empty a namespace only when no process uses it.
//
// # Namespaces and agreement
//
// All keys of a namespace share the hash tag {namespace}, so a namespace
// lives in one Redis Cluster slot. Its small state (per proxy, budget,
// host and lease) is the fields of one hash, which a call reads in one or
// two HMGETs and writes back in one HSET and one HDEL; budgets with room
// are indexed in one sorted set by the policy's order and the proxies of
// pools of several in another, so an acquire looks at the first
// Options.Candidates budgets and proxies, never at all of them. An
// acquire and its release cost Redis about 13 commands between them when
// each is a call of its own. A process sends its releases, and its
// acquires that find none of it waiting, by group commit: those that come
// while a call of their kind is on its way go together in the next, so
// that under load a call carries several, and Redis runs a call's own
// part (its network round, the header, the namespace's fields read and
// written back) once for them.
//
// # Scripts and functions
//
// On Redis 7 and later the scripts are loaded as the functions of one
// library (FUNCTION LOAD, on every master of a Cluster) and called with
// FCALL; a call that finds the library missing loads it again. A script
// called with EVALSHA makes every function of its code again at each call,
// a fifth of its cost; a library's are made once. Before Redis 7, or for a
// user who may not load functions, the same code runs as scripts.
// Processes of one namespace must have the same limits: New stores a
// canonical text of them (with the lease TTL) and refuses, with
// ErrConflict naming the first difference, a process whose limits differ.
//
// # Differences from limits.Local
//
// Drain does not hold requests back from slow proxies at the end of a run.
// Least-inflight orders budgets by their load and, within a pool, proxies
// by their own attempts in flight. The policy looks at the first
// Options.Candidates budgets only: if those are all rate-limited, the
// acquire waits for the soonest of them although one further down might
// start now. Events reports the changes of proxy state this process's
// outcomes caused, not other processes'. A host that has banned every
// proxy fails (limits.HostBannedError) for every process; a proxy that
// leaves the run (rejected) is counted out of a host's bans at that
// host's next ban, not at once, and only a success of an attempt granted
// while the host had bans lifts a proxy's ban. A host-wide Retry-After is
// kept in Redis and read by the acquire that would grant the attempt.
package redis
