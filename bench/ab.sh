#!/usr/bin/env bash
# bench/ab.sh: CPU per URL of two versions of fetch, side by side: each
# fetches the same list, the two taking turns, and the script prints the
# median, min and max of each and B's median over A's. Taking turns cancels
# most of the machine's drift; a change of a few percent needs 6 or more
# runs to show. Loopback only; every run is bounded by its URL count.
#
#   bench/ab.sh [-n RUNS] [-u URLS] [-p squid|tinyproxy] REV_A [REV_B]
#
# REV_A and REV_B are git revisions (REV_B defaults to the working tree).
# Without -p the URLs are 1 KiB bodies from the loopback Go target. With -p
# they are nginx's 1 KiB (the Go target's when nginx is not installed)
# through that proxy, started as bench/suite.sh starts it (-u defaults to
# 20000 there), and each version's rows add its req/s and the proxy's side
# of the same runs: the proxy's CPU per URL, and for squid (one thread) the
# share of the run it was on a core (busy) and waiting for one (waiting),
# and the times per URL the kernel took the core from it (preempted),
# from /proc/PID/stat, schedstat and status. With two cores and a proxy
# that is the bottleneck, the client's CPU is what the proxy loses.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
runs=6 urls="" proxy=""
while getopts n:u:p: opt; do
	case "$opt" in
	n) runs="$OPTARG" ;;
	u) urls="$OPTARG" ;;
	p) proxy="$OPTARG" ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,19p' "$0" >&2; exit 2; }
case "$proxy" in
"") urls="${urls:-200000}" ;;
squid | tinyproxy)
	command -v "$proxy" >/dev/null || { echo "ab.sh: $proxy is not installed (bench/setup.sh installs it)" >&2; exit 1; }
	urls="${urls:-20000}"
	;;
*) echo "ab.sh: -p takes squid or tinyproxy" >&2; exit 2 ;;
esac
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -d /dev/shm ] && [ -w /dev/shm ]; then work="$(mktemp -d /dev/shm/fetch-ab.XXXXXX)"; else work="$(mktemp -d)"; fi
chmod 755 "$work"
LOOPBACK_PID=
pids=()
cleanup() {
	# shellcheck disable=SC2086 # LOOPBACK_PID: one word or none
	bench_stop "${pids[@]}" $LOOPBACK_PID
	git -C "$root" worktree remove --force "$work/tree" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# build REV OUT builds fetch at git revision REV ("" for the working tree).
build() {
	if [ -z "$1" ]; then
		(cd "$root" && CGO_ENABLED=0 go build -o "$2" .)
		return
	fi
	git -C "$root" worktree add -q --detach "$work/tree" "$1"
	(cd "$work/tree" && CGO_ENABLED=0 go build -o "$2" .)
	git -C "$root" worktree remove --force "$work/tree"
}
build "$1" "$work/a"
build "${2:-}" "$work/b"
bench_build "$work"

px=() ppid=""
if [ -z "$proxy" ]; then
	bench_loopback "$work" -urls "$urls" -size 1024 -proxies 0 -for 30m
	what="$urls URLs of 1 KiB from the Go target"
else
	bench_loopback "$work" -urls 0 -proxies 0 -for 30m
	mapfile -t ports < <("$work/loopback" -free-ports 2)
	host="$(bench_proxy_host)"
	web="$(cat "$work/target.txt")" path="/b?size=1024&i=" wname="the Go target"
	if command -v nginx >/dev/null; then
		if bench_nginx "$work/nginx" "${ports[0]}"; then
			web="http://127.0.0.1:${ports[0]}" path="/1k?i=" wname=nginx
		fi
		pids+=("$BENCH_PID")
	fi
	web="http://$host:${web#http://127.0.0.1:}"
	started=0
	"bench_$proxy" "$work/$proxy" "${ports[1]}" "${web}${path}0" && started=1
	pids+=("$BENCH_PID") # stopped on exit, started or not
	[ "$started" = 1 ] || exit 1
	ppid="$BENCH_PID"
	awk -v n="$urls" -v u="$web$path" 'BEGIN { for (i = 0; i < n; i++) print u i }' >"$work/urls.txt"
	px=(--proxy "http://127.0.0.1:${ports[1]}" --proxy-concurrency 64)
	what="$urls URLs of 1 KiB from $wname through $proxy"
fi

# proc PID prints the process's CPU ticks (all threads, user+system), its
# main thread's ns on a core and ns waiting for one, and the main thread's
# involuntary context switches.
proc() {
	local ticks run wait pre
	ticks="$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat")"
	read -r run wait _ <"/proc/$1/schedstat"
	pre="$(awk '/^nonvoluntary_ctxt_switches/ { print $2 }' "/proc/$1/status")"
	echo "$ticks $run $wait $pre"
}
hz="$(getconf CLK_TCK)"

# run BIN OUT appends one row to OUT: the client's CPU µs per URL, and with
# a proxy its req/s, then the proxy's CPU µs per URL, busy %, waiting % and
# preemptions per URL.
run() {
	local before after t0 t1 ok
	[ -z "$ppid" ] || before="$(proc "$ppid")"
	t0="$(date +%s.%N)"
	/usr/bin/time -f '%U %S' -o "$work/time" "$1" -q -o "$work/records.jsonl" --retries 0 -c 64 "${px[@]}" "$work/urls.txt" || true
	t1="$(date +%s.%N)"
	if [ -z "$ppid" ]; then
		awk -v n="$urls" '{ printf "%.2f\n", ($1 + $2) * 1e6 / n }' "$work/time" >>"$2"
		return
	fi
	after="$(proc "$ppid")"
	ok="$(grep -c '"ok":true' "$work/records.jsonl" || true)"
	[ "$ok" -gt 0 ] || { echo "ab.sh: no URL done through $proxy" >&2; exit 1; }
	read -r u s <"$work/time"
	echo "$before $after" | awk -v u="$u" -v s="$s" -v n="$ok" -v w="$(echo "$t1 - $t0" | bc -l)" -v hz="$hz" '{
		printf "%.2f %.0f %.2f %.1f %.1f %.3f\n", (u + s) * 1e6 / n, n / w, ($5 - $1) * 1e6 / hz / n,
			($6 - $2) / 1e9 / w * 100, ($7 - $3) / 1e9 / w * 100, ($8 - $4) / n }' >>"$2"
}
# One run each, not counted: the first runs on a fresh server pay for
# warming it.
run "$work/a" /dev/null
run "$work/b" /dev/null
for _ in $(seq "$runs"); do
	run "$work/a" "$work/a.rows"
	run "$work/b" "$work/b.rows"
done

# col FILE K: "median min max" of column K.
col() { awk -v k="$2" '{ print $k }' "$1" | sort -g | awk '{ v[NR] = $1 } END { printf "%s %s %s\n", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
names=("client CPU µs/URL" "req/s" "$proxy CPU µs/URL" "$proxy busy %" "$proxy waiting %" "$proxy preempted/URL")
cols=1
[ -z "$proxy" ] || cols=6
[ "$proxy" != tinyproxy ] || cols=3 # many threads: the main one's counters say little
echo "ab.sh: $what, -c 64, $runs runs each, median [min..max]"
printf '%-24s %-28s %-28s %s\n' "" "A ${1}" "B ${2:-working tree}" "B/A"
for k in $(seq "$cols"); do
	read -r am amin amax < <(col "$work/a.rows" "$k")
	read -r bm bmin bmax < <(col "$work/b.rows" "$k")
	printf '%-24s %-28s %-28s %s\n' "${names[k - 1]}" "$am [$amin..$amax]" "$bm [$bmin..$bmax]" \
		"$(awk -v a="$am" -v b="$bm" 'BEGIN { if (a == 0) print "-"; else printf "%.3f", b / a }')"
done
