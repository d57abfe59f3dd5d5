# shellcheck shell=bash
# bench/lib.sh: what the scripts in bench/ share. Source it; it defines
# functions only and starts nothing.
# shellcheck disable=SC2034 # BENCH_PID, LOOPBACK_PID: set for the scripts that source it

# bench_path adds Go's bin directories (the toolchain's and go install's).
bench_path() {
	export PATH="$PATH:/usr/local/go/bin"
	local gobin
	if gobin="$(go env GOPATH 2>/dev/null)"; then
		export PATH="$PATH:${gobin%%:*}/bin"
	fi
}

# bench_build DIR builds fetch (static, as the README's Install says) and
# the loopback helper into DIR, from the repository that holds bench/.
bench_build() {
	local root
	root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
	(cd "$root" && CGO_ENABLED=0 go build -o "$1/fetch" . && go build -o "$1/loopback" ./bench/loopback)
}

# bench_stop PID...: asks each process to end, gives each 5 s to end on its
# own (squid removes its shared memory segments in /dev/shm only then),
# and kills what is left.
bench_stop() {
	local pid _
	for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
	for pid in "$@"; do
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
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

# bench_wait_url URL [PROXY]: up to 10 s for URL to answer 200 (through
# PROXY when given).
bench_wait_url() {
	local _ x=()
	if [ -n "${2:-}" ]; then x=(-x "$2"); fi
	for _ in $(seq 100); do
		[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "${x[@]}" "$1" 2>/dev/null)" = 200 ] && return 0
		sleep 0.1
	done
	return 1
}

# bench_proxy_host prints a name for 127.0.0.1 other than localhost from
# /etc/hosts, else 127.0.0.1: Go clients (vegeta takes its proxy from
# HTTP_PROXY) never send a loopback IP or localhost to a proxy.
bench_proxy_host() {
	local alias
	alias="$(awk '$1 == "127.0.0.1" && $2 != "localhost" { print $2; exit }' /etc/hosts 2>/dev/null || true)"
	echo "${alias:-127.0.0.1}"
}

# The servers: each bench_SERVER DIR PORT ... starts one on 127.0.0.1:PORT
# with its config and logs in DIR, sets BENCH_PID to its process, waits
# until it answers and returns non-zero, saying why on stderr, when it does
# not. The caller stops it.

# bench_nginx DIR PORT: nginx serving /1k and /100k (zeros).
bench_nginx() {
	local d="$1" port="$2"
	mkdir -p "$d/www" "$d/logs"
	head -c 1024 /dev/zero >"$d/www/1k"
	head -c 102400 /dev/zero >"$d/www/100k"
	cat >"$d/nginx.conf" <<-EOF2
		user root;
		worker_processes auto;
		daemon off;
		pid $d/nginx.pid;
		error_log $d/logs/error.log warn;
		events { worker_connections 4096; }
		http {
		    access_log off;
		    sendfile on;
		    tcp_nopush on;
		    keepalive_requests 1000000;
		    keepalive_timeout 60s;
		    client_body_temp_path $d/body;
		    proxy_temp_path $d/proxy;
		    fastcgi_temp_path $d/fastcgi;
		    uwsgi_temp_path $d/uwsgi;
		    scgi_temp_path $d/scgi;
		    server {
		        listen 127.0.0.1:$port;
		        root $d/www;
		    }
		}
	EOF2
	nginx -p "$d" -c "$d/nginx.conf" 2>"$d/logs/stderr" &
	BENCH_PID=$!
	bench_wait_url "http://127.0.0.1:$port/1k" && return 0
	echo "bench: nginx did not start ($(tail -n 1 "$d/logs/stderr" 2>/dev/null))" >&2
	return 1
}

# bench_redis DIR PORT: a redis-server of its own on 127.0.0.1:PORT, keeping
# nothing on disk; sets BENCH_PID.
bench_redis() {
	local d="$1" port="$2" _
	mkdir -p "$d"
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$d" \
		--logfile "$d/redis.log" &
	BENCH_PID=$!
	for _ in $(seq 100); do
		redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && return 0
		sleep 0.1
	done
	echo "bench: redis-server did not start ($(tail -n 1 "$d/redis.log" 2>/dev/null))" >&2
	return 1
}

# bench_squid DIR PORT CHECK_URL: squid with no cache and no logs, one
# process (-N); CHECK_URL is fetched through it to see that it is up.
bench_squid() {
	local d="$1" port="$2"
	mkdir -p "$d"
	chmod 777 "$d"
	cat >"$d/squid.conf" <<-EOF2
		http_port 127.0.0.1:$port
		http_access allow all
		cache deny all
		access_log none
		cache_store_log none
		cache_log $d/cache.log
		pid_filename $d/squid.pid
		coredump_dir $d
		dns_nameservers 127.0.0.1
		pinger_enable off
		shutdown_lifetime 0 seconds
		max_filedescriptors 8192
		via off
		forwarded_for delete
	EOF2
	squid -N -f "$d/squid.conf" >"$d/stderr" 2>&1 &
	BENCH_PID=$!
	bench_wait_url "$3" "http://127.0.0.1:$port" && return 0
	echo "bench: squid did not start ($(tail -n 1 "$d/cache.log" 2>/dev/null))" >&2
	return 1
}

# bench_tinyproxy DIR PORT CHECK_URL: tinyproxy in the foreground, no Via
# header, critical messages only.
bench_tinyproxy() {
	local d="$1" port="$2"
	mkdir -p "$d"
	printf 'Port %s\nListen 127.0.0.1\nTimeout 60\nMaxClients 1024\nAllow 127.0.0.1\nLogLevel Critical\nDisableViaHeader Yes\n' \
		"$port" >"$d/tinyproxy.conf"
	tinyproxy -d -c "$d/tinyproxy.conf" >"$d/stderr" 2>&1 &
	BENCH_PID=$!
	bench_wait_url "$3" "http://127.0.0.1:$port" && return 0
	echo "bench: tinyproxy did not start ($(tail -n 1 "$d/stderr" 2>/dev/null))" >&2
	return 1
}

# bench_gmean reads ratios, one a line (at least two), and prints "mean lo
# hi n": their geometric mean and its 95% interval (Student's t on the
# logarithms), and how many there were.
bench_gmean() {
	# t's 0.975 quantile: from the table to 30 degrees of freedom, above
	# from its expansion in 1/df (Abramowitz and Stegun 26.7.5: within
	# 0.0002 of the quantile there).
	awk 'BEGIN { split("12.71 4.303 3.182 2.776 2.571 2.447 2.365 2.306 2.262 2.228 2.201 2.179 2.160 2.145 2.131 2.120 2.110 2.101 2.093 2.086 2.080 2.074 2.069 2.064 2.060 2.056 2.052 2.048 2.045 2.042", t, " ") }
		{ l[NR] = log($1); s += l[NR] }
		END {
			m = s / NR
			for (i = 1; i <= NR; i++) ss += (l[i] - m) ^ 2
			se = sqrt(ss / (NR - 1) / NR)
			df = NR - 1
			z = 1.959964
			q = (df <= 30) ? t[df] : z + (z ^ 3 + z) / (4 * df) + (5 * z ^ 5 + 16 * z ^ 3 + 3 * z) / (96 * df ^ 2) + (3 * z ^ 7 + 19 * z ^ 5 + 17 * z ^ 3 - 15 * z) / (384 * df ^ 3)
			printf "%.6f %.6f %.6f %d\n", exp(m), exp(m - q * se), exp(m + q * se), NR }'
}
