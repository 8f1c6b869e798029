# shellcheck shell=bash
# Shared setup for bench/run.sh and bench/profile.sh: a throwaway PostgreSQL,
# PgBouncer and shardgate on loopback ports, all removed again by cleanup.
# Source it from a script that has `set -euo pipefail`; call bench_setup, then
# use PORT_DIRECT, PORT_PGBOUNCER, PORT_SHARDGATE, PID_PGBOUNCER,
# PID_SHARDGATE, PGBENCH, BENCH_TMP; run_pgbench sets TPS, TXNS, CPU_TICKS.

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)

BENCH_POOL_SIZE=${BENCH_POOL_SIZE:-20}
BENCH_SCALE=${BENCH_SCALE:-10}
BENCH_USER=postgres # superuser of the throwaway cluster; trusted on loopback
BENCH_DB=bench

# BENCH_TLS says which legs use TLS: empty for none; clients (pgbench to
# the proxies, sslmode=require), servers (the proxies to PostgreSQL,
# sslmode require) or both (pgbench to PostgreSQL directly as well). One
# self-signed certificate in $BENCH_TMP/tls serves PostgreSQL and both
# proxies.
BENCH_TLS=${BENCH_TLS:-}
tls_clients() { [ "$BENCH_TLS" = clients ] || [ "$BENCH_TLS" = both ]; }
tls_servers() { [ "$BENCH_TLS" = servers ] || [ "$BENCH_TLS" = both ]; }
# tls_to TARGET: whether a client of TARGET uses TLS as BENCH_TLS says (a
# proxy's clients with clients or both; PostgreSQL's own with both).
tls_to() { if [ "$1" = direct ]; then [ "$BENCH_TLS" = both ]; else tls_clients; fi; }

# BENCH_PIN="PG:PROXY" pins PostgreSQL (the postmaster, so every backend)
# and pgbench to the CPU list PG, and every proxy process measured to the
# CPU list PROXY (taskset lists, such as "0:1"): the proxies then compete
# with nothing for their CPU and share no cache with PostgreSQL, as on a
# proxy host of their own. Empty (the default): nothing is pinned.
BENCH_PIN=${BENCH_PIN:-}
BENCH_PIN_PG=${BENCH_PIN%%:*}
BENCH_PIN_PROXY=${BENCH_PIN#*:}
# pinned_pg: the command prefix that runs pgbench on PostgreSQL's CPUs.
pinned_pg() { if [ -n "$BENCH_PIN" ]; then echo taskset -c "$BENCH_PIN_PG"; fi; }
# pin_desc describes BENCH_PIN for a results header.
pin_desc() { if [ -n "$BENCH_PIN" ]; then echo "PostgreSQL and pgbench pinned to CPUs $BENCH_PIN_PG, the proxies to CPUs $BENCH_PIN_PROXY"; else echo "no CPU pinning"; fi; }
# pin_proxy PID pins every thread of proxy process PID (and the threads it
# starts later) to the proxies' CPUs.
pin_proxy() {
	[ -n "$BENCH_PIN" ] || return 0
	taskset -a -p -c "$BENCH_PIN_PROXY" "$1" >/dev/null || die "taskset of process $1 failed"
}
# pin_pg pins the postmaster and the processes it started; later backends
# inherit the postmaster's CPUs.
pin_pg() {
	[ -n "$BENCH_PIN" ] || return 0
	local pid
	for pid in $(pg_cpu_snapshot | awk '{print $1}'); do
		taskset -a -p -c "$BENCH_PIN_PG" "$pid" >/dev/null 2>&1 || true
	done
}

BENCH_TMP=""
PID_PGBOUNCER=""
PID_SHARDGATE=""
PG_STARTED=""
BENCH_EXTRA_PIDS=() # scripts may add helpers (perf, strace) to be stopped too
# More shardgate processes, by target name (start_shardgate_variant): another
# binary or GOMAXPROCS measured in the same run as the main one.
declare -A SG_PORT=() SG_PID=() SG_METRICS=() # SG_METRICS: /metrics ports, by target

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
	printf '\n[bench] FAILED: %s\n' "$*" >&2
	exit 1
}

# as_pg runs a command as the postgres OS user when we are root (PostgreSQL
# refuses to run as root).
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"
	else
		"$@"
	fi
}

# stop_pid sends SIGTERM to one process we started and waits up to 10s for it,
# then SIGKILLs it.
stop_pid() {
	local pid=$1
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

bench_cleanup() {
	local rc=$?
	set +e
	for p in "${BENCH_EXTRA_PIDS[@]}"; do stop_pid "$p"; done
	for p in "${SG_PID[@]}"; do stop_pid "$p"; done
	stop_pid "$PID_SHARDGATE"
	stop_pid "$PID_PGBOUNCER"
	if [ -n "$PG_STARTED" ]; then
		as_pg "$PG_BIN/pg_ctl" -D "$BENCH_TMP/pgdata" -m immediate -w stop >/dev/null 2>&1
	fi
	if [ -n "$BENCH_TMP" ] && [ -d "$BENCH_TMP" ]; then
		if [ "$rc" -ne 0 ] && [ -n "${BENCH_KEEP_ON_FAILURE:-}" ]; then
			log "kept $BENCH_TMP for inspection"
		else
			rm -rf "$BENCH_TMP"
		fi
	fi
	wait 2>/dev/null
	return "$rc"
}

# BENCH_PORT_LOCKS holds one file per reserved port, flocked by its holder:
# the directory the test harness's PostgreSQL clusters reserve theirs in too
# (internal/pgtest/ports.go), so that benchmarks running at the same time as
# each other or as tests never pick the same port.
BENCH_PORT_LOCKS=${TMPDIR:-/tmp}/shardgate-pgtest-ports

# reserve_port VAR START sets VAR to the first port from START upwards that
# no TCP socket uses and nobody else reserved, and holds it until the script
# exits: an flock on the port's file, on a descriptor the shell keeps open
# (and its children inherit). Not only listeners count: a client's socket in
# TIME-WAIT on that port (as its ephemeral port; the defaults 55432 and
# 57432 are inside Linux's ephemeral range) makes a listener's bind fail
# with EADDRINUSE, SO_REUSEADDR or not, when the client did not set
# SO_REUSEADDR. A port taken by a client's ephemeral port after the check
# is still possible; the callers that start a listener retry on the next.
reserve_port() {
	local _rp_var=$1 _rp_port=$2 _rp_fd
	mkdir -p "$BENCH_PORT_LOCKS"
	chmod 1777 "$BENCH_PORT_LOCKS" 2>/dev/null || true # only its owner may
	while :; do
		if [ -z "$(ss -Htan "sport = :$_rp_port")" ]; then
			exec {_rp_fd}>>"$BENCH_PORT_LOCKS/$_rp_port"
			if flock -n "$_rp_fd"; then
				printf -v "$_rp_var" %s "$_rp_port"
				return 0
			fi
			exec {_rp_fd}>&-
		fi
		_rp_port=$((_rp_port + 1))
	done
}

# install_if_missing CMD PKG installs Debian package PKG with apt when
# command CMD is missing (as root; otherwise it says so and stops).
install_if_missing() {
	local cmd=$1 pkg=$2
	command -v "$cmd" >/dev/null 2>&1 && return
	[ "$(id -u)" -eq 0 ] || die "$cmd missing (apt-get install -y $pkg)"
	log "installing $pkg"
	apt-get update -qq >/dev/null || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null || die "cannot install $pkg"
}

# perf_syscall_events BASE NAME...: the perf stat event list BASE plus the
# tracepoint syscalls:sys_enter_NAME of each NAME this kernel has (a
# missing one would make perf stat refuse the whole list).
perf_syscall_events() {
	local events=$1 tracepoints s
	shift
	tracepoints=$(perf list tracepoint 2>/dev/null || true) # not in a pipe with grep -q: pipefail
	for s in "$@"; do
		if grep -q "syscalls:sys_enter_$s " <<<"$tracepoints"; then events="$events,syscalls:sys_enter_$s"; fi
	done
	echo "$events"
}

# proc_cpu_ticks prints utime+stime of a process (all its threads) in clock
# ticks, from /proc/PID/stat (fields 14 and 15; comm may contain spaces).
proc_cpu_ticks() {
	local ticks
	ticks=$(proc_user_sys_ticks "$1")
	echo $((${ticks% *} + ${ticks#* }))
}

# pg_cpu_snapshot prints "PID TICKS" for the benchmark's postmaster and every
# process it started (backends, background workers), ticks = utime + stime.
pg_cpu_snapshot() {
	local pm
	pm=$(head -1 "$BENCH_TMP/pgdata/postmaster.pid") || die "no postmaster.pid"
	# A process may exit between the glob and the read: cat goes on.
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v pm="$pm" '{
		pid = $1; line = $0; sub(/^.*\) /, "", line); split(line, f, " ")
		if (pid == pm || f[2] == pm) print pid, f[12] + f[13]
	}'
}

# pg_cpu_ticks_since SNAPSHOT_FILE prints the ticks PostgreSQL used since the
# snapshot: a process started since counts from 0; one that exited since is
# lost (the pool keeps its backends for the length of a run).
pg_cpu_ticks_since() {
	pg_cpu_snapshot | awk 'NR == FNR { before[$1] = $2; next } { t += $2 - before[$1] } END { print t + 0 }' "$1" -
}

# proc_user_sys_ticks PID prints the process's user and system CPU time
# ("UTIME STIME", clock ticks), every thread's.
proc_user_sys_ticks() {
	local s
	s=$(cat "/proc/$1/stat") || die "process $1 is gone"
	s=${s##*) }
	awk '{print $12, $13}' <<<"$s"
}

# expect_comm checks that PID is alive and is the program we measure.
expect_comm() {
	local comm
	comm=$(cat "/proc/$1/comm" 2>/dev/null) || die "$2 (pid $1) exited"
	[ "$comm" = "$2" ] || die "pid $1 is $comm, not $2: CPU accounting would be wrong"
}

find_pg_bin() {
	if [ -n "${PG_BIN:-}" ]; then return; fi
	local d
	d=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -1)
	[ -x "$d/postgres" ] || die "PostgreSQL server binaries not found (apt-get install -y postgresql), or set PG_BIN"
	PG_BIN=$d
}

ensure_pgbouncer() {
	if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then
		PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
		return
	fi
	[ "$(id -u)" -eq 0 ] || die "pgbouncer is not installed and we are not root to install it"
	log "installing pgbouncer (apt-get)"
	apt-get update -qq >/dev/null || die "apt-get update failed"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null || die "apt-get install pgbouncer failed"
	PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
	# The package may have started its own service on 6432; we use our own.
	if command -v service >/dev/null 2>&1; then service pgbouncer stop >/dev/null 2>&1 || true; fi
}

# wait_sql waits until `SELECT 1` works on port $1 (through whatever listens),
# up to 30 s. With a pid ($3), it returns 1 as soon as that process is gone
# (the caller shows its log), instead of waiting out the 30 s.
wait_sql() {
	local port=$1 what=$2 pid=${3:-}
	for _ in $(seq 300); do
		if "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$port" -U "$BENCH_USER" -d "$BENCH_DB" -c 'SELECT 1' >/dev/null 2>&1; then
			return 0
		fi
		if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
			return 1
		fi
		sleep 0.1
	done
	die "$what on port $port does not answer SELECT 1"
}

start_postgres() {
	reserve_port PORT_DIRECT "${BENCH_PG_PORT:-55432}"
	log "starting PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT_DIRECT (fsync=off)"
	as_pg "$PG_BIN/initdb" -D "$BENCH_TMP/pgdata" -U "$BENCH_USER" -A trust --no-sync -E UTF8 >"$BENCH_TMP/initdb.log" 2>&1 ||
		{ cat "$BENCH_TMP/initdb.log" >&2; die "initdb failed"; }
	cat >>"$BENCH_TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT_DIRECT
unix_socket_directories = '$BENCH_TMP'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 256MB
log_min_messages = warning
EOF
	if tls_servers; then
		printf "ssl = on\nssl_cert_file = '%s'\nssl_key_file = '%s'\n" "$BENCH_TMP/tls/server.crt" "$BENCH_TMP/tls/server.key" >>"$BENCH_TMP/pgdata/postgresql.conf"
	fi
	PG_STARTED=1
	as_pg "$PG_BIN/pg_ctl" -D "$BENCH_TMP/pgdata" -l "$BENCH_TMP/postgres.log" -w -t 60 start >/dev/null ||
		{ cat "$BENCH_TMP/postgres.log" >&2; die "PostgreSQL did not start"; }
	pin_pg
	"$PG_BIN/createdb" -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" "$BENCH_DB" || die "createdb failed"
	log "pgbench -i -s $BENCH_SCALE"
	"$PGBENCH" -i -q -s "$BENCH_SCALE" -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" "$BENCH_DB" >"$BENCH_TMP/pgbench-init.log" 2>&1 ||
		{ cat "$BENCH_TMP/pgbench-init.log" >&2; die "pgbench -i failed"; }
}

start_pgbouncer() {
	reserve_port PORT_PGBOUNCER "${BENCH_PGBOUNCER_PORT:-56432}"
	mkdir -p "$BENCH_TMP/pgbouncer"
	printf '"%s" ""\n' "$BENCH_USER" >"$BENCH_TMP/pgbouncer/userlist.txt"
	cat >"$BENCH_TMP/pgbouncer/pgbouncer.ini" <<EOF
[databases]
$BENCH_DB = host=127.0.0.1 port=$PORT_DIRECT dbname=$BENCH_DB

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PORT_PGBOUNCER
unix_socket_dir =
auth_type = trust
auth_file = $BENCH_TMP/pgbouncer/userlist.txt
pool_mode = transaction
default_pool_size = $BENCH_POOL_SIZE
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = ${BENCH_PGBOUNCER_MAX_CLIENTS:-1000}
max_db_connections = 0
server_tls_sslmode = $(tls_servers && echo require || echo disable)
log_connections = 0
log_disconnections = 0
log_pooler_errors = 1
logfile = $BENCH_TMP/pgbouncer/pgbouncer.log
pidfile = $BENCH_TMP/pgbouncer/pgbouncer.pid
EOF
	if tls_clients; then
		printf 'client_tls_sslmode = allow\nclient_tls_cert_file = %s\nclient_tls_key_file = %s\n' \
			"$BENCH_TMP/tls/server.crt" "$BENCH_TMP/tls/server.key" >>"$BENCH_TMP/pgbouncer/pgbouncer.ini"
	fi
	PGBOUNCER_VERSION=$("$PGBOUNCER" --version | awk 'NR==1{print $2}')
	if pgbouncer_prepared_ok; then
		echo "max_prepared_statements = 200" >>"$BENCH_TMP/pgbouncer/pgbouncer.ini"
	fi
	chown -R postgres: "$BENCH_TMP/pgbouncer" 2>/dev/null || true
	log "starting PgBouncer $PGBOUNCER_VERSION on 127.0.0.1:$PORT_PGBOUNCER (transaction mode, pool $BENCH_POOL_SIZE)"
	# Not through the as_pg function: a backgrounded function is a subshell,
	# and $! must be PgBouncer itself (its CPU time is what we measure).
	if [ "$(id -u)" -eq 0 ]; then
		setpriv --reuid=postgres --regid=postgres --init-groups -- \
			"$PGBOUNCER" -q "$BENCH_TMP/pgbouncer/pgbouncer.ini" >"$BENCH_TMP/pgbouncer/stderr.log" 2>&1 &
	else
		"$PGBOUNCER" -q "$BENCH_TMP/pgbouncer/pgbouncer.ini" >"$BENCH_TMP/pgbouncer/stderr.log" 2>&1 &
	fi
	PID_PGBOUNCER=$!
	pin_proxy "$PID_PGBOUNCER"
	wait_sql "$PORT_PGBOUNCER" PgBouncer
	expect_comm "$PID_PGBOUNCER" pgbouncer
}

# pgbouncer_prepared_ok: PgBouncer 1.21+ serves protocol-level prepared
# statements in transaction mode (with max_prepared_statements > 0).
pgbouncer_prepared_ok() {
	[ "$(printf '%s\n%s\n' "$PGBOUNCER_VERSION" 1.21 | sort -V | sed -n 1p)" = 1.21 ]
}

start_shardgate() {
	reserve_port PORT_SHARDGATE "${BENCH_SHARDGATE_PORT:-57432}"
	if [ -n "${SHARDGATE_BIN:-}" ]; then
		log "using shardgate binary $SHARDGATE_BIN"
		cp "$SHARDGATE_BIN" "$BENCH_TMP/proxy" || die "cannot copy $SHARDGATE_BIN"
	else
		log "building shardgate (go build ./cmd/proxy)"
		(cd "$REPO_DIR" && go build -o "$BENCH_TMP/proxy" ./cmd/proxy) || die "go build failed"
	fi
	cat >"$BENCH_TMP/shardgate.yaml" <<EOF
# generated by bench/lib.sh: one shard, trust auth, transaction pooling
listen: 127.0.0.1:$PORT_SHARDGATE
auth_type: trust
pool:
  mode: transaction
  size: $BENCH_POOL_SIZE
users:
  - name: $BENCH_USER
    server_password: ""
databases:
  - name: $BENCH_DB
    shards:
      - { host: 127.0.0.1, port: $PORT_DIRECT, database: $BENCH_DB }
EOF
	if [ -n "$BENCH_TLS" ]; then
		local tls
		tls="server_sslmode: $(tls_servers && echo require || echo disable)"
		if tls_clients; then
			tls="cert: $BENCH_TMP/tls/server.crt, key: $BENCH_TMP/tls/server.key, $tls"
		fi
		echo "tls: { $tls }" >>"$BENCH_TMP/shardgate.yaml"
	fi
	# BENCH_SHARDGATE_LIMITS: a limits section for shardgate, such as
	# "{ max_client_conn: 20000 }" (bench/idle.sh).
	[ -z "${BENCH_SHARDGATE_LIMITS:-}" ] || echo "limits: $BENCH_SHARDGATE_LIMITS" >>"$BENCH_TMP/shardgate.yaml"
	# BENCH_SHARDGATE_METRICS=1: serve /metrics (Go runtime figures too).
	if [ -n "${BENCH_SHARDGATE_METRICS:-}" ]; then
		reserve_port 'SG_METRICS[shardgate]' 59930
		echo "metrics: { listen: 127.0.0.1:${SG_METRICS[shardgate]} }" >>"$BENCH_TMP/shardgate.yaml"
	fi
	"$BENCH_TMP/proxy" check-config "$BENCH_TMP/shardgate.yaml" >"$BENCH_TMP/check-config.log" 2>&1 ||
		{ cat "$BENCH_TMP/check-config.log" >&2; die "generated shardgate config is invalid"; }
	SHARDGATE_VERSION=${SHARDGATE_VERSION:-$(cd "$REPO_DIR" && git describe --always --dirty 2>/dev/null || echo unknown)}
	log "starting shardgate $SHARDGATE_VERSION on 127.0.0.1:$PORT_SHARDGATE (transaction mode, pool $BENCH_POOL_SIZE, GOMAXPROCS=${GOMAXPROCS:-default})"
	# BENCH_SHARDGATE_CPUPROFILE=1: shardgate writes a CPU profile of its
	# run to $BENCH_TMP/shardgate.pprof when it stops (go tool pprof).
	local prof=()
	[ -z "${BENCH_SHARDGATE_CPUPROFILE:-}" ] || prof=(-cpuprofile "$BENCH_TMP/shardgate.pprof")
	"$BENCH_TMP/proxy" -config "$BENCH_TMP/shardgate.yaml" -log-level "${BENCH_SHARDGATE_LOG_LEVEL:-warn}" "${prof[@]}" >"$BENCH_TMP/shardgate.log" 2>&1 &
	PID_SHARDGATE=$!
	pin_proxy "$PID_SHARDGATE"
	wait_sql "$PORT_SHARDGATE" shardgate
	expect_comm "$PID_SHARDGATE" proxy
}

# build_ref REF OUT builds ./cmd/proxy as of git revision REF (a branch,
# tag or commit of this repository) into OUT, from an exported tree: the
# working tree is not touched.
build_ref() {
	local ref=$1 out=$2 src
	src=$BENCH_TMP/src-$(echo "$ref" | tr -c 'A-Za-z0-9.\n-' _)
	mkdir -p "$src"
	log "building shardgate $ref ($(git -C "$REPO_DIR" rev-parse --short "$ref"))"
	git -C "$REPO_DIR" archive "$ref" | tar -x -C "$src" || die "cannot export $ref"
	(cd "$src" && go build -o "$out" ./cmd/proxy) || die "go build of $ref failed"
}

# start_shardgate_variant NAME BIN [GOMAXPROCS [LIMITS]] starts one more
# shardgate, BIN with the main one's configuration on a port of its own, as
# target NAME; LIMITS replaces the limits section (as BENCH_SHARDGATE_LIMITS).
# BIN's file name is its comm (at most 15 characters).
start_shardgate_variant() {
	local name=$1 bin=$2 gmp=${3:-} limits=${4:-} port pid
	reserve_port port $((PORT_SHARDGATE + 1))
	sed "s/^listen: .*/listen: 127.0.0.1:$port/" "$BENCH_TMP/shardgate.yaml" >"$BENCH_TMP/shardgate-$name.yaml"
	if [ -n "$limits" ]; then
		sed -i '/^limits:/d' "$BENCH_TMP/shardgate-$name.yaml"
		echo "limits: $limits" >>"$BENCH_TMP/shardgate-$name.yaml"
	fi
	if [ -n "${SG_METRICS[shardgate]:-}" ]; then
		reserve_port "SG_METRICS[$name]" $((SG_METRICS[shardgate] + 1 + ${#SG_METRICS[@]}))
		sed -i "s/^metrics: .*/metrics: { listen: 127.0.0.1:${SG_METRICS[$name]} }/" "$BENCH_TMP/shardgate-$name.yaml"
	fi
	log "starting shardgate variant $name ($(basename "$bin"), GOMAXPROCS=${gmp:-default}) on 127.0.0.1:$port"
	env ${gmp:+GOMAXPROCS=$gmp} "$bin" -config "$BENCH_TMP/shardgate-$name.yaml" -log-level "${BENCH_SHARDGATE_LOG_LEVEL:-warn}" >"$BENCH_TMP/shardgate-$name.log" 2>&1 &
	pid=$!
	pin_proxy "$pid"
	SG_PORT[$name]=$port
	SG_PID[$name]=$pid
	wait_sql "$port" "shardgate $name"
	expect_comm "$pid" "$(basename "$bin" | cut -c1-15)"
}

# start_floor NAME MODE [LOOPS [FLAGS...]] starts a bench/relayfloor relay
# (built on first use) of MODE (goroutine, epoll or coro) to the direct
# PostgreSQL as target NAME, with LOOPS event loops and relayfloor FLAGS.
start_floor() {
	local name=$1 mode=$2 loops=${3:-} port
	shift 2
	[ $# -gt 0 ] && shift
	if [ ! -x "$BENCH_TMP/relayfloor" ]; then
		log "building bench/relayfloor"
		(cd "$REPO_DIR" && go build -o "$BENCH_TMP/relayfloor" ./bench/relayfloor) || die "go build ./bench/relayfloor failed"
	fi
	reserve_port port $((PORT_SHARDGATE + 10 + ${#SG_PORT[@]}))
	"$BENCH_TMP/relayfloor" -mode "$mode" -listen "127.0.0.1:$port" -upstream "127.0.0.1:$PORT_DIRECT" \
		${loops:+-loops $loops} "$@" >"$BENCH_TMP/relayfloor-$name.log" 2>&1 &
	SG_PID[$name]=$!
	pin_proxy "${SG_PID[$name]}"
	SG_PORT[$name]=$port
	wait_sql "$port" "relayfloor $name"
	expect_comm "${SG_PID[$name]}" relayfloor
}
# bench_tls_files writes the self-signed certificate and key of BENCH_TLS
# into $BENCH_TMP/tls, readable by the postgres user only (PostgreSQL
# refuses a key others can read).
bench_tls_files() {
	case $BENCH_TLS in
	'') return 0 ;;
	clients | servers | both) ;;
	*) die "BENCH_TLS=$BENCH_TLS: want clients, servers or both" ;;
	esac
	command -v openssl >/dev/null || die "BENCH_TLS needs openssl"
	mkdir -p "$BENCH_TMP/tls"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=127.0.0.1 \
		-keyout "$BENCH_TMP/tls/server.key" -out "$BENCH_TMP/tls/server.crt" >"$BENCH_TMP/tls/openssl.log" 2>&1 ||
		{ cat "$BENCH_TMP/tls/openssl.log" >&2; die "openssl req failed"; }
	chmod 600 "$BENCH_TMP/tls/server.key"
	chown -R postgres: "$BENCH_TMP/tls" 2>/dev/null || true
	log "TLS: $BENCH_TLS"
}

bench_setup() {
	[ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1 && die "running as root needs a 'postgres' OS user (apt-get install -y postgresql creates it)"
	find_pg_bin
	PGBENCH=${PGBENCH:-$PG_BIN/pgbench}
	[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench) || die "pgbench not found"
	ensure_pgbouncer
	[ -n "${SHARDGATE_BIN:-}" ] || command -v go >/dev/null || die "go not found"
	BENCH_TMP=$(mktemp -d /tmp/shardgate-bench.XXXXXX)
	chmod 755 "$BENCH_TMP"
	chown postgres: "$BENCH_TMP" 2>/dev/null || true
	cd "$BENCH_TMP" || die "cannot enter $BENCH_TMP"
	printf 'SELECT 1;\n' >"$BENCH_TMP/select1.sql"
	# rows100: a result of 100 rows of ~100 bytes each (pgbench_accounts'
	# filler), for the relay's cost per row rather than per round trip.
	printf '\\set aid random(1, 100000 * :scale - 99)\nSELECT aid, bid, abalance, filler FROM pgbench_accounts WHERE aid BETWEEN :aid AND :aid + 99;\n' >"$BENCH_TMP/rows100.sql"
	bench_tls_files
	start_postgres
	start_pgbouncer
	start_shardgate
}

target_port() {
	case $1 in
	direct) echo "$PORT_DIRECT" ;;
	pgbouncer) echo "$PORT_PGBOUNCER" ;;
	shardgate) echo "$PORT_SHARDGATE" ;;
	*) [ -n "${SG_PORT[$1]:-}" ] || die "unknown target $1"; echo "${SG_PORT[$1]}" ;;
	esac
}

target_pid() {
	case $1 in
	direct) echo "" ;;
	pgbouncer) echo "$PID_PGBOUNCER" ;;
	shardgate) echo "$PID_SHARDGATE" ;;
	*) echo "${SG_PID[$1]:-}" ;;
	esac
}

# pgbench_args WORKLOAD MODE CLIENTS SECONDS prints the pgbench arguments
# (without host and port).
pgbench_args() {
	local workload=$1 mode=$2 clients=$3 secs=$4 jobs=2
	[ "$clients" -lt "$jobs" ] && jobs=$clients
	local w
	case $workload in
	select1) w="-f $BENCH_TMP/select1.sql" ;;
	rows100) w="-f $BENCH_TMP/rows100.sql" ;;
	select-only) w="-S" ;;
	tpcb) w="" ;; # pgbench's built-in TPC-B-like transaction
	*) die "unknown workload $workload" ;;
	esac
	echo "-n $w -M $mode -c $clients -j $jobs -T $secs -U $BENCH_USER $BENCH_DB"
}

# BENCH_LATENCY_SAMPLE is the fraction of transactions whose latency
# run_pgbench has pgbench log (--sampling-rate) for P50_MS and P99_MS; 0 logs
# none.
BENCH_LATENCY_SAMPLE=${BENCH_LATENCY_SAMPLE:-0.1}

# latency_stats prints "n p50 p99 max" (ms) of the latencies (µs, one a
# line) on stdin.
latency_stats() {
	sort -n | awk '{v[NR] = $1} END {
		if (NR == 0) { print "0 - - -"; exit }
		i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999)
		printf "%d %.2f %.2f %.2f\n", NR, v[i50] / 1000, v[i99] / 1000, v[NR] / 1000 }'
}

# run_pgbench TARGET WORKLOAD MODE CLIENTS SECONDS LOGFILE runs one pgbench
# and sets TPS, TXNS, CPU_TICKS (the proxy's CPU during the run; empty for
# direct), and P50_MS and P99_MS, the median and 99th percentile of the
# sampled transactions' latencies ("-" when none was sampled). Any pgbench
# error, failed transaction or aborted client is fatal.
run_pgbench() {
	local target=$1 workload=$2 mode=$3 clients=$4 secs=$5 out=$6
	local port pid before after rc=0 lat=()
	port=$(target_port "$target")
	pid=$(target_pid "$target")
	rm -f "$out".lat.*
	if [ "$BENCH_LATENCY_SAMPLE" != 0 ]; then
		lat=(--log "--sampling-rate=$BENCH_LATENCY_SAMPLE" "--log-prefix=$out.lat")
	fi
	[ -n "$pid" ] && before=$(proc_cpu_ticks "$pid")
	# shellcheck disable=SC2046
	local ssl=disable
	tls_to "$target" && ssl=require
	PGSSLMODE=$ssl $(pinned_pg) "$PGBENCH" -h 127.0.0.1 -p "$port" "${lat[@]}" $(pgbench_args "$workload" "$mode" "$clients" "$secs") >"$out" 2>&1 || rc=$?
	CPU_TICKS=""
	if [ -n "$pid" ]; then
		after=$(proc_cpu_ticks "$pid")
		CPU_TICKS=$((after - before))
	fi
	P50_MS=- P99_MS=-
	if [ ${#lat[@]} -gt 0 ]; then
		# pgbench --log lines: client txn latency_us script epoch_s epoch_us.
		read -r _ P50_MS P99_MS _ < <(cat "$out".lat.* 2>/dev/null | awk '$3 ~ /^[0-9]+$/ { print $3 }' | latency_stats)
		rm -f "$out".lat.*
	fi
	local failed
	failed=$(awk -F'[:(]' '/number of failed transactions/ {gsub(/ /,"",$2); print $2}' "$out")
	TXNS=$(awk -F: '/number of transactions actually processed/ {split($2,a,"/"); gsub(/ /,"",a[1]); print a[1]}' "$out")
	TPS=$(awk '/^tps = / {print $3}' "$out")
	if [ "$rc" -ne 0 ] || [ "${failed:-x}" != 0 ] || [ -z "$TXNS" ] || [ "$TXNS" -eq 0 ] || [ -z "$TPS" ] ||
		grep -qiE 'aborted|error' "$out"; then
		echo "----- pgbench output ($target $workload -M $mode -c $clients, exit $rc) -----" >&2
		cat "$out" >&2
		echo "-----" >&2
		case $target in
		pgbouncer) tail -20 "$BENCH_TMP/pgbouncer/pgbouncer.log" >&2 ;;
		shardgate) tail -20 "$BENCH_TMP/shardgate.log" >&2 ;;
		*) tail -20 "$BENCH_TMP/shardgate-$target.log" >&2 ;;
		esac
		die "pgbench against $target failed ($workload -M $mode -c $clients: exit $rc, failed transactions ${failed:-unknown})"
	fi
	kill -0 "$PID_PGBOUNCER" 2>/dev/null || die "PgBouncer died"
	kill -0 "$PID_SHARDGATE" 2>/dev/null || die "shardgate died"
	for v in "${!SG_PID[@]}"; do kill -0 "${SG_PID[$v]}" 2>/dev/null || die "shardgate $v died"; done
}
