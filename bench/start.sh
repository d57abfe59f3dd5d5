#!/usr/bin/env bash
# bench/start.sh: what fetch's start costs, beside the least a Go program
# does (bench/minimal), taking turns so that the machine's drift hits both
# alike. Each round times, from just before exec (bash's EPOCHREALTIME, the
# same fork for every command):
#
#   version   fetch --version, to its exit
#   first     a one-URL run of fetch, to the moment the request reaches the
#             loopback Go target (its /_arrivals clock), and
#   exit      the same run, to its exit
#   minimal   bench/minimal on the same URL: first and exit as for fetch
#
# and prints the median, min and max of each over the rounds, in ms.
# Loopback only; every run is one URL.
#
#   bench/start.sh [-n ROUNDS]    (default 100)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
rounds=100
while getopts n: opt; do
	case "$opt" in
	n) rounds="$OPTARG" ;;
	*) sed -n '2,16p' "$0" >&2; exit 2 ;;
	esac
done
case "$rounds" in '' | *[!0-9]* | 0) echo "start.sh: -n takes a positive number" >&2; exit 2 ;; esac
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
LOOPBACK_PID=
cleanup() {
	# shellcheck disable=SC2086 # LOOPBACK_PID: one word or none
	bench_stop $LOOPBACK_PID
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bench_build "$work"
(cd "$here/.." && CGO_ENABLED=0 go build -o "$work/minimal" ./bench/minimal)
bench_loopback "$work" -urls 0 -proxies 0 -for 30m
target="$(cat "$work/target.txt")"
echo "$target/rate/1" >"$work/one.txt"

# us: EPOCHREALTIME in microseconds.
us() { local t="$EPOCHREALTIME"; echo "${t/./}"; }
# arrival: the first arrival's time at the target, µs, and forget it.
arrival() {
	local n first _
	read -r n first _ < <(curl -s "$target/_arrivals?reset=1")
	[ "$n" -ge 1 ] || { echo "start.sh: the request did not arrive" >&2; exit 1; }
	echo $((first / 1000))
}
declare -A res=()
add() { res[$1]="${res[$1]:-} $2"; }

curl -s -o /dev/null "$target/_arrivals?reset=1"
for r in $(seq "$rounds"); do
	order=(fetch minimal)
	[ $((r % 2)) = 0 ] || order=(minimal fetch)
	for tool in "${order[@]}"; do
		t0="$(us)"
		if [ "$tool" = fetch ]; then
			"$work/fetch" -q -o /dev/null --retries 0 "$work/one.txt"
		else
			"$work/minimal" -c 1 "$work/one.txt" >/dev/null
		fi
		t1="$(us)"
		add "$tool first" "$(($(arrival) - t0))"
		add "$tool exit" "$((t1 - t0))"
	done
	t0="$(us)"
	"$work/fetch" --version >/dev/null
	add "fetch version" "$(($(us) - t0))"
done

echo "start.sh: $rounds rounds, ms from just before exec: median [min..max]"
for k in "fetch version" "fetch first" "minimal first" "fetch exit" "minimal exit"; do
	# shellcheck disable=SC2086 # one value a word
	printf '%s\n' ${res[$k]} | sort -n | awk -v k="$k" '{ a[NR] = $1 } END {
		m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		printf "  %-14s %7.2f [%.2f..%.2f]\n", k, m / 1000, a[1] / 1000, a[NR] / 1000 }'
done
