#!/usr/bin/env bash
# bench/enqueue.sh: fetch enqueue streams its input. A list of N URL lines,
# made by awk as it is read and never on disk, is piped into
#
#   fetch enqueue --redis redis://127.0.0.1:PORT --namespace big -q -
#
# under /usr/bin/time -v, against a redis-server of its own on a free
# loopback port (--save '' --appendonly no), after CONFIG RESETSTAT. It
# prints the wall time, lines/s, fetch's maximum resident set size and CPU
# a line, Redis's used_memory after the run and a line, Redis's commands a
# line (INFO commandstats: every command but info, config and ping; the
# script calls, evalsha and eval, apart) and its CPU a line
# (used_cpu_user+used_cpu_sys); and checks that exactly N lines are queued
# (fetch status --json, and XLEN of the stream {big}:q). Then it pipes the
# same list in again: standard input is the input named "-", so the second
# enqueue must add 0 lines (once per (input, line)) and leave XLEN at N.
#
#   bench/enqueue.sh [-n LINES] [-t SECONDS]
#
#   -n LINES    lines of the list (10000000)
#   -t SECONDS  bound on each enqueue (default 120 + LINES/10000)
#
# Loopback only. 10 million lines (409 MB of list) take about a minute on
# a 2-core VM, build included, and 600 MB of Redis's memory.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
n=10000000 bound=
while getopts n:t:h opt; do
	case "$opt" in
	n) n="$OPTARG" ;;
	t) bound="$OPTARG" ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ $# = 0 ] || usage
for v in "$n" "${bound:-1}"; do
	case "$v" in '' | *[!0-9]* | 0*) echo "enqueue.sh: -n and -t take positive whole numbers" >&2; exit 2 ;; esac
done
[ -n "$bound" ] || bound=$((120 + n / 10000))
for tool in redis-server redis-cli awk timeout /usr/bin/time; do
	command -v "$tool" >/dev/null || {
		echo "enqueue.sh: $tool is not installed (/usr/bin/time: apt-get install time)" >&2
		exit 1
	}
done

work="$(mktemp -d)"
REDIS_PID=
cleanup() {
	# shellcheck disable=SC2086 # REDIS_PID: one word or none
	bench_stop $REDIS_PID
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
started="$(date +%s)"

bench_build "$work"
port="$("$work/loopback" -free-ports 1)"
BENCH_PID=
bench_redis "$work/redis" "$port" || { REDIS_PID="$BENCH_PID"; exit 1; }
REDIS_PID="$BENCH_PID"
url="redis://127.0.0.1:$port"
rcli() { timeout 30 redis-cli -p "$port" "$@" | tr -d '\r'; }
# info SECTION FIELD: one field of INFO.
info() { rcli info "$1" | awk -F: -v k="$2" '$1 == k { print $2 }'; }
redis_cpu() { rcli info cpu | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f\n", s }'; }
# commands: "COMMANDS SCRIPT_CALLS BREAKDOWN" from INFO commandstats, the
# breakdown "name calls, ..." by calls.
commands() {
	rcli info commandstats | awk -F'[:=,]' '
		/^cmdstat_/ {
			name = substr($1, 9); base = name; sub(/\|.*/, "", base)
			if (base ~ /^(info|config|ping)$/) next
			if (base == "evalsha" || base == "eval") s += $3; else c += $3
			b[name] = $3
		}
		END {
			printf "%d %d ", c, s
			PROCINFO["sorted_in"] = "@val_num_desc"
			for (k in b) printf "%s%s %d", (i++ ? ", " : ""), k, b[k]
			print ""
		}'
}
# gen: the list, N lines made as they are read; its size in bytes goes to
# $work/bytes.
gen() {
	awk -v n="$n" -v out="$work/bytes" 'BEGIN {
		for (i = 0; i < n; i++) { l = sprintf("http://127.0.0.1:1/some/path/x?i=%d", i); print l; b += length(l) + 1 }
		printf "%d\n", b > out }'
}
fdiv() { awk -v f="$3" "BEGIN { a = ($1); b = ($2); if (b == 0) print \"-\"; else printf f \"\\n\", a / b }"; }
# elapsed: "m:ss.ss" or "h:mm:ss" of time -v in seconds.
secs() { awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }'; }
us() { local t="$EPOCHREALTIME"; echo "${t/./}"; }

# enqueue TAG [-q]: pipes the list into fetch enqueue under time -v; sets
# wall (s), rc and the figures of time -v in $work/TAG.time.
enqueue() {
	local tag="$1" t0 t1 st
	shift
	t0="$(us)"
	set +e
	gen | timeout -k 10 "$bound" /usr/bin/time -v -o "$work/$tag.time" \
		"$work/fetch" enqueue --redis "$url" --namespace big "$@" - 2>"$work/$tag.err"
	st=("${PIPESTATUS[@]}")
	set -e
	t1="$(us)"
	wall="$(fdiv "$t1 - $t0" 1000000 %.3f)"
	rc="${st[1]}"
	if [ "${st[0]}" != 0 ] || [ "$rc" != 0 ]; then
		echo "enqueue.sh: the $tag enqueue failed: awk exit ${st[0]}, fetch exit $rc (124: over -t ${bound}s)" >&2
		cat "$work/$tag.err" "$work/$tag.time" >&2 2>/dev/null || true
		exit 1
	fi
}
tv() { awk -F': ' -v k="$2" '{ sub(/^[ \t]+/, "") } $1 == k { print $2 }' "$work/$1.time"; }
cpu() { awk -v u="$(tv "$1" 'User time (seconds)')" -v s="$(tv "$1" 'System time (seconds)')" 'BEGIN { print u + s }'; }
queued() {
	xlen="$(rcli xlen '{big}:q')"
	status="$("$work/fetch" status --redis "$url" --namespace big --json)"
	senq="$(grep -o '"enqueued":[0-9]*' <<<"$status" | cut -d: -f2)"
}

echo "enqueue.sh: $n lines, $(redis-server --version | sed -n 's/.* v=\([^ ]*\).*/Redis \1/p'), $(nproc) cores; built in $(($(date +%s) - started))s"
rcli config resetstat >/dev/null
mem0="$(info memory used_memory)"
cpu0="$(redis_cpu)"
enqueue first -q
cpu1="$(redis_cpu)"
mem1="$(info memory used_memory)"
rss1="$(info memory used_memory_rss)"
read -r cmds calls breakdown < <(commands)
bytes="$(cat "$work/bytes")"
maxrss="$(tv first 'Maximum resident set size (kbytes)')"
fcpu="$(cpu first)"
queued
printf 'first enqueue: %d lines (%s MB) in %.1f s, %.0f lines/s\n' "$n" "$(fdiv "$bytes" 1000000 %.1f)" "$wall" "$(fdiv "$n" "$wall" %.1f)"
printf '  fetch: maximum resident set %.1f MiB, CPU %.2f µs a line (%s s), time -v wall %s s\n' \
	"$(fdiv "$maxrss" 1024 %.3f)" "$(fdiv "$fcpu * 1000000" "$n" %.4f)" "$fcpu" \
	"$(tv first 'Elapsed (wall clock) time (h:mm:ss or m:ss)' | secs)"
printf '  Redis: used_memory %.1f MiB after (%.1f before; rss %.1f MiB), %.1f bytes a line\n' \
	"$(fdiv "$mem1" 1048576 %.3f)" "$(fdiv "$mem0" 1048576 %.3f)" "$(fdiv "$rss1" 1048576 %.3f)" "$(fdiv "$mem1 - $mem0" "$n" %.3f)"
printf '  Redis: %.3f commands a line and %.5f script calls (%d and %d), CPU %.2f µs a line (%.2f s, busy %.2f)\n' \
	"$(fdiv "$cmds" "$n" %.6f)" "$(fdiv "$calls" "$n" %.8f)" "$cmds" "$calls" \
	"$(fdiv "($cpu1 - $cpu0) * 1000000" "$n" %.4f)" "$(fdiv "$cpu1 - $cpu0" 1 %.3f)" "$(fdiv "$cpu1 - $cpu0" "$wall" %.4f)"
echo "  Redis commands: $breakdown"
ok=1
if [ "$xlen" = "$n" ] && [ "$senq" = "$n" ]; then
	echo "  queued: XLEN {big}:q $xlen, status enqueued $senq: exactly $n"
else
	echo "  queued: XLEN {big}:q $xlen, status enqueued $senq: NOT $n"
	ok=0
fi

# The same list again, on standard input (the input "-"), not quiet: it
# says how many lines it added.
rcli config resetstat >/dev/null
cpu0="$(redis_cpu)"
enqueue again
cpu1="$(redis_cpu)"
read -r cmds calls breakdown < <(commands)
said="$(cat "$work/again.err")"
queued
printf 'second enqueue, the same list: %.1f s (%.0f lines/s read); it said "%s"\n' "$wall" "$(fdiv "$n" "$wall" %.1f)" "$said"
printf '  fetch: maximum resident set %.1f MiB, CPU %.2f µs a line (%s s)\n' \
	"$(fdiv "$(tv again 'Maximum resident set size (kbytes)')" 1024 %.3f)" "$(fdiv "$(cpu again) * 1000000" "$n" %.4f)" "$(cpu again)"
printf '  Redis: %d commands, %d script calls, CPU %.3f s while it ran (%s)\n' "$cmds" "$calls" "$(fdiv "$cpu1 - $cpu0" 1 %.3f)" "$breakdown"
if [ "$said" = "fetch: enqueued 0 lines of -" ] && [ "$xlen" = "$n" ] && [ "$senq" = "$n" ]; then
	echo "  queued: XLEN {big}:q $xlen, status enqueued $senq: 0 lines added"
else
	echo "  queued: XLEN {big}:q $xlen, status enqueued $senq: LINES ADDED"
	ok=0
fi
echo "enqueue.sh: took $(($(date +%s) - started))s"
[ "$ok" = 1 ]
