#!/usr/bin/env bash
# bench/pool.sh: what a large pool of identities costs a whole run of the
# real binary (issue 12's goal 6). It fetches the same URLs from the Go
# target through one proxy (tinyproxy when installed, else the Go proxy of
# bench/loopback), once with a list of 10 identities and once with 100,000
# (http://user-session-N:pw@proxy, as rotating-proxy providers sell them),
# the two taking turns, at -c 64 with --proxy-concurrency 8 so that both
# have 64 in flight. It prints each one's wall time, CPU time and peak RSS
# (median [min..max]), the ratios of the medians, the ratios of each pair,
# and the start alone (a list of one URL); then goal 6 of issue 12 (CPU
# through 100,000 identities at most 1.2 times that through 10) on the
# geometric mean of the pairs' CPU ratios, with its 95% interval: the
# machine's pace moves by a third within minutes, so one pair, or one
# median, says little. Loopback only; every run is bounded by its URL
# count.
#
#   bench/pool.sh [-n PAIRS] [-u URLS] [-i IDENTITIES] [-s STARTS]
#
# Defaults: 10 pairs, 20,000 URLs, 100,000 identities, 3 starts alone of
# each list.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
pairs=10 urls=20000 many=100000 starts=3
while getopts n:u:i:s: opt; do
	case "$opt" in
	n) pairs="$OPTARG" ;;
	u) urls="$OPTARG" ;;
	i) many="$OPTARG" ;;
	s) starts="$OPTARG" ;;
	*) sed -n '2,20p' "$0" >&2; exit 2 ;;
	esac
done
[ "$pairs" -ge 2 ] || { echo "pool.sh: -n wants 2 pairs or more (the interval needs two)" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "pool.sh: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
work="$(mktemp -d)"
LOOPBACK_PID="" tinyproxy_pid=""
cleanup() {
	local p
	for p in $LOOPBACK_PID $tinyproxy_pid; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

bench_build "$work"
bench_loopback "$work" -urls "$urls" -size 1024 -proxies 1 -for 30m
proxy="$(sed -n 1p "$work/proxies.txt")" # http://127.0.0.1:PORT, the Go proxy
name="the Go proxy"
if command -v tinyproxy >/dev/null; then
	port="$("$work/loopback" -free-ports 1)"
	printf 'Port %s\nListen 127.0.0.1\nTimeout 60\nMaxClients 1024\nAllow 127.0.0.1\nLogLevel Critical\nDisableViaHeader Yes\n' "$port" >"$work/tinyproxy.conf"
	tinyproxy -d -c "$work/tinyproxy.conf" >"$work/tinyproxy.log" 2>&1 &
	tinyproxy_pid=$!
	for _ in $(seq 100); do
		if curl -s -o /dev/null -x "http://127.0.0.1:$port" "$(cat "$work/target.txt")/" 2>/dev/null; then
			proxy="http://127.0.0.1:$port" name="tinyproxy"
			break
		fi
		sleep 0.1
	done
	[ "$name" = tinyproxy ] || echo "pool.sh: tinyproxy did not start: using the Go proxy"
else
	echo "pool.sh: tinyproxy is not installed: using the Go proxy"
fi
hostport="${proxy#http://}"
for n in 10 "$many"; do
	awk -v n="$n" -v h="$hostport" 'BEGIN { for (i = 0; i < n; i++) printf "http://user-session-%d:pw@%s\n", i, h }' >"$work/ids$n.txt"
done
head -n 1 "$work/urls.txt" >"$work/one.txt"

# run N LIST: one run through identities N; appends "wall cpu rssKiB" to LIST.
run() {
	/usr/bin/time -f '%e %U %S %M' -o "$work/time" "$work/fetch" -q -o "$work/records.jsonl" \
		--retries 0 -c 64 --proxy-concurrency 8 --proxies "$work/ids$1.txt" "$work/$2.txt" 2>/dev/null || true
	# The last line: GNU time writes "Command exited with non-zero status"
	# before its figures when a URL failed.
	tail -n 1 "$work/time" | awk '{ printf "%s %.2f %d\n", $1, $2 + $3, $4 }' >>"$work/$2.$1"
	local want ok
	want="$(wc -l <"$work/$2.txt")"
	ok="$(grep -c '"ok":true' "$work/records.jsonl" || true)"
	if [ "$ok" != "$want" ]; then
		echo "pool.sh: warning: $ok of $want URLs ok through $1 identities: this run's figures are not comparable" >&2
	fi
}
for i in $(seq "$pairs"); do
	if [ $((i % 2)) = 1 ]; then order="10 $many"; else order="$many 10"; fi
	for n in $order; do run "$n" urls; done
done
for _ in $(seq "$starts"); do
	for n in 10 "$many"; do run "$n" one; done
done

# col FILE K: median [min..max] of column K.
col() { awk -v k="$2" '{ print $k }' "$1" | sort -n | awk '{ v[NR] = $1 } END { printf "%s [%s..%s]", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
med() { awk -v k="$2" '{ print $k }' "$1" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "pool.sh: $urls URLs of 1 KiB from the Go target through $name, -c 64 --proxy-concurrency 8, $pairs pairs taking turns"
for n in 10 "$many"; do
	printf '%7s identities: wall %s s, CPU %s s, peak RSS %s KiB; start alone: wall %s s, CPU %s s, peak RSS %s KiB\n' \
		"$n" "$(col "$work/urls.$n" 1)" "$(col "$work/urls.$n" 2)" "$(col "$work/urls.$n" 3)" \
		"$(col "$work/one.$n" 1)" "$(col "$work/one.$n" 2)" "$(col "$work/one.$n" 3)"
done
for k in 1 2; do
	what=wall
	[ "$k" = 2 ] && what=CPU
	awk -v a="$(med "$work/urls.10" "$k")" -v b="$(med "$work/urls.$many" "$k")" -v w="$what" -v m="$many" \
		'BEGIN { printf "%s: %s identities over 10, medians: %.2f\n", w, m, b / a }'
	printf '%s, each pair:' "$what"
	paste "$work/urls.10" "$work/urls.$many" | awk -v k="$k" '{ printf " %.2f", $(k + 3) / $k }'
	echo
done
read -r m lo hi n < <(paste "$work/urls.10" "$work/urls.$many" | awk '{ print $5 / $2 }' | bench_gmean)
m="$(printf '%.3f' "$m")" # judged as printed, as suite.sh judges its goals
verdict=met
if awk -v v="$m" 'BEGIN { exit !(v > 1.2) }'; then verdict=MISSED; fi
if awk -v lo="$lo" -v hi="$hi" 'BEGIN { exit !(lo < 1.2 && 1.2 < hi) }'; then verdict="$verdict (the interval holds 1.2: this run cannot tell)"; fi
printf 'goal: CPU through %s identities / through 10 <= 1.2: %.3f, geometric mean of %d pairs, 95%% interval %.3f..%.3f: %s\n' \
	"$many" "$m" "$n" "$lo" "$hi" "$verdict"
