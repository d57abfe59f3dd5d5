#!/usr/bin/env bash
# bench/setup.sh: installs the peers that bench/suite.sh runs beside fetch,
# when they are missing: nginx, squid, tinyproxy, hey, wrk and curl from
# Debian, vegeta with go install. No package service is left running: the
# suite runs each server itself, on a free loopback port, with a config of
# its own. Needs root (apt-get).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
bench_path
vegeta_module="github.com/tsenart/vegeta/v12@v12.13.0"

declare -A bin_of=([nginx]=nginx [squid]=squid [tinyproxy]=tinyproxy [hey]=hey [wrk]=wrk [curl]=curl)
missing=()
for pkg in nginx squid tinyproxy hey wrk curl; do
	command -v "${bin_of[$pkg]}" >/dev/null || missing+=("$pkg")
done

if [ "${#missing[@]}" -gt 0 ]; then
	echo "setup.sh: installing ${missing[*]}"
	# Keep package scripts from starting the daemons on their default ports.
	made_policy=
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	trap 'if [ -n "$made_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi' EXIT
	apt-get update -q
	DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 apt-get install -y -q --no-install-recommends "${missing[@]}"
	# Should a daemon have started all the same, stop the one the package
	# started (its own pid file), nothing else.
	for pkg in "${missing[@]}"; do
		for pidfile in "/run/$pkg.pid" "/run/$pkg/$pkg.pid" "/var/run/$pkg.pid"; do
			if [ -s "$pidfile" ]; then
				kill "$(cat "$pidfile")" 2>/dev/null || true
			fi
		done
	done
else
	echo "setup.sh: nginx, squid, tinyproxy, hey, wrk and curl are installed"
fi

if command -v vegeta >/dev/null; then
	echo "setup.sh: vegeta is installed"
else
	echo "setup.sh: go install $vegeta_module"
	(cd / && GOFLAGS='' go install "$vegeta_module")
fi
