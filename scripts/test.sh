#!/usr/bin/env bash
# scripts/test.sh: the one command that sets up a fresh Debian machine and
# runs every test of fetch: go vet, the race-enabled test suite, and a short
# run of every fuzz target.
#
# Environment:
#   FUZZTIME   how long each fuzz target runs (default 10s; 0 skips fuzzing)
set -euo pipefail

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
FUZZTIME="${FUZZTIME:-10s}"

if ! command -v go >/dev/null 2>&1; then
	echo "test.sh: go not found on PATH (nor in /usr/local/go/bin); install Go $(sed -n 's/^go //p' go.mod) first" >&2
	exit 1
fi

# Real proxies and servers the loopback tests run: microsocks (SOCKS5),
# tinyproxy (HTTP with Basic authentication), squid (CONNECT tunnels and its
# own error answers) and redis-server (distributed mode). Each is installed
# with apt-get when missing.
missing=()
command -v microsocks >/dev/null 2>&1 || missing+=(microsocks)
command -v tinyproxy >/dev/null 2>&1 || missing+=(tinyproxy)
command -v squid >/dev/null 2>&1 || missing+=(squid)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" -ne 0 ]; then
		sudo="sudo"
	fi
	echo "test.sh: installing ${missing[*]}" >&2
	$sudo apt-get update
	# A package's own service must not start: the tests run their own.
	$sudo env DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y "${missing[@]}"
fi

echo "== go vet ./..." >&2
go vet ./...

echo "== go test -race -count=1 ./..." >&2
go test -race -count=1 ./...

# The shared limits again with their calls run as scripts (EVALSHA), as on
# a Redis before 7.0: above, they ran as the library's functions.
echo "== go test -count=1 ./limits/redis/ -args -scripts" >&2
go test -count=1 ./limits/redis/ -args -scripts

# The memory tests again without the race detector, whose runtime changes
# what the heap holds: their bounds are checked here.
echo "== go test -count=1 -run Memory ./... (without -race)" >&2
go test -count=1 -run 'Memory|memory' ./...

# fuzz_one PKG FUZZ: runs one fuzz target for FUZZTIME. Go 1.26's fuzz
# coordinator can end a run that found nothing with "context deadline
# exceeded" at the end of -fuzztime, on a loaded machine (golang/go#75804,
# fixed in Go 1.27): such a failure, with no failing input written to
# testdata/fuzz, is said and passed over. Any other failure fails.
fuzz_one() {
	local pkg="$1" fuzz="$2" dir="$1/testdata/fuzz/$2" log before after
	log="$(mktemp)"
	before="$(ls "$dir" 2>/dev/null || true)"
	if go test -run '^$' -fuzz "^${fuzz}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg" </dev/null >"$log" 2>&1; then
		cat "$log"
		rm -f "$log"
		return 0
	fi
	cat "$log"
	after="$(ls "$dir" 2>/dev/null || true)"
	if [ "$before" = "$after" ] && grep -qx '    context deadline exceeded' "$log"; then
		echo "test.sh: $fuzz: \"context deadline exceeded\" at the end of -fuzztime, no failing input written: Go's fuzz coordinator (golang/go#75804), not a failure of $fuzz" >&2
		rm -f "$log"
		return 0
	fi
	rm -f "$log"
	return 1
}

if [ "$FUZZTIME" != "0" ]; then
	# Every Fuzz* function of every package, found by grep so new ones are
	# included without editing this script.
	{ grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(' . || true; } | sort | while read -r file; do
		pkg="./$(dirname "${file#./}")"
		grep -oE '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //' | while read -r fuzz; do
			echo "== fuzz $pkg $fuzz ($FUZZTIME)" >&2
			fuzz_one "$pkg" "$fuzz"
		done
	done
fi

echo "test.sh: all tests passed" >&2
