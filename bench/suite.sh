#!/usr/bin/env bash
# bench/suite.sh: fetch side by side with hey, curl --parallel, vegeta and wrk
# on the same URL lists and proxies, all on 127.0.0.1. It starts the servers
# itself (nginx when installed, else the Go target of bench/loopback; squid
# and tinyproxy when installed), each on a free loopback port with a config
# in a temp dir, and stops them on exit. A peer that is not installed is
# skipped, and the table says so. With hey comes hey-go, the same hey built
# with fetch's Go (go install, needs the module proxy): a column on the same
# net/http as fetch, for information; the goals name hey as installed.
#
#   bench/suite.sh [--quick] [--install] [--repeats N] [--only CASE,...] [--tsv FILE]
#
#   --quick      small counts and one repeat: a sanity run of about a minute
#   --install    run bench/setup.sh first (installs the missing peers; root)
#   --repeats N  runs of every tool in every case (default 3, quick 1)
#   --only LIST  cases to run: direct,sustained,big,squid,tinyproxy,slow,rate,fastrate,
#                redisrate,redishost,redisproxy
#   --tsv FILE   machine-readable results (default $TMPDIR/fetch-bench.tsv): a
#                row "result" per case and tool (median, min, max, every run,
#                fetch/tool), a row "pairs" per proxy case with pairs (the
#                geometric mean of fetch/wrk, its 95% interval, every pair's
#                ratio), then a row "goal" per goal: case, the goal, peer,
#                value, operator, target, the 95% interval for a goal on
#                pairs (else -), met|MISSED|skipped
#
# Through squid and tinyproxy the table also gives each tool's CPU per URL
# and the proxy's own CPU per request (from /proc/PID/stat, ticks of
# CLK_TCK): where the proxy is the bottleneck, they say whether a client
# costs it more per request than another, or takes the cores it needs.
#
# The proxy goals are taken on pairs: after the repeats, BENCH_PAIRS runs
# of fetch and wrk back to back (each first in turn), and the goal's figure
# is the geometric mean of the pairs' ratios, printed with its 95% interval
# and, when the interval holds the target, the words that this run cannot
# tell. On a shared VM a proxy-bound rate moves 15% and more between two
# runs a few seconds apart, whichever the client (through squid the pairs'
# logarithms have a spread of 0.15 to 0.18): 76 such pairs of the code
# before 13ea1df gave fetch/wrk 0.985 [0.946..1.025] on one machine, 140 of
# the code after it 0.946 [0.921..0.972] on another, and 12 pairs put an
# interval of about +-11% around a run's figure. The table's f/wrk is
# still the medians' ratio.
#
# Counts, from the environment (full default / quick default):
#   BENCH_C=64               concurrency of every tool
#   BENCH_DIRECT=20000/2000  1 KiB URLs in the direct case
#   BENCH_LINES=2000000/200000 and BENCH_SECS=20/3   the sustained case
#   BENCH_BIG=2000/200       100 KiB URLs
#   BENCH_PROXY=20000/1000   1 KiB URLs through squid and through tinyproxy:
#                            enough for runs of 1 to 3 s, so that their start
#                            and tail weigh little against wrk's steady state
#   BENCH_SLOW=2000/640 and BENCH_SLOW_MS=50   URLs that take that long each
#                            (wrk's figure there is its steady rate on one
#                            such URL against the ideal's: the floor that the
#                            target and the machine leave any client; and
#                            bench/minimal's, the least a Go program does,
#                            start to exit, is the floor for a Go client)
#   BENCH_RATE_N=500/100 and BENCH_RATE=50     starts at that rate per second
#   BENCH_FAST_RATE_N=50000/5000 and BENCH_FAST_RATE=5000   the same, fast
#   BENCH_REDIS_RATE_N=10000/2000 and BENCH_REDIS_RATE=1000   the same with
#                            --redis (a redis-server of the suite's own), by
#                            one process and by two (--shard 1/2 and 2/2)
#                            sharing the rate; fetch only, as no peer shares
#                            a rate between processes
#   BENCH_REDIS_EACH_N=10000/2000, BENCH_REDIS_EACH_RATE=250 (the rate of
#                            each host or proxy) and
#                            BENCH_REDIS_HOSTS=4   the same with --host-rate:
#                            as many starts spread over that many hosts (ports
#                            of the Go target), each host at that rate; the
#                            figure is the rate of the host furthest from it
#   BENCH_REDIS_PROXIES=4    the same N and rate with --proxy-rate, through
#                            that many Go proxies, each at that rate; the
#                            figure is the mean rate of all over their number
#   BENCH_WRK_SECS=3/1       how long each wrk run lasts (wrk runs by time)
#   BENCH_PAIRS=12/2         fetch and wrk pairs through each proxy (0: none,
#                            the proxy goals then from the repeats' medians)
#   BENCH_SKIP="nginx wrk"  tools and servers to treat as not installed (hey-go too)
#
# Every run is bounded by its count and by a timeout. The exit status is
# non-zero only when the suite itself fails; a missed goal is printed as
# MISSED.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
bench_path

quick=0 install=0 repeats="" only="" tsv=""
while [ $# -gt 0 ]; do
	case "$1" in
	--quick) quick=1 ;;
	--install) install=1 ;;
	--repeats) repeats="${2:?--repeats N}"; shift ;;
	--only) only="${2:?--only CASE,...}"; shift ;;
	--tsv) tsv="${2:?--tsv FILE}"; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "suite.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
if [ "$install" = 1 ]; then
	"$here/setup.sh"
	bench_path
fi

# size VAR FULL QUICK: VAR from the environment, else the default.
size() {
	local v="${!1:-}"
	if [ -z "$v" ]; then
		if [ "$quick" = 1 ]; then v="$3"; else v="$2"; fi
	fi
	case "$v" in '' | *[!0-9]*) echo "suite.sh: $1 must be a whole number" >&2; exit 2 ;; esac
	printf -v "$1" '%s' "$v"
}
size BENCH_C 64 64
size BENCH_DIRECT 20000 2000
size BENCH_LINES 2000000 200000
size BENCH_SECS 20 3
size BENCH_BIG 2000 200
size BENCH_PROXY 20000 1000
size BENCH_SLOW 2000 640
size BENCH_SLOW_MS 50 50
size BENCH_RATE_N 500 100
size BENCH_RATE 50 50
size BENCH_FAST_RATE_N 50000 5000
size BENCH_FAST_RATE 5000 5000
size BENCH_REDIS_RATE_N 10000 2000
size BENCH_REDIS_RATE 1000 1000
size BENCH_REDIS_EACH_N 10000 2000
size BENCH_REDIS_EACH_RATE 250 250
size BENCH_REDIS_HOSTS 4 4
size BENCH_REDIS_PROXIES 4 4
size BENCH_WRK_SECS 3 1
size BENCH_PAIRS 12 2
if [ -z "$repeats" ]; then
	if [ "$quick" = 1 ]; then repeats=1; else repeats=3; fi
fi
case "$repeats" in '' | *[!0-9]* | 0) echo "suite.sh: --repeats takes a positive number" >&2; exit 2 ;; esac
c="$BENCH_C"
hey_module="github.com/rakyll/hey@v0.1.4" # Debian's hey is this version
tsv="${tsv:-${TMPDIR:-/tmp}/fetch-bench.tsv}"
all_cases="direct sustained big squid tinyproxy slow rate fastrate redisrate redisrate2 redishost redishost2 redisproxy redisproxy2"
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }

for tool in bc timeout awk; do
	command -v "$tool" >/dev/null || { echo "suite.sh: $tool is needed" >&2; exit 1; }
done
# have TOOL: installed, and not named in BENCH_SKIP.
have() { [[ " ${BENCH_SKIP:-} " != *" $1 "* ]] && command -v "$1" >/dev/null; }
peers=()
for tool in hey curl vegeta wrk; do
	if have "$tool"; then peers+=("$tool"); else echo "suite.sh: $tool is not installed (or is in BENCH_SKIP): skipped; bench/setup.sh installs it"; fi
done
have_peer() { [[ " ${peers[*]} " == *" $1 "* ]]; }
# The Go peers' toolchains: net/http's cost per request moves with the Go
# release (Debian's hey is built with an older one than fetch).
for tool in hey vegeta; do
	if have_peer "$tool" && v="$(go version "$(command -v "$tool")" 2>/dev/null)"; then
		echo "suite.sh: $tool built with ${v##* }"
	fi
done
echo "suite.sh: fetch built with $(go env GOVERSION)"

# Records and results go to a tmpfs when there is one.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
	work="$(mktemp -d /dev/shm/fetch-bench.XXXXXX)"
else
	work="$(mktemp -d)"
fi
chmod 755 "$work"
server_pids=()
LOOPBACK_PID=
cleanup() {
	# shellcheck disable=SC2086 # LOOPBACK_PID: one word or none
	bench_stop "${server_pids[@]}" $LOOPBACK_PID
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "suite.sh: building fetch, bench/loopback and bench/minimal"
bench_build "$work"
# bench/minimal, the latency-bound case's floor for a Go client: static,
# as fetch is built.
(cd "$here/.." && CGO_ENABLED=0 go build -o "$work/minimal" ./bench/minimal)
# hey-go: the same hey built with fetch's Go, so that one column compares
# the clients on one net/http. Not a goal's peer: the goals name hey as
# installed.
hey_go=""
if have hey && [[ " ${BENCH_SKIP:-} " != *" hey-go "* ]]; then
	if (cd / && GOBIN="$work/hey-go" GOFLAGS='' timeout 300 go install "$hey_module") >"$work/hey-go.log" 2>&1; then
		hey_go="$work/hey-go/hey"
		peers=("${peers[@]:0:1}" hey-go "${peers[@]:1}")
		echo "suite.sh: hey-go: hey built with $(go env GOVERSION)"
	else
		echo "suite.sh: hey-go: go install $hey_module failed ($(tail -n 1 "$work/hey-go.log")): skipped"
	fi
fi
fetch="$work/fetch"
hosts=1 proxies=0
if want redishost; then hosts="$BENCH_REDIS_HOSTS"; fi
if want redisproxy; then proxies="$BENCH_REDIS_PROXIES"; fi
bench_loopback "$work" -urls 0 -proxies "$proxies" -hosts "$hosts" -for 60m
gotarget="$(cat "$work/target.txt")"

mapfile -t ports < <("$work/loopback" -free-ports 4)

# The 1 KiB and 100 KiB target: nginx, else the Go target.
web="" web_name=""
if have nginx; then
	if bench_nginx "$work/nginx" "${ports[0]}"; then
		web="http://127.0.0.1:${ports[0]}" web_name="nginx $(nginx -v 2>&1 | sed 's|.*/||')"
	else
		echo "suite.sh: using the Go target"
	fi
	server_pids+=("$BENCH_PID")
else
	echo "suite.sh: nginx is not installed (or is in BENCH_SKIP): the 1 KiB and 100 KiB URLs come from the Go target"
fi
# web_path SIZE: the path of a SIZE-byte body on the web target.
web_path() {
	if [ -n "$web" ]; then
		case "$1" in 1024) echo /1k ;; 102400) echo /100k ;; esac
	else
		echo "/b?size=$1"
	fi
}
[ -n "$web" ] || web="$gotarget" web_name="Go target"

# A name for 127.0.0.1 other than localhost (see bench_proxy_host); with
# none, vegeta and wrk are left out of the proxy cases.
proxy_host="$(bench_proxy_host)"
alias_host=""
[ "$proxy_host" = 127.0.0.1 ] || alias_host="$proxy_host"
check_url="http://$proxy_host:${web#http://127.0.0.1:}$(web_path 1024)"

# proxy_pid[PROXY URL]: the proxy's process, whose CPU time the proxy
# cases read (see proxy_ticks).
declare -A proxy_pid=()
squid_url=""
if have squid && want squid; then
	if bench_squid "$work/squid" "${ports[1]}" "$check_url"; then
		squid_url="http://127.0.0.1:${ports[1]}"
		proxy_pid["$squid_url"]="$BENCH_PID"
	else
		echo "suite.sh: squid skipped"
	fi
	server_pids+=("$BENCH_PID")
fi
tinyproxy_url=""
if have tinyproxy && want tinyproxy; then
	if bench_tinyproxy "$work/tinyproxy" "${ports[2]}" "$check_url"; then
		tinyproxy_url="http://127.0.0.1:${ports[2]}"
		proxy_pid["$tinyproxy_url"]="$BENCH_PID"
	else
		echo "suite.sh: tinyproxy skipped"
	fi
	server_pids+=("$BENCH_PID")
fi

# mklist NAME N PREFIX [SUFFIX]: the same N URLs PREFIX<i>SUFFIX as a fetch
# list (NAME.txt), a curl config (NAME.curl) and vegeta targets (NAME.vegeta).
mklist() {
	awk -v n="$2" -v p="$3" -v s="${4:-}" -v f="$work/$1" 'BEGIN {
		for (i = 0; i < n; i++) {
			u = p i s
			print u > (f ".txt")
			printf "url = \"%s\"\noutput = \"/dev/null\"\n", u > (f ".curl")
			print "GET " u > (f ".vegeta")
		}
	}'
}

# timed LIMIT SIGNAL CMD...: runs CMD (stdout to $work/out, stderr to
# $work/err) for at most LIMIT seconds, then sends SIGNAL (and SIGKILL 10 s
# later); sets wall, cpu (user+sys seconds of CMD and its children).
timed() {
	local limit="$1" sig="$2" u s
	shift 2
	local TIMEFORMAT='%R %U %S'
	{ time timeout -s "$sig" -k 10 "$limit" "$@" >"$work/out" 2>"$work/err" || true; } 2>"$work/time"
	read -r wall u s <"$work/time"
	cpu="$(echo "$u + $s" | bc -l)"
}

# One run of TOOL over list NAME (N URLs), direct or through PROXY; sets ok
# (responses with status 200), wall and cpu. LIMIT bounds the run; with
# SECS set, the run is stopped after SECS seconds (the sustained case).
# shellcheck disable=SC2034 # wall and cpu are read by the callers
run_tool() {
	local tool="$1" name="$2" n="$3" proxy="${4:-}" secs="${5:-}"
	local limit="${secs:-300}" sig=TERM list="$work/$name" one
	one="$(head -n 1 "$list.txt")"
	rm -f "$work/records.jsonl" "$work/vegeta.bin"
	case "$tool" in
	fetch)
		local px=()
		if [ -n "$proxy" ]; then px=(--proxy "$proxy" --proxy-concurrency "$c"); fi
		[ -n "$secs" ] && sig=INT
		timed "$limit" "$sig" "$fetch" -q -o "$work/records.jsonl" --retries 0 -c "$c" "${px[@]}" "$list.txt"
		ok="$(grep -c '"ok":true' "$work/records.jsonl" || true)"
		;;
	hey | hey-go)
		local px=() bin=hey
		if [ -n "$proxy" ]; then px=(-x "$proxy"); fi
		[ "$tool" = hey-go ] && bin="$hey_go"
		timed "$limit" "$sig" "$bin" -n "$n" -c "$c" -disable-compression "${px[@]}" "$one"
		ok="$(awk '$1 == "[200]" { print $2 }' "$work/out")"
		;;
	curl)
		local px=()
		if [ -n "$proxy" ]; then px=(-x "$proxy"); fi
		[ -n "$secs" ] && sig=INT
		# The status of each transfer goes to stderr, unbuffered, so a run
		# stopped by a signal loses none.
		timed "$limit" "$sig" curl -s --no-progress-meter -Z --parallel-max "$c" "${px[@]}" -w '%{stderr}%{http_code}\n' -K "$list.curl"
		ok="$(grep -c '^200$' "$work/err" || true)"
		;;
	vegeta)
		local env=() d="${secs:-$limit}"
		if [ -n "$proxy" ]; then env=("HTTP_PROXY=$proxy"); fi
		timed $((d + 30)) TERM env "${env[@]}" vegeta attack -lazy -rate 0 -workers "$c" -max-workers "$c" \
			-duration "${d}s" -targets "$list.vegeta" -output "$work/vegeta.bin"
		ok="$(vegeta report -type=json "$work/vegeta.bin" | grep -o '"200":[0-9]*' | cut -d: -f2 || true)"
		;;
	esac
	ok="${ok:-0}"
}

# wrk_run URL [PROXY]: wrk for BENCH_WRK_SECS; sets ok, wall (wrk's own
# measured duration) and cpu. wrk sends the two header lines fetch and curl
# send by default (User-Agent, Accept), where alone it sends Host only: a
# proxy's cost grows with the lines it passes on (tinyproxy writes each with
# a system call of its own: 6% fewer req/s for wrk with the two), and the
# limit is the one for the same request.
wrk_run() {
	local url="$1" proxy="${2:-}" total bad dur
	local hdr=(-H "User-Agent: wrk" -H "Accept: */*")
	if [ -n "$proxy" ]; then
		WRK_TARGET="$url" timed $((BENCH_WRK_SECS + 30)) TERM wrk -t 2 -c "$c" -d "${BENCH_WRK_SECS}s" "${hdr[@]}" -s "$here/wrk-proxy.lua" "$proxy/"
	else
		timed $((BENCH_WRK_SECS + 30)) TERM wrk -t 2 -c "$c" -d "${BENCH_WRK_SECS}s" "${hdr[@]}" "$url"
	fi
	total="$(awk '/requests in/ { print $1 }' "$work/out")"
	bad="$(awk '/Non-2xx/ { print $NF }' "$work/out")"
	dur="$(awk '/requests in/ { sub(/s,$/, "", $4); print $4 }' "$work/out")"
	ok=$(( ${total:-0} - ${bad:-0} ))
	wall="${dur:-0}"
	[[ "$wall" =~ ^[0-9.]+$ ]] && [ "$wall" != 0 ] || wall=1
}

# proxy_ticks PROXY: the CPU time, in clock ticks, that the proxy's process
# has used so far, with its threads and the children it has waited for
# (user, system and both children's fields of /proc/PID/stat); empty when
# it cannot be read (no /proc, or no process known).
clk_tck="$(getconf CLK_TCK 2>/dev/null || echo 100)"
proxy_ticks() {
	[ -n "$1" ] || return 0
	local pid="${proxy_pid["$1"]:-}"
	[ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 0
	# The command name (field 2) may hold spaces: count from after it.
	sed 's/.*) //' "/proc/$pid/stat" | awk '{ print $12 + $13 + $14 + $15 }'
}

# run_once TOOL LIST N PROXY: one run of TOOL on LIST (wrk by time, on
# the list's URL without its query); sets ok, wall and cpu. The caller
# makes wrk's pause.
run_once() {
	if [ "$1" = wrk ]; then
		local url
		url="$(head -n 1 "$work/$2.txt")"
		wrk_run "${url%%\?*}" "$4"
	else
		run_tool "$1" "$2" "$3" "$4"
	fi
}

# Results: res[CASE|TOOL] is the list of values over the repeats.
declare -A res=()
add() { res["$1|$2"]="${res["$1|$2"]:-} $3"; }
div() { echo "scale=6; $1 / $2" | bc -l; }
note() { printf '  %-10s %-7s run %s: %s\n' "$1" "$2" "$3" "$4"; }

# rotated R TOOLS...: the tools, in turn from the R-th (1-based, modulo
# their number): each repeat starts with another tool, so that none always
# runs right after the same one (after wrk's flood, say).
rotated() {
	local r="$1"
	shift
	local n=$# i
	local all=("$@")
	for ((i = 0; i < n; i++)); do echo "${all[(i + r - 1) % n]}"; done
}

# rate_case CASE LIST N PROXY TOOLS...: URLs/s over the repeats, tools in turn
# within each repeat (rotated), wrk last and followed by a pause, since its
# flood of requests leaves the server and the machine busy for a moment; in
# the direct case also client CPU per URL. Through a proxy, also the
# client's CPU per URL (CASE_cpu) and the proxy's own per request
# (CASE_px): where the proxy is the bottleneck, these say whether a client
# costs the proxy more per request than another, and how much of the
# machine it leaves the proxy. On shared cores the proxy's figure moves
# from run to run too (0.90 to 1.15 of wrk's for fetch through squid, in
# runs minutes apart): read it over runs, as the rates.
rate_case() {
	local cs="$1" name="$2" n="$3" proxy="$4" r tool others=() last=() t0 t1
	shift 4
	for tool in "$@"; do
		if [ "$tool" = wrk ]; then last=(wrk); else others+=("$tool"); fi
	done
	# A warm-up run, not counted: the first run on a fresh server and
	# list pays for warming them, whichever tool it is.
	run_tool fetch "$name" "$n" "$proxy"
	for r in $(seq "$repeats"); do
		for tool in $(rotated "$r" "${others[@]}") "${last[@]}"; do
			t0="$(proxy_ticks "$proxy")"
			run_once "$tool" "$name" "$n" "$proxy"
			t1="$(proxy_ticks "$proxy")"
			[ "$tool" = wrk ] && sleep 2
			if [ "$ok" -le 0 ]; then note "$cs" "$tool" "$r" "no URL done ($(tail -n 1 "$work/err" 2>/dev/null))"; continue; fi
			add "$cs" "$tool" "$(div "$ok" "$wall")"
			if [ -z "$proxy" ]; then
				[ "$cs" = direct ] && add cpu "$tool" "$(div "$cpu * 1000000" "$ok")"
				note "$cs" "$tool" "$r" "$ok ok in ${wall}s, cpu ${cpu}s"
				continue
			fi
			add "${cs}_cpu" "$tool" "$(div "$cpu * 1000000" "$ok")"
			if [ -n "$t0" ] && [ -n "$t1" ]; then
				add "${cs}_px" "$tool" "$(div "($t1 - $t0) * 1000000" "($clk_tck * $ok)")"
				note "$cs" "$tool" "$r" "$ok ok in ${wall}s, cpu ${cpu}s, $cs cpu $(div "($t1 - $t0)" "$clk_tck")s"
			else
				note "$cs" "$tool" "$r" "$ok ok in ${wall}s, cpu ${cpu}s"
			fi
		done
	done
}

# pairs CASE LIST N PROXY: BENCH_PAIRS runs of fetch and of wrk back to
# back, fetch first in odd pairs and wrk first in even ones, wrk followed
# by its pause as in rate_case; each pair's fetch req/s over wrk's goes to
# res[CASE_pair|wrk]. Pairs cancel what moves slowly on the machine, and
# their number what moves from one run to the next.
pairs() {
	local cs="$1" name="$2" n="$3" proxy="$4" i tool f w order
	for i in $(seq "$BENCH_PAIRS"); do
		f="" w="" order="fetch wrk"
		[ $((i % 2)) = 1 ] || order="wrk fetch"
		for tool in $order; do
			run_once "$tool" "$name" "$n" "$proxy"
			[ "$tool" = wrk ] && sleep 2
			[ "$ok" -gt 0 ] || continue
			if [ "$tool" = wrk ]; then w="$(div "$ok" "$wall")"; else f="$(div "$ok" "$wall")"; fi
		done
		if [ -z "$f" ] || [ -z "$w" ]; then note "$cs" pair "$i" "a run did no URL: no ratio"; continue; fi
		add "${cs}_pair" wrk "$(div "$f" "$w")"
		note "$cs" pair "$i" "$order: fetch $(printf '%.0f' "$f") req/s, wrk $(printf '%.0f' "$w"), $(printf '%.3f' "$(div "$f" "$w")")"
	done
}

peers_but() { local t; for t in "${peers[@]}"; do [[ " $* " == *" $t "* ]] || echo "$t"; done; }
mapfile -t count_peers < <(peers_but wrk)

started="$(date +%s)"
if want direct; then
	echo "suite.sh: direct: $BENCH_DIRECT x 1 KiB from $web_name"
	mklist direct "$BENCH_DIRECT" "$web$(web_path 1024)?i="
	rate_case direct direct "$BENCH_DIRECT" "" fetch "${peers[@]}"
fi
if want sustained; then
	echo "suite.sh: sustained: $BENCH_LINES lines from the Go target, each tool stopped after ${BENCH_SECS}s"
	mklist sustained "$BENCH_LINES" "$gotarget/s/" "?size=1024"
	for r in $(seq "$repeats"); do
		for tool in $(rotated "$r" fetch curl vegeta); do
			if [ "$tool" != fetch ] && ! have_peer "$tool"; then continue; fi
			run_tool "$tool" sustained "$BENCH_LINES" "" "$BENCH_SECS"
			add sustained "$tool" "$ok"
			note sustained "$tool" "$r" "$ok done, stopped after ${wall}s"
		done
	done
	rm -f "$work"/sustained.*
fi
if want big; then
	# shellcheck disable=SC2153 # BENCH_BIG: set by size
	echo "suite.sh: big: $BENCH_BIG x 100 KiB from $web_name"
	mklist big "$BENCH_BIG" "$web$(web_path 102400)?i="
	rate_case big big "$BENCH_BIG" "" fetch "${peers[@]}"
fi
proxied_peers=("${peers[@]}")
if [ -z "$alias_host" ]; then
	mapfile -t proxied_peers < <(peers_but vegeta wrk)
	have_peer wrk && proxied_peers+=(wrk)
	have_peer vegeta && echo "suite.sh: no name for 127.0.0.1 but localhost in /etc/hosts: vegeta skipped through proxies"
fi
for px in squid tinyproxy; do
	want "$px" || continue
	case "$px" in squid) purl="$squid_url" ;; *) purl="$tinyproxy_url" ;; esac
	if [ -z "$purl" ]; then echo "suite.sh: $px: not installed or not started: skipped"; continue; fi
	echo "suite.sh: $px: $BENCH_PROXY x 1 KiB from $web_name through $px, proxy concurrency $c"
	mklist "$px" "$BENCH_PROXY" "http://$proxy_host:${web#http://127.0.0.1:}$(web_path 1024)?i="
	rate_case "$px" "$px" "$BENCH_PROXY" "$purl" fetch "${proxied_peers[@]}"
	if [ "$BENCH_PAIRS" -gt 0 ] && have_peer wrk; then
		echo "suite.sh: $px: $BENCH_PAIRS pairs of fetch and wrk back to back"
		pairs "$px" "$px" "$BENCH_PROXY" "$purl"
	fi
done
if want slow; then
	# ideal N: N URLs in rounds of c at once, each round BENCH_SLOW_MS long.
	ideal() { echo "scale=6; $(( ($1 + c - 1) / c )) * $BENCH_SLOW_MS / 1000" | bc; }
	ideal="$(ideal "$BENCH_SLOW")"
	echo "suite.sh: slow: $BENCH_SLOW URLs of ${BENCH_SLOW_MS} ms from the Go target: makespan / ideal ${ideal}s"
	mklist slow "$BENCH_SLOW" "$gotarget/d/" "?delay=${BENCH_SLOW_MS}ms"
	for r in $(seq "$repeats"); do
		for tool in $(rotated "$r" fetch "${count_peers[@]}"); do
			run_tool "$tool" slow "$BENCH_SLOW" ""
			# hey -n N -c C makes C workers of N/C requests each, rounded down.
			expect="$BENCH_SLOW"
			[[ "$tool" == hey* ]] && expect=$(( BENCH_SLOW / c * c ))
			if [ "$ok" -ne "$expect" ]; then note slow "$tool" "$r" "only $ok of $expect ok: no figure"; continue; fi
			add slow "$tool" "$(div "$wall" "$(ideal "$ok")")"
			note slow "$tool" "$r" "$ok ok in ${wall}s"
		done
		# bench/minimal, the least a Go program does to fetch the list,
		# timed from start to exit like the clients: the floor with a
		# start and an end, for a client on Go's runtime and net/http.
		timed 300 TERM "$work/minimal" -c "$c" "$work/slow.txt"
		ok="$(awk '$2 == "ok" { print $1 }' "$work/out")"
		if [ "${ok:-0}" -eq "$BENCH_SLOW" ]; then
			add slow minimal "$(div "$wall" "$ideal")"
			note slow minimal "$r" "$ok ok in ${wall}s"
		else
			note slow minimal "$r" "only ${ok:-0} of $BENCH_SLOW ok: no figure"
		fi
		# wrk on one such URL for BENCH_WRK_SECS: its steady rate against
		# c URLs a round of BENCH_SLOW_MS is the floor that the target and
		# the machine leave any client (no start, no last round).
		if have_peer wrk; then
			wrk_run "$gotarget/d/0?delay=${BENCH_SLOW_MS}ms"
			sleep 2
			if [ "$ok" -le 0 ]; then note slow wrk "$r" "no URL done ($(tail -n 1 "$work/err" 2>/dev/null))"; continue; fi
			add slow wrk "$(echo "scale=6; ($c * 1000 / $BENCH_SLOW_MS) / ($ok / $wall)" | bc -l)"
			note slow wrk "$r" "$ok ok in ${wall}s (steady state)"
		fi
	done
fi
# pace CASE N RATE: N starts at RATE per second by fetch --rate and by
# vegeta, timed on arrival at the Go target: the mean rate of each run.
pace() {
	local cs="$1" n="$2" rate="$3" r tool secs got first last
	echo "suite.sh: $cs: $n starts at $rate/s, timed on arrival at the Go target"
	mklist "$cs" "$n" "$gotarget/rate/"
	for r in $(seq "$repeats"); do
		for tool in fetch vegeta; do
			if [ "$tool" = vegeta ] && ! have_peer vegeta; then continue; fi
			curl -s -o /dev/null "$gotarget/_arrivals?reset=1"
			if [ "$tool" = fetch ]; then
				timed 300 TERM "$fetch" -q -o "$work/records.jsonl" --retries 0 -c "$c" --rate "$rate/s" "$work/$cs.txt"
			else
				secs="$(echo "scale=6; $n / $rate" | bc)"
				timed 300 TERM vegeta attack -rate "$rate/1s" -duration "${secs}s" -workers "$c" -max-workers "$c" \
					-targets "$work/$cs.vegeta" -output "$work/vegeta.bin"
			fi
			read -r got first last < <(curl -s "$gotarget/_arrivals?reset=1")
			if [ "$got" -lt 2 ]; then note "$cs" "$tool" "$r" "only $got arrivals: no figure"; continue; fi
			add "$cs" "$tool" "$(echo "scale=6; ($got - 1) * 1000000000 / ($last - $first)" | bc)"
			note "$cs" "$tool" "$r" "$got starts in $(echo "scale=3; ($last - $first) / 1000000000" | bc)s"
		done
	done
}
if want rate; then pace rate "$BENCH_RATE_N" "$BENCH_RATE"; fi
if want fastrate; then pace fastrate "$BENCH_FAST_RATE_N" "$BENCH_FAST_RATE"; fi
# pace_redis CASE N RATE FLAG: N starts at RATE with the rate kept in
# Redis, by one fetch process (case CASE) and by two sharing it (CASE2),
# timed on arrival at the Go target. FLAG --rate: one rate for all, the
# figure its mean rate; --host-rate: the starts spread over the target's
# hosts (hosts.txt), each with its own rate, the figure the mean rate of the
# host furthest from RATE; --proxy-rate: through the Go proxies
# (proxies.txt), each with its own rate, the figure the mean rate of all
# over the number of proxies.
# redis_cpu prints the CPU seconds the suite's redis-server has used.
redis_cpu() {
	redis-cli -p "${ports[3]}" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { print s }'
}

pace_redis() {
	local case="$1" n="$2" rate="$3" flag="$4" r procs cs k got first last pids hosts h hr worst e span np=1 cpu0 cpu1 calls
	local redis="redis://127.0.0.1:${ports[3]}" via=()
	hosts=("$gotarget")
	case "$flag" in
	--rate)
		echo "suite.sh: $case: $n starts at $rate/s through Redis, by one process and by two, timed on arrival at the Go target"
		mklist "$case" "$n" "$gotarget/rate/"
		;;
	--proxy-rate)
		np="$(wc -l <"$work/proxies.txt")"
		via=(--proxies "$work/proxies.txt")
		echo "suite.sh: $case: $n starts through $np proxies at $rate/s each through Redis, by one process and by two, timed on arrival at the Go target"
		mklist "$case" "$n" "$gotarget/rate/"
		;;
	--host-rate)
		if [ -s "$work/hosts.txt" ]; then mapfile -t hosts <"$work/hosts.txt"; fi
		echo "suite.sh: $case: $n starts on ${#hosts[@]} hosts at $rate/s each through Redis, by one process and by two, timed on arrival at the Go target"
		printf '%s\n' "${hosts[@]}" | awk -v n="$n" '{ h[NR - 1] = $0 } END {
			for (i = 0; i < n; i++) print h[i % NR] "/rate/" i }' >"$work/$case.txt"
		;;
	esac
	for r in $(seq "$repeats"); do
		for procs in 1 2; do
			cs="$case"
			[ "$procs" = 1 ] || cs="$case$procs"
			redis-cli -p "${ports[3]}" flushall >/dev/null
			redis-cli -p "${ports[3]}" config resetstat >/dev/null
			read -r cpu0 < <(redis_cpu)
			curl -s -o /dev/null "$gotarget/_arrivals?reset=1"
			if [ "$procs" = 1 ]; then
				timed 300 TERM "$fetch" -q -o "$work/records.jsonl" --retries 0 -c "$c" "$flag" "$rate/s" --redis "$redis" \
					"${via[@]}" "$work/$case.txt"
			else
				pids=()
				for k in $(seq "$procs"); do
					timeout -k 10 300 "$fetch" -q -o "$work/records$k.jsonl" --retries 0 -c "$c" "$flag" "$rate/s" --redis "$redis" \
						"${via[@]}" --shard "$k/$procs" "$work/$case.txt" &
					pids+=($!)
				done
				wait "${pids[@]}"
			fi
			worst="" e=-1
			for h in "${hosts[@]}"; do
				if [ "$flag" = --host-rate ]; then
					read -r got first last < <(curl -s "$gotarget/_arrivals?host=${h#http://}")
				else
					read -r got first last < <(curl -s "$gotarget/_arrivals")
				fi
				if [ "$got" -lt 2 ]; then worst="" && note "$cs" fetch "$r" "only $got arrivals at $h: no figure" && break; fi
				hr="$(echo "scale=6; ($got - 1) * 1000000000 / ($last - $first) / $np" | bc)"
				if [ "$(echo "d = $hr - $rate; if (d < 0) d = -d; d > $e" | bc -l)" = 1 ]; then
					worst="$hr" e="$(echo "d = $hr - $rate; if (d < 0) d = -d; d" | bc -l)"
					span="$got starts in $(echo "scale=3; ($last - $first) / 1000000000" | bc)s"
				fi
			done
			curl -s -o /dev/null "$gotarget/_arrivals?reset=1"
			[ -n "$worst" ] || continue
			add "$cs" fetch "$worst"
			# What a start cost Redis: its script calls and its CPU.
			read -r cpu1 < <(redis_cpu)
			calls="$(redis-cli -p "${ports[3]}" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')"
			span="$span; Redis: $(printf '%.2f' "$(echo "scale=4; ${calls:-0} / $n" | bc)") script calls and $(printf '%.1f' "$(echo "scale=2; ($cpu1 - $cpu0) * 1000000 / $n" | bc)") us of CPU a start"
			case "$flag" in
			--rate) note "$cs" fetch "$r" "$span, $procs process(es)" ;;
			--proxy-rate) note "$cs" fetch "$r" "$span through $np proxies, $(printf '%.2f' "$worst")/s each, $procs process(es)" ;;
			*) note "$cs" fetch "$r" "$procs process(es); the host furthest from the rate: $(printf '%.2f' "$worst")/s, $span" ;;
			esac
		done
	done
	rm -f "$work"/records?.jsonl
}
if want redisrate || want redishost || want redisproxy; then
	if ! have redis-server; then
		echo "suite.sh: redisrate, redishost, redisproxy: redis-server is not installed: skipped"
	elif bench_redis "$work/redis" "${ports[3]}"; then
		server_pids+=("$BENCH_PID")
		if want redisrate; then pace_redis redisrate "$BENCH_REDIS_RATE_N" "$BENCH_REDIS_RATE" --rate; fi
		if want redishost; then pace_redis redishost "$BENCH_REDIS_EACH_N" "$BENCH_REDIS_EACH_RATE" --host-rate; fi
		if want redisproxy; then pace_redis redisproxy "$BENCH_REDIS_EACH_N" "$BENCH_REDIS_EACH_RATE" --proxy-rate; fi
	else
		echo "suite.sh: redisrate, redishost, redisproxy: redis-server did not start: skipped"
	fi
fi
elapsed=$(( $(date +%s) - started ))

# stats CASE TOOL: "median min max" of the values, empty when there are none.
stats() {
	local v="${res["$1|$2"]:-}"
	[ -n "${v// /}" ] || return 0
	# shellcheck disable=SC2086 # one value a word
	printf '%s\n' $v | sort -g | awk '{ a[NR] = $1 } END {
		m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
		print m, a[1], a[NR] }'
}
median() { local m _; read -r m _ < <(stats "$1" "$2"); echo "${m:-}"; }
# fmt CASE VALUE: the value in the case's precision.
fmt() {
	case "$1" in
	slow) printf '%.3f' "$2" ;;
	rate | fastrate | redis*) printf '%.2f' "$2" ;;
	cpu | *_cpu | *_px) printf '%.1f' "$2" ;;
	*) printf '%.0f' "$2" ;;
	esac
}
ratio() {
	local f p
	f="$(median "$1" fetch)" p="$(median "$1" "$2")"
	if [ -z "$f" ] || [ -z "$p" ] || [ "$(echo "$p == 0" | bc)" = 1 ]; then echo "-"; return; fi
	printf '%.2f' "$(div "$f" "$p")"
}

declare -A label=(
	[direct]="$BENCH_DIRECT x 1 KiB, req/s"
	[cpu]="client CPU, us/URL"
	[sustained]="${BENCH_LINES} lines, done in ${BENCH_SECS}s"
	[big]="$BENCH_BIG x 100 KiB, req/s"
	[squid]="via squid, req/s"
	[tinyproxy]="via tinyproxy, req/s"
	[squid_cpu]="client CPU via squid, us/URL"
	[squid_px]="squid's CPU, us/request"
	[tinyproxy_cpu]="client CPU via tinyproxy, us/URL"
	[tinyproxy_px]="tinyproxy's CPU, us/request"
	[slow]="$BENCH_SLOW x ${BENCH_SLOW_MS}ms, makespan/ideal"
	[rate]="$BENCH_RATE_N at ${BENCH_RATE}/s, mean rate/s"
	[fastrate]="$BENCH_FAST_RATE_N at ${BENCH_FAST_RATE}/s, mean rate/s"
	[redisrate]="$BENCH_REDIS_RATE_N at ${BENCH_REDIS_RATE}/s redis, rate/s"
	[redisrate2]="the same, 2 processes, rate/s"
	[redishost]="$BENCH_REDIS_EACH_N on $BENCH_REDIS_HOSTS hosts at ${BENCH_REDIS_EACH_RATE}/s each, redis, worst rate/s"
	[redishost2]="the same, 2 processes, worst rate/s"
	[redisproxy]="$BENCH_REDIS_EACH_N via $BENCH_REDIS_PROXIES proxies at ${BENCH_REDIS_EACH_RATE}/s each, redis, rate/s each"
	[redisproxy2]="the same, 2 processes, rate/s each"
)
tools=(fetch hey hey-go curl vegeta wrk)
rows=(direct cpu)
for cs in $all_cases; do
	case "$cs" in
	direct) ;;
	squid | tinyproxy) rows+=("$cs" "${cs}_cpu" "${cs}_px") ;;
	*) rows+=("$cs") ;;
	esac
done

echo
echo "fetch side by side: concurrency $c, $repeats repeat(s), median [min..max]; f/peer = fetch's median / the peer's, same run"
{
	printf '%-30s' case
	for t in "${tools[@]}"; do printf ' %-24s' "$t"; done
	for t in "${tools[@]:1}"; do printf ' %7s' "f/$t"; done
	echo
} >"$work/table"
mkdir -p "$(dirname "$tsv")"
printf 'kind\tcase\tunit\ttool\tmedian\tmin\tmax\truns\tfetch_over_tool\n' >"$tsv"
for cs in "${rows[@]}"; do
	have_any=0
	for t in "${tools[@]}"; do [ -n "$(median "$cs" "$t")" ] && have_any=1; done
	[ "$have_any" = 1 ] || continue
	{
		printf '%-30s' "${label[$cs]}"
		for t in "${tools[@]}"; do
			read -r m lo hi < <(stats "$cs" "$t"; echo)
			if [ -n "${m:-}" ]; then
				printf ' %-24s' "$(fmt "$cs" "$m") [$(fmt "$cs" "$lo")..$(fmt "$cs" "$hi")]"
				# shellcheck disable=SC2086
				printf 'result\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$cs" "${label[$cs]#*, }" "$t" "$m" "$lo" "$hi" \
					"$(echo ${res["$cs|$t"]} | tr ' ' ,)" "$(ratio "$cs" "$t")" >>"$tsv"
			else
				printf ' %-24s' "-"
			fi
		done
		for t in "${tools[@]:1}"; do printf ' %7s' "$(ratio "$cs" "$t")"; done
		echo
	} >>"$work/table"
done
cat "$work/table"
# bench/minimal is not in the table (one case only): its row is the TSV's.
if [ -n "$(median slow minimal)" ]; then
	read -r m lo hi < <(stats slow minimal)
	# shellcheck disable=SC2086 # one value a word
	printf 'result\tslow\t%s\tminimal\t%s\t%s\t%s\t%s\t%s\n' "${label[slow]#*, }" "$m" "$lo" "$hi" \
		"$(echo ${res["slow|minimal"]} | tr ' ' ,)" "$(ratio slow minimal)" >>"$tsv"
fi

# gmean CASE TOOL: "mean lo hi n" of res[CASE|TOOL], ratios: the geometric
# mean and its 95% interval (see bench_gmean); empty when there are fewer
# than two.
gmean() {
	local v="${res["$1|$2"]:-}"
	# shellcheck disable=SC2086 # one value a word
	[ "$(echo $v | wc -w)" -ge 2 ] || return 0
	# shellcheck disable=SC2086
	printf '%s\n' $v | bench_gmean
}

# goal CASE PEER OP TARGET TEXT: fetch's median over the peer's (or, with
# PEER "-", fetch's median itself) compared with TARGET.
goal() {
	local cs="$1" peer="$2" op="$3" want="$4" text="$5" v verdict
	if [ "$peer" = - ]; then v="$(median "$cs" fetch)"; else v="$(ratio "$cs" "$peer")"; fi
	if [ -z "$v" ] || [ "$v" = - ]; then
		verdict="skipped (no figure)"
		v="-"
	elif [ "$(echo "$v $op $want" | bc -l)" = 1 ]; then
		verdict=met
	else
		verdict=MISSED
	fi
	[ "$v" = - ] || v="$(printf '%.3f' "$v")"
	printf '  %-52s %8s  %s\n' "$text" "$v" "$verdict"
	printf 'goal\t%s\t%s\t%s\t%s\t%s\t%s\t-\t%s\n' "$cs" "$text" "$peer" "$v" "$op" "$want" "$verdict" >>"$tsv"
}

# goal_pairs CASE TARGET TEXT: the proxy goal "fetch req/s / wrk's >=
# TARGET" on the geometric mean of CASE's pairs, with its interval; on the
# medians (goal) when there are not two pairs.
goal_pairs() {
	local cs="$1" want="$2" text="$3" m lo hi n verdict interval held
	read -r m lo hi n < <(gmean "${cs}_pair" wrk; echo)
	if [ -z "${m:-}" ]; then
		goal "$cs" wrk '>=' "$want" "$text"
		return
	fi
	m="$(printf '%.3f' "$m")" # decided as printed
	verdict=MISSED
	[ "$(echo "$m >= $want" | bc -l)" = 1 ] && verdict=met
	interval="$(printf '%.3f..%.3f' "$lo" "$hi")"
	held=""
	if [ "$(echo "$lo < $want && $want < $hi" | bc -l)" = 1 ]; then
		held="; the interval holds $want: this run cannot tell"
	fi
	printf '  %-52s %8s  %s (geometric mean of %d pairs, 95%% interval %s%s)\n' "$text" "$m" "$verdict" "$n" "$interval" "$held"
	# shellcheck disable=SC2086 # one value a word
	printf 'pairs\t%s\tfetch req/s / wrk req/s, geometric mean, 95%% interval\twrk\t%s\t%s\t%s\t%s\t-\n' "$cs" "$m" "$lo" "$hi" \
		"$(echo ${res["${cs}_pair|wrk"]} | tr ' ' ,)" >>"$tsv"
	printf 'goal\t%s\t%s\twrk\t%s\t>=\t%s\t%s\t%s\n' "$cs" "$text" "$m" "$want" "$interval" "$verdict" >>"$tsv"
}
echo
echo "goals (ratios from this run):"
goal direct hey '>=' 1 "direct: fetch req/s / hey's >= 1"
goal cpu hey '<=' 1 "direct: fetch CPU per URL / hey's <= 1"
goal sustained curl '>=' 1 "sustained: fetch URLs done / curl's >= 1"
goal sustained vegeta '>=' 1.2 "sustained: fetch URLs done / vegeta's >= 1.2"
goal big curl '>=' 1 "100 KiB: fetch req/s / curl's >= 1"
goal_pairs squid 0.95 "squid: fetch req/s / wrk's >= 0.95"
goal_pairs tinyproxy 0.8 "tinyproxy: fetch req/s / wrk's >= 0.8"
goal slow - '<=' 1.03 "latency-bound: fetch makespan / ideal <= 1.03"
for cs in rate fastrate redisrate redisrate2 redishost redishost2 redisproxy redisproxy2; do
	case "$cs" in
	rate) want_rate="$BENCH_RATE" ;;
	fastrate) want_rate="$BENCH_FAST_RATE" ;;
	redishost* | redisproxy*) want_rate="$BENCH_REDIS_EACH_RATE" ;;
	*) want_rate="$BENCH_REDIS_RATE" ;;
	esac
	f_rate="$(median "$cs" fetch)"
	if [ -n "$f_rate" ]; then
		res["${cs}_err|fetch"]="$(echo "e = ($f_rate - $want_rate) / $want_rate; if (e < 0) e = -e; e" | bc -l)"
	fi
	what="mean rate"
	[[ "$cs" != redishost* ]] || what="furthest host's rate"
	[[ "$cs" != redisproxy* ]] || what="mean rate per proxy"
	goal "${cs}_err" - '<=' 0.005 "$cs: |fetch $what / ${want_rate} - 1| <= 0.005"
done
if [ -n "$hey_go" ]; then
	echo "not goals: the same hey built with fetch's Go (hey-go), on the same net/http:"
	printf '  %-52s %8s\n' "direct: fetch req/s / hey-go's" "$(ratio direct hey-go)" "direct: fetch CPU per URL / hey-go's" "$(ratio cpu hey-go)"
fi
if [ -n "$(median slow wrk)" ]; then
	printf 'not a goal: the floor of the latency-bound case, wrk steady at c=%s on one URL:\n  %-52s %8s\n' "$c" \
		"latency-bound: wrk's rate, as makespan / ideal" "$(printf '%.3f' "$(median slow wrk)")"
fi
if [ -n "$(median slow minimal)" ]; then
	read -r m lo hi < <(stats slow minimal)
	printf 'not a goal: the least a Go program does (bench/minimal), start to exit, c=%s:\n  %-52s %8s [%s..%s]\n' "$c" \
		"latency-bound: makespan / ideal" "$(fmt slow "$m")" "$(fmt slow "$lo")" "$(fmt slow "$hi")"
fi
echo
echo "suite.sh: ${elapsed}s of runs; load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo ?) now; table as TSV in $tsv"
