#!/usr/bin/env bash
# bench/reshard.sh — how fast the resharding engine copies a table, against
# the plain `COPY … TO STDOUT | COPY … FROM STDIN` pipe between two databases.
#
# Starts a throwaway PostgreSQL (wal_level=logical, fsync=off) on loopback;
# every database lives on that one server:
#
#   src        accounts(id bigint primary key, balance int, filler text),
#              ~200-byte rows, BENCH_RESHARD_MB of heap (5120 rows per MB),
#              generated in place with INSERT … SELECT generate_series
#   dst_pipe   accounts pre-created with the same schema (primary key included)
#   d0, d1     the destination shards of the proxy database "dst"
#
# 1. Pipe baseline: psql -c "COPY accounts TO STDOUT (FORMAT binary)" src |
#    psql -c "COPY accounts FROM STDIN (FORMAT binary)" dst_pipe. Wall time.
# 2. shardgate: `proxy schema-sync` (timed separately), then `proxy data-sync
#    -progress 1s src dst` (1 shard → 2 shards, accounts.id bigint hash).
#    Two times from data-sync's start: "copied" = both destination shards
#    committed their copy (their row in shardgate_reshard.table_copies, polled
#    every ~0.1 s), and
#    "copy+post" = the "copy done" log line, i.e. after SchemaSyncPost built
#    the primary keys. Then data-sync is stopped (SIGINT) and its slots and
#    publications on src are dropped. Row counts on d0+d1 and dst_pipe are
#    checked against src.
#
# 3. Apply under a write load: with data-sync still streaming, pgbench writes
#    (UPDATE one random row + INSERT one row) to src for
#    BENCH_RESHARD_APPLY_SECONDS; the slot's lag is sampled every second, then
#    the catch-up time and the destination's rows are checked. Then the same
#    with native logical replication (publication on src, subscription with
#    copy_data = false in dst_pipe). With BENCH_RESHARD_APPLY_LOAD=tpcb the
#    load is pgbench's built-in tpcb-like script instead, on pgbench's tables
#    (scale BENCH_RESHARD_TPCB_SCALE, created on src before the copy, with a
#    bigserial key on pgbench_history, which resharding needs), sharded on
#    the destination by aid, tid, bid and hid.
# 4. Writer latency across a cutover: a proxy (transaction mode) serves app
#    (one shard, app_0) and app_new (app_new_0, app_new_1); pgbench -R writes
#    UPDATEs through it with --log (per-transaction latency) while RESHARD
#    app app_new runs and cuts over by itself. Reports p50/p99/max latency
#    overall and around the cutover, the pause from SHOW TASKS, pgbench's
#    failures, and checks that every completed UPDATE is on the new shards.
#
# MB/s = pg_relation_size('accounts') of src (heap only) / wall seconds.
#
# Environment:
#   BENCH_RESHARD_MB   heap size of the source table in MB (default 1024)
#   BENCH_RESHARD_APPLY_SECONDS  part 3 pgbench seconds (default 30; 0 skips it)
#   BENCH_RESHARD_APPLY_CLIENTS  part 3 pgbench clients (default 8)
#   BENCH_RESHARD_APPLY_LOAD     part 3 load: accounts (default: UPDATE + INSERT
#                                of accounts) or tpcb (pgbench's tpcb-like:
#                                three UPDATEs and an INSERT per transaction)
#   BENCH_RESHARD_TPCB_SCALE     pgbench scale of the tpcb load (default 10)
#   BENCH_RESHARD_APPLY_RATE     part 3 pgbench -R, transactions/s for both
#                                halves (default: none, a saturating load;
#                                on a small machine the source then runs at
#                                whatever rate the apply's CPU leaves it, a
#                                different one in each half)
#   BENCH_RESHARD_CUTOVER_SECONDS  part 4 pgbench seconds (default 20; 0 skips it)
#   BENCH_RESHARD_CUTOVER_RATE     part 4 pgbench -R, transactions/s (default 200)
#   BENCH_RESHARD_CUTOVER_CLIENTS  part 4 pgbench clients (default 4)
#   BENCH_OUT          Markdown output (default bench/results/reshard.md)
#   SHARDGATE_BIN      use this proxy binary instead of building ./cmd/proxy
#   BENCH_RESHARD_GOMAXPROCS  GOMAXPROCS of `proxy data-sync` (default: none,
#                      and data-sync then runs on one P; the number of CPUs
#                      for the Go runtime's default). With
#                      BENCH_RESHARD_EMBEDDED, of the serving proxy (default:
#                      the Go runtime's)
#   BENCH_RESHARD_EMBEDDED=1  parts 2 and 3 run the task inside a serving
#                      proxy (`COPY_DATA src dst` in its admin database, no
#                      clients) instead of `proxy data-sync`
#   BENCH_RESHARD_PERF=FILE  record the proxy's stacks (perf record -g) from
#                      the start of shardgate's apply load to its catch-up
#   BENCH_RESHARD_PERF_EVENT  perf's event for BENCH_RESHARD_PERF (default
#                      perf's, CPU time); e.g. context-switches: the stack
#                      of every context switch of the proxy's threads
#   BENCH_KEEP_ON_FAILURE=1  keep the temp dir (logs) when something fails
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

BENCH_RESHARD_MB=${BENCH_RESHARD_MB:-1024}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/results/reshard.md}
case $BENCH_OUT in /*) ;; *) BENCH_OUT=$PWD/$BENCH_OUT ;; esac
ROWS=$((BENCH_RESHARD_MB * 5120))
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
PID_SYNC=""
APPLY_SECONDS=${BENCH_RESHARD_APPLY_SECONDS:-30}
APPLY_CLIENTS=${BENCH_RESHARD_APPLY_CLIENTS:-8}
APPLY_RATE=${BENCH_RESHARD_APPLY_RATE:-}
APPLY_LOAD=${BENCH_RESHARD_APPLY_LOAD:-accounts}
TPCB_SCALE=${BENCH_RESHARD_TPCB_SCALE:-10}
TPCB_TABLES="pgbench_accounts pgbench_branches pgbench_tellers pgbench_history"
case $APPLY_LOAD in
accounts)
	CHANGES_PER_TXN=2
	# Per database: count, sum(id), sum(balance) of accounts.
	CHECK_SQL="SELECT count(*), sum(id), sum(balance) FROM accounts"
	;;
tpcb)
	CHANGES_PER_TXN=4
	# Per database: the balances of accounts, of tellers and branches, and
	# the history's rows and deltas.
	CHECK_SQL="SELECT (SELECT coalesce(sum(abalance), 0) FROM pgbench_accounts),
		(SELECT coalesce(sum(tbalance), 0) FROM pgbench_tellers) + (SELECT coalesce(sum(bbalance), 0) FROM pgbench_branches),
		(SELECT count(*) FROM pgbench_history), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)"
	;;
*) die "BENCH_RESHARD_APPLY_LOAD must be accounts or tpcb, not $APPLY_LOAD" ;;
esac
CUT_SECONDS=${BENCH_RESHARD_CUTOVER_SECONDS:-20}
CUT_RATE=${BENCH_RESHARD_CUTOVER_RATE:-200}
CUT_CLIENTS=${BENCH_RESHARD_CUTOVER_CLIENTS:-4}
CUT_ROWS=100000

psql_db() {
	local db=$1
	shift
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" -d "$db" "$@"
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / 1048576 / s }'; }

start_pg_logical() {
	reserve_port PORT_DIRECT "${BENCH_PG_PORT:-55432}"
	log "starting PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT_DIRECT (wal_level=logical, fsync=off)"
	as_pg "$PG_BIN/initdb" -D "$BENCH_TMP/pgdata" -U "$BENCH_USER" -A trust --no-sync -E UTF8 --locale=C >"$BENCH_TMP/initdb.log" 2>&1 ||
		{ cat "$BENCH_TMP/initdb.log" >&2; die "initdb failed"; }
	cat >>"$BENCH_TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT_DIRECT
unix_socket_directories = '$BENCH_TMP'
max_connections = 100
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
max_wal_size = 8GB
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 512MB
maintenance_work_mem = 512MB
log_min_messages = warning
EOF
	PG_STARTED=1
	as_pg "$PG_BIN/pg_ctl" -D "$BENCH_TMP/pgdata" -l "$BENCH_TMP/postgres.log" -w -t 60 start >/dev/null ||
		{ cat "$BENCH_TMP/postgres.log" >&2; die "PostgreSQL did not start"; }
}

build_proxy() {
	if [ -n "${SHARDGATE_BIN:-}" ]; then
		cp "$SHARDGATE_BIN" "$BENCH_TMP/proxy" || die "cannot copy $SHARDGATE_BIN"
	else
		log "building shardgate (go build ./cmd/proxy)"
		(cd "$REPO_DIR" && go build -o "$BENCH_TMP/proxy" ./cmd/proxy) || die "go build failed"
	fi
	SHARDGATE_VERSION=${SHARDGATE_VERSION:-$(cd "$REPO_DIR" && git describe --always --dirty 2>/dev/null || echo unknown)}
	local h="host: 127.0.0.1, port: $PORT_DIRECT"
	reserve_port PORT_SYNC 57432
	cat >"$BENCH_TMP/shardgate.yaml" <<EOF
# generated by bench/reshard.sh
listen: 127.0.0.1:$PORT_SYNC
auth_type: trust
${BENCH_RESHARD_EMBEDDED:+admin: { user: admin, password: admin-secret \}}
users:
  - name: $BENCH_USER
    server_password: ""
databases:
  - name: src
    shards:
      - { $h, database: src }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
  - name: dst
    shards:
      - { $h, database: d0 }
      - { $h, database: d1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
EOF
	if [ "$APPLY_LOAD" = tpcb ]; then
		cat >>"$BENCH_TMP/shardgate.yaml" <<EOF
      - { table: pgbench_accounts, column: aid, type: integer }
      - { table: pgbench_branches, column: bid, type: integer }
      - { table: pgbench_tellers, column: tid, type: integer }
      - { table: pgbench_history, column: hid, type: bigint }
EOF
	fi
	"$BENCH_TMP/proxy" check-config "$BENCH_TMP/shardgate.yaml" >"$BENCH_TMP/check-config.log" 2>&1 ||
		{ cat "$BENCH_TMP/check-config.log" >&2; die "generated shardgate config is invalid"; }
}

load_source() {
	local db
	for db in src dst_pipe d0 d1; do
		psql_db postgres -c "CREATE DATABASE $db" >/dev/null || die "createdb $db failed"
	done
	local ddl="CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, filler text);"
	log "loading src: $ROWS rows (~$BENCH_RESHARD_MB MB)"
	local t0
	t0=$(now)
	psql_db src -c "$ddl" \
		-c "INSERT INTO accounts SELECT g, (g * 7919) % 50000, repeat('x', 160) FROM generate_series(1::bigint, $ROWS) g" \
		-c "VACUUM ANALYZE accounts" -c "CHECKPOINT" >/dev/null || die "loading src failed"
	psql_db dst_pipe -c "$ddl" >/dev/null || die "creating dst_pipe.accounts failed"
	if [ "$APPLY_LOAD" = tpcb ]; then
		log "loading src: pgbench tables at scale $TPCB_SCALE (for the tpcb-like apply load)"
		"$PGBENCH" -i -q -s "$TPCB_SCALE" -I dtgvp -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" src >"$BENCH_TMP/pgbench-init.log" 2>&1 ||
			{ cat "$BENCH_TMP/pgbench-init.log" >&2; die "pgbench -i failed"; }
		psql_db src -c "ALTER TABLE pgbench_history ADD COLUMN hid bigserial PRIMARY KEY" -c "CHECKPOINT" >/dev/null ||
			die "adding pgbench_history's key failed"
		# shellcheck disable=SC2046 # one -t per table
		"$PG_BIN/pg_dump" --schema-only -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" $(printf -- '-t %s ' $TPCB_TABLES pgbench_history_hid_seq) src |
			psql_db dst_pipe >/dev/null || die "creating dst_pipe's pgbench tables failed"
	fi
	SRC_BYTES=$(psql_db src -At -c "SELECT pg_relation_size('accounts')")
	SRC_TOTAL=$(psql_db src -At -c "SELECT pg_total_relation_size('accounts')")
	SRC_SUM=$(psql_db src -At -c "SELECT count(*) || ' ' || sum(id) || ' ' || sum(balance) FROM accounts")
	log "src: heap $((SRC_BYTES / 1048576)) MB, with index $((SRC_TOTAL / 1048576)) MB, loaded in $(secs "$t0" "$(now)") s"
}

run_pipe() {
	log "pipe: COPY TO STDOUT (binary) | COPY FROM STDIN (binary) into dst_pipe"
	local t0 t1
	t0=$(now)
	psql_db src -c "COPY accounts TO STDOUT (FORMAT binary)" |
		psql_db dst_pipe -c "COPY accounts FROM STDIN (FORMAT binary)" >/dev/null || die "pipe failed"
	t1=$(now)
	PIPE_S=$(secs "$t0" "$t1")
	local got
	got=$(psql_db dst_pipe -At -c "SELECT count(*) || ' ' || sum(id) || ' ' || sum(balance) FROM accounts")
	[ "$got" = "$SRC_SUM" ] || die "dst_pipe holds $got, src $SRC_SUM"
	log "pipe: $PIPE_S s, $(mbps "$SRC_BYTES" "$PIPE_S") MB/s"
	psql_db dst_pipe -c "CHECKPOINT" >/dev/null
}

# copies_done prints how many destination shards committed their copy of
# accounts (their row in shardgate_reshard.table_copies).
copies_done() {
	local n=0 db c
	for db in d0 d1; do
		c=$(psql_db "$db" -At -c "SELECT count(*) FROM shardgate_reshard.table_copies WHERE table_name = 'public.accounts'" 2>/dev/null) || c=0
		n=$((n + c))
	done
	echo "$n"
}

run_shardgate() {
	log "shardgate: proxy schema-sync src dst"
	local t0 t1
	t0=$(now)
	"$BENCH_TMP/proxy" schema-sync -config "$BENCH_TMP/shardgate.yaml" src dst >"$BENCH_TMP/schema-sync.log" 2>&1 ||
		{ cat "$BENCH_TMP/schema-sync.log" >&2; die "schema-sync failed"; }
	SCHEMA_S=$(secs "$t0" "$(now)")
	t0=$(now)
	if [ -n "${BENCH_RESHARD_EMBEDDED:-}" ]; then
		start_embedded
	else
		log "shardgate: proxy data-sync -progress 1s src dst"
		# GOMAXPROCS of data-sync only: empty keeps the environment's, and
		# data-sync itself then takes one P.
		GOMAXPROCS=${BENCH_RESHARD_GOMAXPROCS:-${GOMAXPROCS:-}} \
			"$BENCH_TMP/proxy" data-sync -config "$BENCH_TMP/shardgate.yaml" -progress 1s src dst \
			>"$BENCH_TMP/data-sync.out" 2>"$BENCH_TMP/data-sync.log" &
		PID_SYNC=$!
		BENCH_EXTRA_PIDS+=("$PID_SYNC")
	fi
	COPIED_S=""
	local deadline=$((SECONDS + 3600))
	while :; do
		if [ -z "$COPIED_S" ] && [ "$(copies_done)" = 2 ]; then
			COPIED_S=$(secs "$t0" "$(now)")
			log "shardgate: every table copied after ~$COPIED_S s"
		fi
		if [ -n "${BENCH_RESHARD_EMBEDDED:-}" ]; then
			if [ "$(admin_sql "$PORT_SYNC" "SHOW TASKS" | awk -F'|' '$3 == "src" { print $6 }' | tail -1)" = stream ]; then
				t1=$(now)
				break
			fi
		elif grep -q 'copy done' "$BENCH_TMP/data-sync.log"; then
			t1=$(now)
			break
		fi
		if ! kill -0 "$PID_SYNC" 2>/dev/null; then
			cat "$BENCH_TMP/data-sync.log" >&2
			die "data-sync exited before the copy was done"
		fi
		[ "$SECONDS" -lt "$deadline" ] || die "data-sync copy did not finish in an hour"
		sleep 0.1
	done
	POST_S=$(secs "$t0" "$t1")
	[ -n "$COPIED_S" ] || COPIED_S=$POST_S
	log "shardgate: copy done (with SchemaSyncPost) after $POST_S s; progress:"
	sed 's/^/    /' "$BENCH_TMP/data-sync.out" | tail -5 >&2
	local n0 n1 got
	got=$(for db in d0 d1; do psql_db "$db" -At -c "SELECT count(*), sum(id), sum(balance) FROM accounts"; done |
		awk -F'|' '{c += $1; i += $2; b += $3} END { printf "%.0f %.0f %.0f", c, i, b }')
	[ "$got" = "$SRC_SUM" ] || die "d0+d1 hold $got (count, sum id, sum balance), src $SRC_SUM"
	n0=$(psql_db d0 -At -c "SELECT count(*) FROM accounts")
	n1=$(psql_db d1 -At -c "SELECT count(*) FROM accounts")
	SPLIT="$n0 / $n1"
	COPY_ROWS=$(psql_db d0 -At -c "SELECT string_agg(source_shard || ':' || table_name || ':' || rows, ' ') FROM shardgate_reshard.table_copies")
	log "shardgate: d0/d1 rows $SPLIT, table_copies on d0: $COPY_ROWS"
}

# start_embedded starts a serving proxy on the config of data-sync (with
# an admin database) and has it run the task: COPY_DATA src dst. Sets
# PID_SYNC; its log is data-sync.log.
start_embedded() {
	log "shardgate: a serving proxy (GOMAXPROCS=${BENCH_RESHARD_GOMAXPROCS:-${GOMAXPROCS:-default}}), COPY_DATA src dst"
	: >"$BENCH_TMP/data-sync.out"
	GOMAXPROCS=${BENCH_RESHARD_GOMAXPROCS:-${GOMAXPROCS:-}} \
		"$BENCH_TMP/proxy" -config "$BENCH_TMP/shardgate.yaml" -log-level info >"$BENCH_TMP/data-sync.log" 2>&1 &
	PID_SYNC=$!
	BENCH_EXTRA_PIDS+=("$PID_SYNC")
	local ok=""
	for _ in $(seq 100); do
		admin_sql "$PORT_SYNC" "SHOW TASKS" >/dev/null 2>&1 && { ok=1; break; }
		sleep 0.1
	done
	[ -n "$ok" ] || { cat "$BENCH_TMP/data-sync.log" >&2; die "the serving proxy does not answer"; }
	admin_sql "$PORT_SYNC" "COPY_DATA src dst" >/dev/null || die "COPY_DATA failed"
}

stop_data_sync() {
	if [ -n "${BENCH_RESHARD_EMBEDDED:-}" ]; then
		local id
		id=$(admin_sql "$PORT_SYNC" "SHOW TASKS" | awk -F'|' '$3 == "src" { print $1 }' | tail -1)
		admin_sql "$PORT_SYNC" "STOP_TASK $id" >/dev/null || die "STOP_TASK $id failed"
	fi
	# Stop streaming, then drop what it left on the source.
	kill -INT "$PID_SYNC" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$PID_SYNC" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$PID_SYNC" 2>/dev/null && die "data-sync did not stop on SIGINT in 10 s"
	wait "$PID_SYNC" || { tail -20 "$BENCH_TMP/data-sync.log" >&2; die "data-sync exited with an error after SIGINT"; }
	SLOTS=$(psql_db src -At -c "SELECT string_agg(slot_name, ' ') FROM pg_replication_slots")
	psql_db src -c "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'sg\_%'" >/dev/null ||
		die "dropping the slots failed"
	psql_db src -At -c "SELECT pubname FROM pg_publication WHERE pubname LIKE 'sg\_%'" | while read -r p; do
		psql_db src -c "DROP PUBLICATION \"$p\"" >/dev/null
	done
	log "shardgate: dropped slots on src: $SLOTS"
}

median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# sample_lag SLOT OUT: every second, one line "bytes seconds" for SLOT on src:
# pg_current_wal_lsn() - confirmed_flush_lsn, and the walsender's flush_lag.
sample_lag() {
	local slot=$1 out=$2
	while :; do
		psql_db src -At -F' ' -c "SELECT pg_current_wal_lsn() - s.confirmed_flush_lsn,
			coalesce(extract(epoch FROM r.flush_lag), 0)
			FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = '$slot'" >>"$out" 2>/dev/null || true
		sleep 1
	done
}

# proc_ticks PID... prints the CPU clock ticks (user + system, 1/100 s)
# the processes have used so far; a process that is gone counts 0.
proc_ticks() {
	local p t s=0
	for p in "$@"; do
		# Fields after the command name's ")": utime and stime are the 12th and 13th.
		t=$(awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null) || t=0
		s=$((s + ${t:-0}))
	done
	echo "$s"
}

# proc_ctxsw PID prints the context switches (voluntary + involuntary) of
# every thread of PID so far; 0 when it is gone.
proc_ctxsw() {
	cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(nonvoluntary|voluntary)_ctxt_switches:/ { s += $2 } END { print s + 0 }'
}

# apply_pids NAME prints the server processes of NAME's apply besides its
# walsender: native's apply worker; shardgate's destination sessions.
apply_pids() {
	if [ "$1" = native ]; then
		psql_db dst_pipe -At -c "SELECT pid FROM pg_stat_subscription WHERE subname = 'bench_sub' AND relid IS NULL AND pid IS NOT NULL"
	else
		psql_db src -At -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'shardgate-reshard' AND datname IN ('d0', 'd1')"
	fi
}

# check_sums DB... prints the columns of CHECK_SQL summed over the
# databases, space-separated.
check_sums() {
	local db
	for db in "$@"; do psql_db "$db" -At -c "$CHECK_SQL"; done |
		awk -F'|' '{for (i = 1; i <= NF; i++) s[i] += $i; n = NF} END { for (i = 1; i <= n; i++) printf "%s%.0f", (i > 1 ? " " : ""), s[i] }'
}

# apply_load NAME SLOT DSTDBS: pgbench writes to src for APPLY_SECONDS while
# the lag of SLOT is sampled; then waits for the slot to reach the WAL
# position the load ended at (catch-up time) and compares the destination's
# rows (DSTDBS summed) with src. Sets LAG_<NAME> (a table row).
apply_load() {
	local name=$1 slot=$2 dsts=$3 pid_s rc=0 out=$BENCH_TMP/pgbench-$1.log lagf=$BENCH_TMP/lag-$1.txt
	: >"$lagf"
	sample_lag "$slot" "$lagf" &
	pid_s=$!
	BENCH_EXTRA_PIDS+=("$pid_s")
	# CPU of the apply from the load's start to the catch-up: the slot's
	# walsender, the apply's server processes (apply_pids) and shardgate's
	# proxy.
	local ws_pid ap_pids px_pid="" ws0 ap0 px0 ws_used="" ap_used="" px_used=""
	ws_pid=$(psql_db src -At -c "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '$slot'")
	ap_pids=$(apply_pids "$name" | tr '\n' ' ')
	# Transactions committed in the destination databases (the apply's
	# groups, and the bench's own few queries).
	local dst_in commits0 commits=""
	# shellcheck disable=SC2086 # a list of databases
	dst_in=$(printf "'%s'," $dsts)
	dst_in=${dst_in%,}
	commits0=$(psql_db src -At -c "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname IN ($dst_in)")
	[ "$name" = native ] || px_pid=$PID_SYNC
	# shellcheck disable=SC2086 # lists of pids
	ws0=$(proc_ticks $ws_pid) ap0=$(proc_ticks $ap_pids) px0=$(proc_ticks $px_pid)
	local cs0=0 cs_used=""
	[ -n "$px_pid" ] && cs0=$(proc_ctxsw "$px_pid")
	local perf_pid=""
	if [ -n "${BENCH_RESHARD_PERF:-}" ] && [ -n "$px_pid" ]; then
		perf record -q -g ${BENCH_RESHARD_PERF_EVENT:+-e "$BENCH_RESHARD_PERF_EVENT"} -p "$px_pid" \
			-o "$BENCH_RESHARD_PERF" >"$BENCH_TMP/perf.log" 2>&1 &
		perf_pid=$!
		BENCH_EXTRA_PIDS+=("$perf_pid")
	fi
	local script=(-f "$BENCH_TMP/write.sql" -D rows="$ROWS")
	[ "$APPLY_LOAD" = tpcb ] && script=(-b tpcb-like)
	log "apply ($name): pgbench ${script[*]} -c $APPLY_CLIENTS -T $APPLY_SECONDS ${APPLY_RATE:+-R $APPLY_RATE }against src"
	"$PGBENCH" -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" -n -M prepared "${script[@]}" \
		-c "$APPLY_CLIENTS" -j 2 -T "$APPLY_SECONDS" ${APPLY_RATE:+-R "$APPLY_RATE"} src >"$out" 2>&1 || rc=$?
	local load
	load=$(cut -d' ' -f1-3 /proc/loadavg)
	if [ "$rc" -ne 0 ] || grep -qiE 'aborted|error' "$out"; then cat "$out" >&2; die "pgbench ($name) failed"; fi
	local tps target t0 caught=""
	tps=$(awk '/^tps = / {printf "%.0f", $3}' "$out")
	target=$(psql_db src -At -c "SELECT pg_current_wal_lsn()")
	t0=$(now)
	for _ in $(seq 6000); do
		if [ "$(psql_db src -At -c "SELECT confirmed_flush_lsn >= '$target' FROM pg_replication_slots WHERE slot_name = '$slot'")" = t ]; then
			caught=$(secs "$t0" "$(now)")
			# shellcheck disable=SC2086 # lists of pids
			ws_used=$(($(proc_ticks $ws_pid) - ws0)) ap_used=$(($(proc_ticks $ap_pids) - ap0)) px_used=$(($(proc_ticks $px_pid) - px0))
			[ -n "$px_pid" ] && cs_used=$(($(proc_ctxsw "$px_pid") - cs0))
			commits=$(($(psql_db src -At -c "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname IN ($dst_in)") - commits0))
			break
		fi
		sleep 0.1
	done
	stop_pid "$pid_s"
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid" 2>/dev/null || true
		wait "$perf_pid" 2>/dev/null || true
	fi
	[ -n "$caught" ] || caught=">600"
	local want got=""
	want=$(check_sums src)
	for _ in $(seq 50); do
		# shellcheck disable=SC2086 # a list of databases
		got=$(check_sums $dsts)
		[ "$got" = "$want" ] && break
		sleep 0.2
	done
	local check=ok
	if [ "$got" != "$want" ]; then
		check="MISMATCH: destination $got, src $want"
		APPLY_FAILED=1
		log "apply ($name): $check"
	fi
	local stats
	local n mb xb ms xs
	n=$(wc -l <"$lagf")
	mb=$(cut -d' ' -f1 "$lagf" | median)
	xb=$(cut -d' ' -f1 "$lagf" | sort -g | tail -1)
	ms=$(cut -d' ' -f2 "$lagf" | median)
	xs=$(cut -d' ' -f2 "$lagf" | sort -g | tail -1)
	stats=$(printf '%s | %.0f | %.0f | %.2f | %.2f' "$n" "$mb" "$xb" "$ms" "$xs")
	log "apply ($name): $tps tps, samples|median bytes|max bytes|median s|max s = $stats, caught up ${caught}s after the load, rows $check"
	log "apply ($name): lag MB, one sample a second: $(awk '{printf "%s%.0f", (NR > 1 ? " " : ""), $1 / 1048576}' "$lagf")"
	local txns rate
	txns=$(awk -F: '/number of transactions actually processed/ {split($2,a,"/"); gsub(/ /,"",a[1]); print a[1]}' "$out")
	rate=$(awk -v n="$txns" -v k="$CHANGES_PER_TXN" -v l="$APPLY_SECONDS" -v c="$caught" 'BEGIN { if (c ~ />/) print "-"; else printf "%.0f", k * n / (l + c) }')
	[ -n "$commits" ] && log "apply ($name): ~$commits transactions committed on the destinations, $(awk -v c="$commits" -v n="$((CHANGES_PER_TXN * txns))" 'BEGIN { printf "%.1f", n / c }') changes per destination transaction"
	[ -n "$cs_used" ] && log "apply ($name): the proxy's threads switched context $cs_used times, $(awk -v c="$cs_used" -v n="$((CHANGES_PER_TXN * txns))" 'BEGIN { printf "%.0f", c * 1e5 / n }') per 100k changes"
	local cpu="- | - | -"
	[ -n "$ws_used" ] && [ "${txns:-0}" -gt 0 ] &&
		cpu=$(awk -v w="$ws_used" -v a="$ap_used" -v p="$px_used" -v px="$px_pid" -v n="$((CHANGES_PER_TXN * txns))" \
			'BEGIN { printf "%.2f | %.2f | %s", w / 100 * 1e5 / n, a / 100 * 1e5 / n, (px == "" ? "-" : sprintf("%.2f", p / 100 * 1e5 / n)) }')
	log "apply ($name): $((CHANGES_PER_TXN * txns)) changes applied at ~$rate changes/s (load + catch-up); CPU s per 100k changes, walsender | apply backends | proxy: $cpu"
	printf -v "LAG_$name" '| %s | %s | %s | %s | %s | %s | %s |' "$name" "$tps" "$stats" "$caught" "$rate" "$cpu" "$check; load $load"
}

run_apply_shardgate() {
	psql_db src -c "CREATE SEQUENCE bench_ins START 1000000000" >/dev/null
	cat >"$BENCH_TMP/write.sql" <<'SQL'
\set aid random(1, :rows)
UPDATE accounts SET balance = balance + 1 WHERE id = :aid;
INSERT INTO accounts VALUES (nextval('bench_ins'), 0, repeat('y', 160));
SQL
	apply_load shardgate sg_src_to_dst_0 "d0 d1"
}

run_apply_native() {
	log "native: re-copy src into dst_pipe, publication + subscription (copy_data = false)"
	local t tables=accounts
	[ "$APPLY_LOAD" = tpcb ] && tables=$TPCB_TABLES
	for t in $tables; do
		psql_db dst_pipe -c "TRUNCATE $t" >/dev/null
		psql_db src -c "COPY $t TO STDOUT (FORMAT binary)" |
			psql_db dst_pipe -c "COPY $t FROM STDIN (FORMAT binary)" >/dev/null || die "pipe of $t failed"
	done
	# Same cluster: the slot must exist before CREATE SUBSCRIPTION.
	psql_db src -c "CREATE PUBLICATION bench_pub FOR TABLE ${tables// /, }" \
		-c "SELECT pg_create_logical_replication_slot('bench_sub', 'pgoutput')" >/dev/null
	psql_db dst_pipe -c "CREATE SUBSCRIPTION bench_sub CONNECTION 'host=127.0.0.1 port=$PORT_DIRECT dbname=src user=$BENCH_USER'
		PUBLICATION bench_pub WITH (copy_data = false, create_slot = false, slot_name = 'bench_sub')" >/dev/null ||
		die "CREATE SUBSCRIPTION failed"
	for _ in $(seq 100); do
		[ "$(psql_db src -At -c "SELECT active FROM pg_replication_slots WHERE slot_name = 'bench_sub'")" = t ] && break
		sleep 0.1
	done
	apply_load native bench_sub dst_pipe
	psql_db dst_pipe -c "ALTER SUBSCRIPTION bench_sub DISABLE" -c "ALTER SUBSCRIPTION bench_sub SET (slot_name = NONE)" \
		-c "DROP SUBSCRIPTION bench_sub" >/dev/null
	for _ in $(seq 50); do
		psql_db src -c "SELECT pg_drop_replication_slot('bench_sub')" >/dev/null 2>&1 && break
		sleep 0.2
	done
}

# latency_stats prints "n p50 p99 max" (ms) of the latencies (µs, one a
# line) on stdin.
latency_stats() {
	sort -n | awk '{v[NR] = $1} END {
		if (NR == 0) { print "0 - - -"; exit }
		i50 = int(NR * 0.50 + 0.999); i99 = int(NR * 0.99 + 0.999)
		printf "%d %.2f %.2f %.2f\n", NR, v[i50] / 1000, v[i99] / 1000, v[NR] / 1000 }'
}

# admin_sql PORT SQL runs SQL in the admin database of the proxy on PORT.
admin_sql() {
	PGPASSWORD=admin-secret "$PG_BIN/psql" -X -q -At -F'|' -h 127.0.0.1 -p "$1" -U admin -d admin -c "$2"
}

# start_cutover_proxy: a proxy in transaction mode serving app (app_0) and
# app_new (app_new_0, app_new_1), with its admin database. Sets PORT_CUT,
# PID_CUT.
start_cutover_proxy() {
	local db h="host: 127.0.0.1, port: $PORT_DIRECT"
	for db in app_0 app_new_0 app_new_1; do
		psql_db postgres -c "CREATE DATABASE $db" >/dev/null || die "createdb $db failed"
	done
	psql_db app_0 -c "CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, filler text)" \
		-c "INSERT INTO accounts SELECT g, 0, repeat('x', 160) FROM generate_series(1::bigint, $CUT_ROWS) g" \
		-c "VACUUM ANALYZE accounts" >/dev/null || die "loading app_0 failed"
	reserve_port PORT_CUT 58432
	cat >"$BENCH_TMP/cutover.yaml" <<YAML
# generated by bench/reshard.sh (cutover); RESHARD rewrites it
listen: 127.0.0.1:$PORT_CUT
auth_type: trust
admin: { user: admin, password: admin-secret }
pool:
  mode: transaction
  size: 10
users:
  - name: $BENCH_USER
    server_password: ""
databases:
  - name: app
    shards:
      - { $h, database: app_0 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
  - name: app_new
    shards:
      - { $h, database: app_new_0 }
      - { $h, database: app_new_1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
YAML
	"$BENCH_TMP/proxy" -config "$BENCH_TMP/cutover.yaml" -log-level info >"$BENCH_TMP/cutover-proxy.log" 2>&1 &
	PID_CUT=$!
	BENCH_EXTRA_PIDS+=("$PID_CUT")
	for _ in $(seq 100); do
		"$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$PORT_CUT" -U "$BENCH_USER" -d app -c 'SELECT 1' >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	cat "$BENCH_TMP/cutover-proxy.log" >&2
	die "the cutover proxy does not answer"
}

# wait_reshard_done polls SHOW TASKS until app's task is done; sets
# CUT_PAUSE_US from its pause column.
wait_reshard_done() {
	local row state deadline=$((SECONDS + 600))
	# SHOW TASKS: id|kind|source|destination|state|phase|started|elapsed|pause|error|…
	while :; do
		row=$(admin_sql "$PORT_CUT" "SHOW TASKS" | awk -F'|' '$3 == "app"' | tail -1)
		state=$(cut -d'|' -f5 <<<"$row")
		case $state in done) break ;; failed | stopped) die "RESHARD ended $state: $row" ;; esac
		[ "$SECONDS" -lt "$deadline" ] || die "RESHARD did not finish in 10 minutes: $row"
		sleep 0.1
	done
	CUT_PAUSE_US=$(cut -d'|' -f9 <<<"$row")
}

# run_cutover: pgbench -R writes through the proxy while RESHARD app
# app_new (1 → 2 shards, transaction mode) copies, streams and cuts over.
# Sets CUT_ROW_ALL, CUT_ROW_NEAR (table rows) and CUT_NOTES.
run_cutover() {
	start_cutover_proxy
	printf '\\set id random(1, %d)\nUPDATE accounts SET balance = balance + 1 WHERE id = :id;\n' "$CUT_ROWS" >"$BENCH_TMP/cut.sql"
	log "cutover: pgbench -c $CUT_CLIENTS -R $CUT_RATE -T $CUT_SECONDS -M prepared through the proxy; RESHARD app app_new after 3 s"
	mkdir -p "$BENCH_TMP/cutlog"
	local rc=0 out=$BENCH_TMP/pgbench-cutover.log
	(cd "$BENCH_TMP/cutlog" && "$PGBENCH" -h 127.0.0.1 -p "$PORT_CUT" -U "$BENCH_USER" -n -M prepared -f "$BENCH_TMP/cut.sql" \
		-c "$CUT_CLIENTS" -j 2 -R "$CUT_RATE" -T "$CUT_SECONDS" --log --log-prefix=cut app >"$out" 2>&1) &
	local pid_bench=$!
	BENCH_EXTRA_PIDS+=("$pid_bench")
	sleep 3
	admin_sql "$PORT_CUT" "RESHARD app app_new" >/dev/null || die "RESHARD failed"
	wait_reshard_done
	wait "$pid_bench" || rc=$?
	# The pause ended at the "cutover: done" log line and began
	# CUT_PAUSE_US before it.
	local done_line end_s from to
	done_line=$(grep -m1 'msg="cutover: done"' "$BENCH_TMP/cutover-proxy.log") || die "no 'cutover: done' in the proxy log"
	end_s=$(date -d "$(sed -E 's/^time=([^ ]+).*/\1/' <<<"$done_line")" +%s.%N)
	from=$(awk -v e="$end_s" -v p="$CUT_PAUSE_US" 'BEGIN { printf "%.6f", e - p / 1e6 - 0.5 }')
	to=$(awk -v e="$end_s" 'BEGIN { printf "%.6f", e + 0.5 }')
	# pgbench --log lines: client txn latency_us script epoch_s epoch_us
	# lag_us; epoch_s.epoch_us is the transaction's end. A failed or
	# skipped transaction has no number in the latency column.
	cat "$BENCH_TMP"/cutlog/cut.* >"$BENCH_TMP/cut-all.log"
	local all near
	all=$(awk '$3 ~ /^[0-9]+$/ { print $3 }' "$BENCH_TMP/cut-all.log" | latency_stats)
	near=$(awk -v f="$from" -v t="$to" '$3 ~ /^[0-9]+$/ { e = $5 + $6 / 1e6; if (e >= f && e <= t) print $3 }' "$BENCH_TMP/cut-all.log" | latency_stats)
	local failed txns sum check
	failed=$(awk '/number of failed transactions/ { print $5 }' "$out")
	txns=$(awk -F: '/number of transactions actually processed/ {split($2,a,"/"); gsub(/ /,"",a[1]); print a[1]}' "$out")
	sum=$(for db in app_new_0 app_new_1; do psql_db "$db" -At -c "SELECT coalesce(sum(balance), 0) FROM accounts"; done | awk '{s += $1} END {print s}')
	check="the new shards hold all $txns updates"
	[ "$sum" = "$txns" ] || { check="MISMATCH: the new shards hold $sum updates, pgbench completed $txns"; APPLY_FAILED=1; }
	if [ "$rc" -ne 0 ] || grep -qiE 'aborted|error' "$out"; then
		check="$check; pgbench exit $rc: $(grep -iE 'aborted|error' "$out" | head -3 | tr '\n' ' ')"
		APPLY_FAILED=1
	fi
	local n p50 p99 mx
	read -r n p50 p99 mx <<<"$all"
	CUT_ROW_ALL="| all $CUT_SECONDS s | $n | $p50 | $p99 | $mx |"
	read -r n p50 p99 mx <<<"$near"
	CUT_ROW_NEAR="| pause ± 0.5 s | $n | $p50 | $p99 | $mx |"
	CUT_NOTES="pause (SHOW TASKS) $CUT_PAUSE_US µs; failed transactions ${failed:-0}; $check"
	log "cutover: latency (n p50 p99 max ms) overall $all, around the cutover $near; $CUT_NOTES"
	log "cutover: the proxy's log of the task:"
	grep -E 'cutover|fence|pause|resum' "$BENCH_TMP/cutover-proxy.log" | sed 's/^/    /' | head -20 >&2
	stop_pid "$PID_CUT"
}

[ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1 && die "running as root needs a 'postgres' OS user"
find_pg_bin
PGBENCH=${PGBENCH:-$PG_BIN/pgbench}
[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench) || die "pgbench not found"
[ -n "${SHARDGATE_BIN:-}" ] || command -v go >/dev/null || die "go not found"
BENCH_TMP=$(mktemp -d /tmp/shardgate-bench.XXXXXX)
chmod 755 "$BENCH_TMP"
chown postgres: "$BENCH_TMP" 2>/dev/null || true
cd "$BENCH_TMP" || die "cannot enter $BENCH_TMP"
start_pg_logical
build_proxy
load_source
LOAD_COPY=""
run_pipe
LOAD_COPY="pipe: $(cut -d' ' -f1-3 /proc/loadavg)"
run_shardgate
LOAD_COPY="$LOAD_COPY; shardgate: $(cut -d' ' -f1-3 /proc/loadavg)"
APPLY_FAILED=""
LAG_shardgate=""
LAG_native=""
if [ "$APPLY_SECONDS" -gt 0 ]; then
	run_apply_shardgate
	stop_data_sync
	run_apply_native
else
	stop_data_sync
fi
CUT_ROW_ALL=""
if [ "$CUT_SECONDS" -gt 0 ]; then
	run_cutover
fi

PIPE_MBS=$(mbps "$SRC_BYTES" "$PIPE_S")
COPIED_MBS=$(mbps "$SRC_BYTES" "$COPIED_S")
POST_MBS=$(mbps "$SRC_BYTES" "$POST_S")
RATIO_COPIED=$(awk -v a="$COPIED_MBS" -v b="$PIPE_MBS" 'BEGIN { printf "%.2f", a / b }')
RATIO_POST=$(awk -v a="$POST_MBS" -v b="$PIPE_MBS" 'BEGIN { printf "%.2f", a / b }')

mkdir -p "$(dirname "$BENCH_OUT")"
cat >"$BENCH_OUT" <<EOF
# Resharding copy throughput

Generated by \`bench/reshard.sh\` on $STARTED: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}')
(wal_level=logical, fsync=off, synchronous_commit=off, shared_buffers=512MB), shardgate
$SHARDGATE_VERSION, $(nproc) CPUs (${BENCH_RESHARD_EMBEDDED:+the task inside a serving proxy, COPY_DATA; }GOMAXPROCS: ${BENCH_RESHARD_GOMAXPROCS:-${GOMAXPROCS:-the default}}), everything on one machine and one server (loopback).
Load average (1/5/15 min) at start: $LOAD_START; after each copy: $LOAD_COPY.

Source table: \`accounts(id bigint primary key, balance int, filler text)\`, $ROWS rows,
heap $((SRC_BYTES / 1048576)) MB (with its index $((SRC_TOTAL / 1048576)) MB). MB/s = heap bytes / wall time.

| copy | wall s | MB/s | × pipe |
|---|---:|---:|---:|
| pipe: \`psql COPY … TO STDOUT (binary) \| psql COPY … FROM STDIN (binary)\`, PK pre-created | $PIPE_S | $PIPE_MBS | 1.00 |
| shardgate \`data-sync\` 1 → 2 shards, until both shards committed the copy (table_copies rows) | $COPIED_S | $COPIED_MBS | $RATIO_COPIED |
| shardgate \`data-sync\` 1 → 2 shards, until "copy done" (incl. post-data: PK build) | $POST_S | $POST_MBS | $RATIO_POST |

- \`proxy schema-sync\` before it: $SCHEMA_S s (not included above; data-sync's own schema
  step finds the markers and skips).
- data-sync's time includes its checks, publication and slot creation (EXPORT_SNAPSHOT).
- Rows on the destination shards d0 / d1: $SPLIT; count, sum(id), sum(balance) equal the
  source's ($SRC_SUM), as do dst_pipe's. shardgate_reshard.table_copies on d0: $COPY_ROWS.
- data-sync was then stopped with SIGINT and its slot dropped on the source
  (\`pg_drop_replication_slot\`; slots were: $SLOTS).
- Target: shardgate ≥ 0.8× the pipe.

EOF
if [ "$APPLY_SECONDS" -gt 0 ]; then
	if [ "$APPLY_LOAD" = tpcb ]; then
		LOAD_DESC="pgbench's built-in tpcb-like script at scale $TPCB_SCALE (per transaction UPDATEs of one
of $((TPCB_SCALE * 100000)) accounts, one of $((TPCB_SCALE * 10)) tellers and one of $TPCB_SCALE branches, and an INSERT into
pgbench_history, which has a \`bigserial\` primary key here; sharded on the destination by aid,
tid, bid, hid). The copy above also copied the pgbench tables, so its times are not comparable
with those of the \`accounts\`-only runs."
		CHECK_DESC="the sums of the accounts' balances and of the tellers' and branches' balances,
and the history's row count and sum of deltas,"
	else
		LOAD_DESC="each transaction
\`UPDATE accounts SET balance = balance + 1 WHERE id = random(1, $ROWS)\` and
\`INSERT INTO accounts VALUES (nextval('bench_ins'), 0, repeat('y', 160))\` (autocommit, 2
statements)."
		CHECK_DESC="count, sum(id), sum(balance)"
	fi
	cat >>"$BENCH_OUT" <<EOF

## Apply under a write load

Right after the copy, with data-sync streaming (1 → 2 shards), pgbench writes to src
directly for $APPLY_SECONDS s at $APPLY_CLIENTS clients (-j 2, -M prepared${APPLY_RATE:+, -R $APPLY_RATE: the same source rate in both halves}), $LOAD_DESC
Then the same against PostgreSQL's native logical replication: dst_pipe
re-copied from src, \`CREATE PUBLICATION … FOR TABLE …\`, \`CREATE SUBSCRIPTION … WITH
(copy_data = false)\` in dst_pipe (one destination database, no sharding).

Lag sampled once a second on src: bytes = \`pg_current_wal_lsn() - confirmed_flush_lsn\` of
the slot; seconds = \`pg_stat_replication.flush_lag\` of its walsender (0 when idle).
Destinations are on the same server, so the WAL the apply itself writes counts in the
bytes too (for both). "caught up" = seconds after pgbench ended until the slot's confirmed
position reached the WAL position at that moment. "rows" compares $CHECK_DESC
of the destination(s) with src afterwards. Samples run from the start of
pgbench until caught up (so a slow apply has more of them). "applied changes/s" = $CHANGES_PER_TXN ×
pgbench transactions / (load seconds + catch-up seconds): the apply rate when the apply is the
bottleneck, the source's write rate when it is not. CPU is in s per 100k applied changes, from
the load's start until caught up (clock ticks of /proc/PID/stat): "walsender" is the slot's
walsender, "apply" native's apply worker or shardgate's sessions on d0 and d1, "proxy"
shardgate's data-sync process.

| replication | source tps | samples | median lag bytes | max lag bytes | median lag s | max lag s | caught up s | applied changes/s | walsender s/100k | apply s/100k | proxy s/100k | rows; load avg after load |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|
$LAG_shardgate
$LAG_native
EOF
else
	echo "" >>"$BENCH_OUT"
	echo "Apply under a write load: skipped (BENCH_RESHARD_APPLY_SECONDS=0)." >>"$BENCH_OUT"
fi
if [ "$CUT_SECONDS" -gt 0 ]; then
	cat >>"$BENCH_OUT" <<EOF

## Writer latency across a cutover

A proxy in transaction mode serves \`app\` (one shard) and \`app_new\` (two shards); pgbench
writes through it to \`app\` (\`-M prepared -c $CUT_CLIENTS -j 2 -R $CUT_RATE -T $CUT_SECONDS --log\`,
\`UPDATE accounts SET balance = balance + 1 WHERE id = random(1, $CUT_ROWS)\`) while \`RESHARD app
app_new\` (started 3 s in) copies $CUT_ROWS rows, streams and cuts over by itself. Latency is
pgbench's per-transaction time (from its scheduled start, so a wait at the paused gate counts);
"pause ± 0.5 s" takes the transactions that ended from 0.5 s before the pause began to 0.5 s
after it ended (the pause's end is the proxy's \`cutover: done\` log line).

| transactions | n | p50 ms | p99 ms | max ms |
|---|---:|---:|---:|---:|
$CUT_ROW_ALL
$CUT_ROW_NEAR

$CUT_NOTES.
EOF
fi
log "wrote $BENCH_OUT"
cat "$BENCH_OUT"
[ -z "$APPLY_FAILED" ] || die "rows differ or pgbench failed in the apply or cutover runs (see $BENCH_OUT)"
