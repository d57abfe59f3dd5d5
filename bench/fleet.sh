#!/usr/bin/env bash
# bench/fleet.sh: what one Redis costs and serves when several fetch
# processes share their limits through it, side by side for git revisions.
#
#   bench/fleet.sh [-n URLS] [-p PROCS] [-r REPEATS] [REV...]
#
#   -n URLS     URLs of 1 KiB from the Go target of bench/loopback (20000)
#   -p PROCS    processes of the fleet case, at least 2 (4)
#   -r REPEATS  rounds; each REV once a round, in turn, the first REV of a
#               round moving on by one from round to round (3)
#   REV...      git revisions, each built in a worktree of its own (default:
#               the work tree)
#
# Each REV in each round gets servers of its own, on free loopback ports,
# stopped after it: a redis-server keeping nothing (--save ''), 4 tinyproxy
# and the Go target. After a warm-up of 1000 URLs, not counted, it runs the
# cases, each the same N URLs through the 4 proxies (--proxy-concurrency 16
# each, -c 64, --retries 0), the Redis ones once the redis-server has been
# up for 12 s (on a younger one fetch holds its starts for a lease TTL, as
# after a Redis restarted empty):
#
#   no redis     one process without --redis
#   1 process    one process with --redis
#   P processes  P processes at once, --shard k/P of the list, all with
#                --redis on one namespace (one limit of 64 in flight for all)
#
# Before a Redis case, FLUSHALL and CONFIG RESETSTAT; after it, INFO. A row
# per case and round gives: URLs/s (N over the wall time of the case, start
# of the first process to exit of the last), the fetch processes' CPU per URL
# (user+sys), Redis's commands per URL (INFO commandstats: every command but
# fcall, evalsha, eval, function, info, config, flushall, hello, client,
# ping, subscribe, so the ones the Lua scripts run), script calls (fcall on
# Redis 7 and later, evalsha before) per URL, Redis's CPU
# per URL (used_cpu_user+used_cpu_sys) and its busy share (its CPU seconds
# over the case's wall seconds: the share of its one thread), and whether
# the records files hold exactly one record per URL. The table at the end
# gives each REV's medians [min..max] over the rounds, the ratios of "1
# process" to "no redis" (wall time and client CPU, taken round by round)
# and of P processes' URLs/s to one's, and with 2 REVs or more a column of
# the last REV's medians over the first's.
#
# Loopback only; every run is bounded by its URL count and by a timeout of
# 300 s. With the defaults, 2 REVs take about 4 minutes on a 2-core VM
# (3m46s, of which 27 s of builds, on 7 December 2026), 1 REV 2 minutes.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
n=20000 procs=4 repeats=3
while getopts n:p:r:h opt; do
	case "$opt" in
	n) n="$OPTARG" ;;
	p) procs="$OPTARG" ;;
	r) repeats="$OPTARG" ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
for v in "$n" "$procs" "$repeats"; do
	case "$v" in '' | *[!0-9]* | 0*) echo "fleet.sh: -n, -p and -r take positive whole numbers" >&2; exit 2 ;; esac
done
[ "$procs" -ge 2 ] || { echo "fleet.sh: -p takes 2 or more" >&2; exit 2; }
revs=("$@")
[ ${#revs[@]} -gt 0 ] || revs=("")

for tool in redis-server redis-cli tinyproxy curl awk timeout; do
	command -v "$tool" >/dev/null || {
		echo "fleet.sh: $tool is not installed (tinyproxy: bench/setup.sh, or apt-get install tinyproxy)" >&2
		exit 1
	}
done
root="$(cd "$(dirname "$0")/.." && pwd)"
for rev in "${revs[@]}"; do
	[ -z "$rev" ] || git -C "$root" rev-parse -q --verify "$rev^{commit}" >/dev/null ||
		{ echo "fleet.sh: $rev is not a revision of $root" >&2; exit 2; }
done

c=64 pc=16 nproxy=4 warm=1000
if [ -d /dev/shm ] && [ -w /dev/shm ]; then work="$(mktemp -d /dev/shm/fetch-fleet.XXXXXX)"; else work="$(mktemp -d)"; fi
chmod 755 "$work"
LOOPBACK_PID=
srv_pids=()
trees=()
cleanup() {
	bench_stop "${srv_pids[@]}"
	local t
	for t in "${trees[@]}"; do git -C "$root" worktree remove --force "$t" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
started="$(date +%s)"

# Builds: fetch for each REV (as bench/ab.sh does), the loopback helper
# from the work tree.
labels=()
for i in "${!revs[@]}"; do
	rev="${revs[i]}"
	if [ -z "$rev" ]; then
		labels+=("work tree")
		(cd "$root" && CGO_ENABLED=0 go build -o "$work/fetch$i" .)
		continue
	fi
	short="$(git -C "$root" rev-parse --short "$rev^{commit}")"
	if [ "$short" = "$rev" ]; then labels+=("$rev"); else labels+=("$rev=$short"); fi
	trees+=("$work/tree$i")
	git -C "$root" worktree add -q --detach "$work/tree$i" "$rev"
	(cd "$work/tree$i" && CGO_ENABLED=0 go build -o "$work/fetch$i" .)
	git -C "$root" worktree remove --force "$work/tree$i"
done
(cd "$root" && go build -o "$work/loopback" ./bench/loopback)
host="$(bench_proxy_host)"
echo "fleet.sh: ${#revs[@]} revision(s) (${labels[*]}), $repeats round(s); $n URLs of 1 KiB from the Go target through $nproxy tinyproxy ($(tinyproxy -v 2>&1 | awk '{ print $NF }')), --proxy-concurrency $pc, -c $c, --retries 0; Redis $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/\1/p'); built in $(($(date +%s) - started))s"

# servers: the Go target, 4 tinyproxy and a redis-server, on free ports,
# with a fresh URL list and proxy list in $work/srv; sets rport.
servers() {
	local d="$work/srv" k web ports
	rm -rf "$d"
	mkdir -p "$d"
	ln -s "$work/loopback" "$d/loopback"
	LOOPBACK_PID=
	bench_loopback "$d" -urls 0 -proxies 0 -for 30m || { srv_pids+=("$LOOPBACK_PID"); return 1; }
	srv_pids+=("$LOOPBACK_PID")
	mapfile -t ports < <("$work/loopback" -free-ports $((nproxy + 1)))
	web="$(cat "$d/target.txt")"
	web="http://$host:${web#http://127.0.0.1:}/b?size=1024&i="
	: >"$d/proxies.txt"
	for k in $(seq "$nproxy"); do
		bench_tinyproxy "$d/tinyproxy$k" "${ports[k]}" "${web}0" || { srv_pids+=("$BENCH_PID"); return 1; }
		srv_pids+=("$BENCH_PID")
		echo "http://127.0.0.1:${ports[k]}" >>"$d/proxies.txt"
	done
	rport="${ports[0]}"
	bench_redis "$d/redis" "$rport" || { srv_pids+=("$BENCH_PID"); return 1; }
	srv_pids+=("$BENCH_PID")
	awk -v n="$n" -v u="$web" 'BEGIN { for (i = 0; i < n; i++) print u i }' >"$d/urls.txt"
	head -n "$warm" "$d/urls.txt" | sed 's/i=/w=/' >"$d/warm.txt"
}
stop_servers() {
	bench_stop "${srv_pids[@]}"
	srv_pids=()
}

rcli() { timeout 10 redis-cli -p "$rport" "$@"; }
# redis_settle waits (at most 20 s) until the redis-server has been up for
# 12 s: fetch takes an empty namespace on a Redis up for less than its lease
# TTL (10 s) for a Redis restarted under a running run, and holds every
# start until a TTL after the Redis started (limits/redis/doc.go).
redis_settle() {
	local _ up
	for _ in $(seq 200); do
		up="$(rcli info server | tr -d '\r' | awk -F: '/^uptime_in_seconds:/ { print $2 }')"
		[ "${up:-0}" -lt 12 ] || return 0
		sleep 0.1
	done
	echo "fleet.sh: redis-server not up for 12 s after 20 s" >&2
	return 1
}
redis_cpu() { rcli info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f\n", s }'; }
# redis_calls prints the calls of the commands the scripts run, then the
# script calls (fcall, evalsha); it adds each counted command's calls to
# $work/cmds.
redis_calls() {
	rcli info commandstats | tr -d '\r' | awk -F'[:=,]' -v out="$work/cmds" '
		/^cmdstat_/ {
			name = substr($1, 9); base = name; sub(/\|.*/, "", base)
			if (base == "evalsha" || base == "fcall") { s += $3; next }
			if (base ~ /^(eval|function|info|config|flushall|hello|client|ping|subscribe)$/) next
			c += $3; print name, $3 >> out
		}
		END { printf "%d %d\n", c, s }'
}

# Results: res[REV|KEY] holds the values over the rounds, one a word.
declare -A res=()
add() { res["$1|$2"]="${res["$1|$2"]:-} $3"; }
# fdiv A B FORMAT prints A / B (A and B: arithmetic of the script's own
# numbers, evaluated by awk) in FORMAT, or - when B is 0.
fdiv() { awk -v f="$3" "BEGIN { a = ($1); b = ($2); if (b == 0) print \"-\"; else printf f \"\\n\", a / b }"; }

# run_case I ROUND CASE PROCS REDIS: one case of REV I's fetch (PROCS
# processes, with --redis when REDIS is 1); adds its figures to res and
# prints a line.
run_case() {
	local i="$1" r="$2" cs="$3" np="$4" useredis="$5" k rx=() sh=() cpu0=0 cpu1 cmds=0 calls=0
	local bin="$work/fetch$i"
	local wall u s cpu lines uniq ok rcs bad
	rm -rf "$work/rec"
	mkdir "$work/rec"
	if [ "$useredis" = 1 ]; then
		rcli flushall >/dev/null
		rcli config resetstat >/dev/null
		cpu0="$(redis_cpu)"
		rx=(--redis "redis://127.0.0.1:$rport" --namespace fleet)
	fi
	local TIMEFORMAT='%R %U %S'
	{ time (
		for k in $(seq "$np"); do
			[ "$np" = 1 ] || sh=(--shard "$k/$np")
			if timeout -k 10 300 "$bin" -q -o "$work/rec/$k.jsonl" --retries 0 -c "$c" \
				--proxies "$work/srv/proxies.txt" --proxy-concurrency "$pc" "${rx[@]}" "${sh[@]}" \
				"$work/srv/urls.txt" >/dev/null 2>"$work/rec/$k.err"; then
				echo 0 >"$work/rec/$k.rc"
			else
				echo $? >"$work/rec/$k.rc"
			fi &
		done
		wait
	); } 2>"$work/time"
	read -r wall u s <"$work/time"
	cpu="$(awk -v u="$u" -v s="$s" 'BEGIN { print u + s }')"
	lines="$(cat "$work"/rec/*.jsonl 2>/dev/null | wc -l)"
	uniq="$(cat "$work"/rec/*.jsonl 2>/dev/null | grep -o '"line":[0-9]*' | sort -u | wc -l)"
	ok="$(cat "$work"/rec/*.jsonl 2>/dev/null | grep -c '"ok":true' || true)"
	rcs="$(cat "$work"/rec/*.rc | sort | uniq -c | awk '{ printf "%s%sx exit %s", (NR > 1 ? ", " : ""), $1, $2 }')"
	local key="$cs"
	add "$i" "$key.rate" "$(fdiv "$n" "$wall" %.6f)"
	add "$i" "$key.wall" "$wall"
	add "$i" "$key.ccpu" "$(fdiv "$cpu * 1000000" "$n" %.6f)"
	bad=""
	if [ "$lines" = "$n" ] && [ "$uniq" = "$n" ]; then
		add "$i" "$key.once" 1
	else
		add "$i" "$key.once" 0
		bad=" MISSING OR DOUBLED"
	fi
	[ "$ok" = "$n" ] || bad="$bad; not ok: $(cat "$work"/rec/*.jsonl | grep -v '"ok":true' | grep -o '"kind":"[a-z_]*"' | sort | uniq -c | sort -rn | head -n 3 | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')"
	local line
	line="$(printf '  %-14s round %s %-13s %6d URLs in %6.2fs, %5.0f/s, client CPU %5.1f µs/URL; records %d (%d lines distinct, %d ok)%s; %s' \
		"${labels[i]}" "$r" "$cs:" "$n" "$wall" "$(fdiv "$n" "$wall" %.3f)" "$(fdiv "$cpu * 1000000" "$n" %.3f)" "$lines" "$uniq" "$ok" "$bad" "$rcs")"
	if [ "$useredis" = 1 ]; then
		cpu1="$(redis_cpu)"
		read -r cmds calls < <(redis_calls)
		local rc rb
		rc="$(fdiv "($cpu1 - $cpu0) * 1000000" "$n" %.6f)"
		rb="$(fdiv "$cpu1 - $cpu0" "$wall" %.6f)"
		add "$i" "$key.cmds" "$(fdiv "$cmds" "$n" %.6f)"
		add "$i" "$key.calls" "$(fdiv "$calls" "$n" %.6f)"
		add "$i" "$key.rcpu" "$rc"
		add "$i" "$key.busy" "$rb"
		line="$line; Redis: $(fdiv "$cmds" "$n" %.2f) commands, $(fdiv "$calls" "$n" %.2f) script calls, $(printf '%.1f' "$rc") µs CPU a URL, busy $(printf '%.2f' "$rb")"
	fi
	echo "$line"
	# shellcheck disable=SC2034 # read by the round
	last_wall="$wall" last_cpu="$cpu"
}

many="$procs processes"
cases=("no redis" "1 process" "$many")
: >"$work/cmds"
for r in $(seq "$repeats"); do
	for j in $(seq 0 $((${#revs[@]} - 1))); do
		i=$(((j + r - 1) % ${#revs[@]}))
		if ! servers; then
			echo "fleet.sh: the servers did not start" >&2
			exit 1
		fi
		timeout -k 10 120 "$work/fetch$i" -q -o "$work/srv/warm.jsonl" --retries 0 -c "$c" --proxies "$work/srv/proxies.txt" \
			--proxy-concurrency "$pc" "$work/srv/warm.txt" >/dev/null 2>&1 || true
		run_case "$i" "$r" "no redis" 1 0
		w0="$last_wall" c0="$last_cpu"
		redis_settle
		run_case "$i" "$r" "1 process" 1 1
		w1="$last_wall" c1="$last_cpu" r1="$(fdiv "$n" "$last_wall" %.6f)"
		run_case "$i" "$r" "$many" "$procs" 1
		add "$i" ratio.time "$(fdiv "$w1" "$w0" %.6f)"
		add "$i" ratio.cpu "$(fdiv "$c1" "$c0" %.6f)"
		add "$i" ratio.many "$(fdiv "$(fdiv "$n" "$last_wall" %.6f)" "$r1" %.6f)"
		stop_servers
	done
done
elapsed=$(($(date +%s) - started))

# stats I KEY: "median min max" of REV I's values of KEY, or "- - -".
stats() {
	local v="${res["$1|$2"]:-}"
	[ -n "${v// /}" ] || { echo "- - -"; return; }
	# shellcheck disable=SC2086 # one value a word
	printf '%s\n' $v | sort -g | awk '{ a[NR] = $1 } END {
		m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		print m, a[1], a[NR] }'
}
# shellcheck disable=SC2059 # the format is the row's
fmtv() { if [ "$2" = - ]; then echo -; else printf "$1" "$2"; fi; }

echo
echo "fleet.sh: medians [min..max] over $repeats round(s); $n URLs a case; Redis figures per URL; busy: Redis's CPU seconds over the case's wall seconds"
rows=()
for cs in "${cases[@]}"; do
	rows+=("$cs|rate|URLs/s|%.0f" "$cs|ccpu|client CPU µs/URL|%.1f")
	[ "$cs" = "no redis" ] || rows+=("$cs|cmds|Redis commands/URL|%.2f" "$cs|calls|script calls/URL|%.2f" "$cs|rcpu|Redis CPU µs/URL|%.1f" "$cs|busy|Redis busy share|%.2f")
done
rows+=("ratio|time|1 process / no redis: time|%.3f" "ratio|cpu|1 process / no redis: client CPU|%.3f" "ratio|many|$many / 1 process: URLs/s|%.3f")
hdr="$(printf '%-44s' "")"
for i in "${!revs[@]}"; do hdr="$hdr$(printf ' %-24s' "${labels[i]}")"; done
last=$((${#revs[@]} - 1))
[ "$last" = 0 ] || hdr="$hdr $(printf '%s/%s' "${labels[last]}" "${labels[0]}")"
echo "$hdr"
for row in "${rows[@]}"; do
	IFS='|' read -r cs key name f <<<"$row"
	if [ "$cs" = ratio ]; then k="ratio.$key" title="$name"; else k="$cs.$key" title="$cs: $name"; fi
	w=44
	[[ "$title" != *µ* ]] || w=45 # printf pads bytes, and µ is two
	out="$(printf "%-${w}s" "$title")"
	for i in "${!revs[@]}"; do
		read -r m lo hi < <(stats "$i" "$k")
		out="$out$(printf ' %-24s' "$(fmtv "$f" "$m") [$(fmtv "$f" "$lo")..$(fmtv "$f" "$hi")]")"
	done
	if [ "$last" != 0 ]; then
		read -r a _ < <(stats 0 "$k")
		read -r b _ < <(stats "$last" "$k")
		if [ "$a" = - ] || [ "$b" = - ]; then out="$out -"; else out="$out $(fdiv "$b" "$a" %.3f)"; fi
	fi
	echo "$out"
done
for i in "${!revs[@]}"; do
	total=0 good=0
	for cs in "${cases[@]}"; do
		for v in ${res["$i|$cs.once"]:-}; do
			total=$((total + 1))
			good=$((good + v))
		done
	done
	if [ "$good" = "$total" ]; then
		echo "records, ${labels[i]}: every URL has exactly one record in each of the $total case runs"
	else
		echo "records, ${labels[i]}: MISSING OR DOUBLED records in $((total - good)) of $total case runs (see the lines above)"
	fi
done
echo "Redis commands counted (calls over every Redis case): $(awk '{ s[$1] += $2 } END { for (k in s) printf "%s %d\n", k, s[k] }' "$work/cmds" | sort -k2,2nr | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')"
echo "fleet.sh: took ${elapsed}s"
