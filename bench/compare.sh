#!/usr/bin/env bash
# bench/compare.sh: fetch side by side with the hand-rolled alternative it
# replaces, a parallel curl loop (xargs -P), on the same loopback target and
# proxies. Loopback only; every run is bounded by its URL count. For the
# suite against hey, curl --parallel, vegeta and wrk see bench/suite.sh.
#
#   bench/compare.sh [URLS] [PARALLEL]      (defaults: 2000 URLs, 12 at once)
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
urls="${1:-2000}"
par="${2:-12}"
work="$(mktemp -d)"
LOOPBACK_PID=
trap 'if [ -n "$LOOPBACK_PID" ]; then kill "$LOOPBACK_PID" 2>/dev/null || true; fi; rm -rf "$work"' EXIT

command -v curl >/dev/null || { echo "compare.sh: curl is needed" >&2; exit 1; }
bench_build "$work"
bench_loopback "$work" -urls "$urls" -proxies 3 -for 10m

mapfile -t px <"$work/proxies.txt"
secs() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); echo "$e - $s" | bc; }

t_fetch=$(secs "$work/fetch" -q -c "$par" --proxy-concurrency $(( (par + 2) / 3 )) -p "$work/proxies.txt" -o "$work/out.jsonl" "$work/urls.txt")
ok=$(grep -c '"ok":true' "$work/out.jsonl" || true)
# curl: one process per URL, proxies taken in turn, as a shell loop would.
t_curl=$(secs bash -c "awk -v a='${px[0]}' -v b='${px[1]}' -v c='${px[2]}' 'BEGIN{p[0]=a;p[1]=b;p[2]=c}{print p[NR%3] \" \" \$0}' '$work/urls.txt' |
  xargs -P '$par' -n 2 sh -c 'curl -s -o /dev/null -x \"\$0\" \"\$1\"'")

printf '%-28s %8s %10s\n' tool seconds urls/s
printf '%-28s %8.2f %10.0f   (%s of %s ok, records written)\n' "fetch -c $par" "$t_fetch" "$(echo "$urls / $t_fetch" | bc -l)" "$ok" "$urls"
printf '%-28s %8.2f %10.0f   (no records)\n' "xargs -P $par curl" "$t_curl" "$(echo "$urls / $t_curl" | bc -l)"
