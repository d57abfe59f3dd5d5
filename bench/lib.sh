# shellcheck shell=bash
# bench/lib.sh: what the scripts in bench/ share. Source it; it defines
# functions only and starts nothing.

# bench_path adds Go's bin directories (the toolchain's and go install's).
bench_path() {
	export PATH="$PATH:/usr/local/go/bin"
	local gobin
	if gobin="$(go env GOPATH 2>/dev/null)"; then
		export PATH="$PATH:${gobin%%:*}/bin"
	fi
}

# bench_build DIR builds fetch and the loopback helper into DIR, from the
# repository that holds bench/.
bench_build() {
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	(cd "$root" && go build -o "$1/fetch" . && go build -o "$1/loopback" ./bench/loopback)
}

# bench_wait_for FILE WORD waits up to 10 s for WORD to appear in FILE.
bench_wait_for() {
	local _
	for _ in $(seq 100); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "bench: timed out waiting for '$2' in $1" >&2
	return 1
}

# bench_loopback DIR ARGS... starts the loopback helper (built by
# bench_build into DIR) with -dir DIR and ARGS, waits until it is ready and
# sets LOOPBACK_PID. DIR then has urls.txt, proxies.txt and target.txt.
bench_loopback() {
	local dir="$1"
	shift
	"$dir/loopback" -dir "$dir" "$@" >"$dir/loopback.ready" &
	# shellcheck disable=SC2034 # read by the caller
	LOOPBACK_PID=$!
	bench_wait_for "$dir/loopback.ready" ready
}
