#!/usr/bin/env bash
# bench/ab.sh: CPU per URL of two versions of fetch, side by side: each
# fetches the same list from the loopback Go target, the two taking turns,
# and the script prints the median, min and max of each and B's median over
# A's. Taking turns cancels most of the machine's drift; a change of a few
# percent needs 6 or more runs to show. Loopback only; every run is bounded
# by its URL count.
#
#   bench/ab.sh [-n RUNS] [-u URLS] REV_A [REV_B]
#
# REV_A and REV_B are git revisions (REV_B defaults to the working tree).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
runs=6 urls=200000
while getopts n:u: opt; do
	case "$opt" in
	n) runs="$OPTARG" ;;
	u) urls="$OPTARG" ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
LOOPBACK_PID=
trap 'if [ -n "$LOOPBACK_PID" ]; then kill "$LOOPBACK_PID" 2>/dev/null || true; fi; git -C "$root" worktree remove --force "$work/tree" 2>/dev/null || true; rm -rf "$work"' EXIT

# build REV OUT builds fetch at git revision REV ("" for the working tree).
build() {
	if [ -z "$1" ]; then
		(cd "$root" && go build -o "$2" .)
		return
	fi
	git -C "$root" worktree add -q --detach "$work/tree" "$1"
	(cd "$work/tree" && go build -o "$2" .)
	git -C "$root" worktree remove --force "$work/tree"
}
build "$1" "$work/a"
build "${2:-}" "$work/b"
bench_build "$work"
bench_loopback "$work" -urls "$urls" -size 1024 -proxies 0 -for 30m

# cpu BIN prints BIN's user+system CPU per URL in microseconds.
cpu() {
	/usr/bin/time -f '%U %S' -o "$work/time" "$1" -q -o "$work/records.jsonl" --retries 0 -c 64 "$work/urls.txt" || true
	awk -v n="$urls" '{ printf "%.2f\n", ($1 + $2) * 1e6 / n }' "$work/time"
}
for _ in $(seq "$runs"); do
	cpu "$work/a" >>"$work/a.cpu"
	cpu "$work/b" >>"$work/b.cpu"
done
stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { printf "%s %s %s\n", v[int((NR + 1) / 2)], v[1], v[NR] }'; }
read -r am amin amax < <(stats "$work/a.cpu")
read -r bm bmin bmax < <(stats "$work/b.cpu")
echo "ab.sh: $urls URLs of 1 KiB from the Go target, -c 64, $runs runs each, CPU µs per URL: median [min..max]"
echo "A ${1}: $am [$amin..$amax]"
echo "B ${2:-working tree}: $bm [$bmin..$bmax]"
awk -v a="$am" -v b="$bm" 'BEGIN { printf "B/A %.3f\n", b / a }'
