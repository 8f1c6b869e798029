#!/usr/bin/env bash
# bench/sharding.sh — what routing and merging cost: pgbench through shardgate
# to a pass-through database and to a sharded one, a fan-out ORDER BY … LIMIT,
# and the proxy's memory while it streams 1M-row scans from 4 shards.
#
# Starts a throwaway PostgreSQL (fsync=off) and shardgate (built from this
# tree), on loopback. Every "shard" is a database on that one server:
#
#   pass          accounts (BENCH_ROWS rows) and big (BENCH_BIG_ROWS rows),
#                 behind a one-shard proxy database "pass": never parsed,
#                 every statement passes through
#   s2_0, s2_1    accounts split by hash, proxy database "routed" (2 shards)
#   s4_0 … s4_3   accounts and big split by hash, proxy database "fan" (4 shards)
#   pass_en, s4en_0 … s4en_3
#                 big again, in databases whose collation is the libc locale
#                 BENCH_LIBC_LOCALE: proxy databases "pass_en" and "fan_en"
#
# The cluster is initdb'd with --locale=C, so pass and fan order text
# bytewise; the script checks lc_collate of every database.
#
# Rows are loaded directly into each shard database, placed by PostgreSQL's own
# hash partitioning (satisfies_hash_partition on a PARTITION BY HASH (bigint)
# table), which is what shardgate's hash function reproduces; the script then
# checks through the proxy that sample keys are found and that the fan-out
# answers equal the single database's.
#
# 1. Routed vs pass-through: `SELECT balance FROM accounts WHERE id = :aid`
#    at BENCH_CLIENTS clients, -M extended and -M prepared, against "pass" and
#    "routed" back to back (interleaved, order alternating by round). Reports
#    TPS, the ratio routed/pass (target ≥ 0.9), the proxy's CPU per
#    transaction and (BENCH_PERF) its system calls and context switches per
#    transaction.
# 2. Fan-out: `SELECT id, balance FROM accounts ORDER BY balance DESC, id
#    LIMIT 100` at BENCH_FANOUT_CLIENTS clients against "fan" (4 shards) and,
#    for reference, "pass".
# 3. Memory: the proxy's peak RSS (VmHWM, reset through /proc/PID/clear_refs
#    before each scan) while psql reads `SELECT * FROM big` and `SELECT * FROM
#    big ORDER BY id` through "pass" and "fan", against its RSS before. psql's
#    output is checked (row count, id sum, order) by awk. Then, each on a
#    freshly started proxy, the merging statements of merge_statements:
#    count(DISTINCT …) plain and grouped, string_agg(… ORDER BY id) with one
#    large result and with 100000 small groups, and ORDER BY a text column,
#    through pass and fan and (the ones that compare text) through pass_en
#    and fan_en: the proxy's peak RSS against its RSS before, wall time, its
#    CPU time, and the answer's md5, which must equal the pass-through one.
#    A 0A000 refusal through a 4-shard database is recorded, not fatal.
#
# Prints a table and writes it as Markdown (BENCH_OUT) with every single run
# in a .tsv beside it, and part 3's merges in a .memory.tsv.
#
# Environment:
#   BENCH_SECONDS         seconds per pgbench run (default 10)
#   BENCH_REPEAT          rounds of part 1 and 2 (default 3); cells are medians
#   BENCH_CLIENTS         clients of part 1 (default 16; -j 2)
#   BENCH_MODES           part 1 modes (default "extended prepared")
#   BENCH_FANOUT_CLIENTS  clients of part 2 (default 4)
#   BENCH_FANOUT_MODES    part 2 modes (default "extended")
#   BENCH_ROWS            accounts rows (default 200000)
#   BENCH_BIG_ROWS        big rows (default 1000000)
#   BENCH_BIG_TAGS        distinct values of big.tag (default 100000)
#   BENCH_LIBC_LOCALE     the libc locale of pass_en and fan_en's shards
#                         (default en_US.UTF-8; empty: C collation only)
#   BENCH_POOL_SIZE       server connections per pool, i.e. per shard (default 20)
#   BENCH_ROUTED_POOL_SIZE  the same for "routed" only (default BENCH_POOL_SIZE):
#                         half of it gives the routed database as many server
#                         backends in all as the pass-through uses
#   BENCH_OUT             Markdown output (default bench/results/sharding.md)
#   GOMAXPROCS            passed to shardgate as usual
#   SHARDGATE_BIN         use this proxy binary instead of building ./cmd/proxy
#                         (SHARDGATE_VERSION labels it in the results)
#   BENCH_KEEP_ON_FAILURE=1  keep the temp dir (logs) when something fails
#
# Any pgbench error, failed transaction, aborted client, wrong answer or proxy
# exit stops the script with a non-zero exit.
set -euo pipefail

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_ROUTED_POOL_SIZE=${BENCH_ROUTED_POOL_SIZE:-$BENCH_POOL_SIZE}
# BENCH_PERF=1 (the default where perf can count syscall tracepoints) counts
# the proxy's system calls and context switches per transaction with perf
# stat during each pgbench run; 0 skips it.
if [ -z "${BENCH_PERF:-}" ]; then
	BENCH_PERF=0
	perf stat -x, -e raw_syscalls:sys_enter,context-switches -o /dev/null -- true >/dev/null 2>&1 && BENCH_PERF=1
fi
BENCH_REPEAT=${BENCH_REPEAT:-3}
BENCH_CLIENTS=${BENCH_CLIENTS:-16}
BENCH_MODES=${BENCH_MODES:-extended prepared}
BENCH_FANOUT_CLIENTS=${BENCH_FANOUT_CLIENTS:-4}
BENCH_FANOUT_MODES=${BENCH_FANOUT_MODES:-extended}
BENCH_ROWS=${BENCH_ROWS:-200000}
BENCH_BIG_ROWS=${BENCH_BIG_ROWS:-1000000}
BENCH_BIG_TAGS=${BENCH_BIG_TAGS:-100000}
BENCH_LIBC_LOCALE=${BENCH_LIBC_LOCALE-en_US.UTF-8}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/results/sharding.md}
case $BENCH_OUT in /*) ;; *) BENCH_OUT=$PWD/$BENCH_OUT ;; esac
BENCH_DB=pass # wait_sql connects to it

TICK=$(getconf CLK_TCK)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

psql_direct() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT_DIRECT" -U "$BENCH_USER" "$@"; }
psql_proxy() { "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PORT_SHARDGATE" -U "$BENCH_USER" "$@"; }

start_pg_sharded() {
	reserve_port PORT_DIRECT "${BENCH_PG_PORT:-55432}"
	log "starting PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT_DIRECT (fsync=off)"
	as_pg "$PG_BIN/initdb" -D "$BENCH_TMP/pgdata" -U "$BENCH_USER" -A trust --no-sync -E UTF8 --locale=C >"$BENCH_TMP/initdb.log" 2>&1 ||
		{ cat "$BENCH_TMP/initdb.log" >&2; die "initdb failed"; }
	cat >>"$BENCH_TMP/pgdata/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PORT_DIRECT
unix_socket_directories = '$BENCH_TMP'
max_connections = 300
max_prepared_transactions = 50
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 512MB
log_min_messages = warning
EOF
	PG_STARTED=1
	as_pg "$PG_BIN/pg_ctl" -D "$BENCH_TMP/pgdata" -l "$BENCH_TMP/postgres.log" -w -t 60 start >/dev/null ||
		{ cat "$BENCH_TMP/postgres.log" >&2; die "PostgreSQL did not start"; }
}

# load_db DB MODULUS REMAINDER TABLES [LOCALE] creates DB (in LOCALE, else
# the cluster's C) with TABLES ("accounts big", "accounts" or "big") holding
# the rows PARTITION BY HASH (id) … MODULUS/REMAINDER would hold (all rows
# for modulus 1).
load_db() {
	local db=$1 mod=$2 rem=$3 tables=$4 locale=${5:-} where="" create
	create="CREATE DATABASE $db"
	[ -n "$locale" ] && create="$create TEMPLATE template0 LOCALE '$locale'"
	psql_direct -d postgres -c "$create" >/dev/null || die "createdb $db failed"
	[ "$mod" -gt 1 ] && where="WHERE satisfies_hash_partition('hp'::regclass, $mod, $rem, g)"
	{
		echo "CREATE TABLE hp (id bigint) PARTITION BY HASH (id);"
		if [[ " $tables " == *" accounts "* ]]; then
			echo "CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, filler text);"
			# balance: 50000 values, 4 accounts each, so the LIMIT's tie-break on id matters.
			echo "INSERT INTO accounts SELECT g, (g * 7919) % 50000, repeat('x', 84)
				FROM generate_series(1::bigint, $BENCH_ROWS) g $where;"
		fi
		if [[ " $tables " == *" big "* ]]; then
			# payload is unique; tag has BENCH_BIG_TAGS values, each on
			# several shards, for DISTINCT merges that must drop duplicates.
			echo "CREATE TABLE big (id bigint PRIMARY KEY, payload text NOT NULL, tag text NOT NULL);"
			echo "INSERT INTO big SELECT g, md5(g::text) || md5((g + 1)::text), md5((g % $BENCH_BIG_TAGS)::text)
				FROM generate_series(1::bigint, $BENCH_BIG_ROWS) g $where;"
		fi
		echo "DROP TABLE hp;"
		echo "VACUUM ANALYZE;"
	} | psql_direct -d "$db" >"$BENCH_TMP/load-$db.log" 2>&1 || { cat "$BENCH_TMP/load-$db.log" >&2; die "loading $db failed"; }
}

# count_rows TABLE DB… prints the sum of TABLE's row counts in the DBs.
count_rows() {
	local t=$1 n=0 c db
	shift
	for db in "$@"; do
		c=$(psql_direct -d "$db" -At -c "SELECT count(*) FROM $t") || die "counting $t in $db failed"
		n=$((n + c))
	done
	echo "$n"
}

load_all() {
	log "loading: pass (accounts $BENCH_ROWS, big $BENCH_BIG_ROWS rows), s2_0..1 (accounts), s4_0..3 (accounts, big), placed by satisfies_hash_partition"
	load_db pass 1 0 "accounts big"
	local i
	for i in 0 1; do load_db "s2_$i" 2 "$i" accounts; done
	for i in 0 1 2 3; do load_db "s4_$i" 4 "$i" "accounts big"; done
	if [ -n "$BENCH_LIBC_LOCALE" ]; then
		log "loading big into pass_en and s4en_0..3 (locale $BENCH_LIBC_LOCALE)"
		load_db pass_en 1 0 big "$BENCH_LIBC_LOCALE"
		for i in 0 1 2 3; do load_db "s4en_$i" 4 "$i" big "$BENCH_LIBC_LOCALE"; done
	fi
	# Every row is somewhere exactly once.
	local n2 n4 nb nbe=$BENCH_BIG_ROWS
	n2=$(count_rows accounts s2_0 s2_1)
	n4=$(count_rows accounts s4_0 s4_1 s4_2 s4_3)
	nb=$(count_rows big s4_0 s4_1 s4_2 s4_3)
	[ -n "$BENCH_LIBC_LOCALE" ] && nbe=$(count_rows big s4en_0 s4en_1 s4en_2 s4en_3)
	if [ "$n2" -ne "$BENCH_ROWS" ] || [ "$n4" -ne "$BENCH_ROWS" ] || [ "$nb" -ne "$BENCH_BIG_ROWS" ] || [ "$nbe" -ne "$BENCH_BIG_ROWS" ]; then
		die "shards hold $n2 / $n4 accounts and $nb / $nbe big rows, want $BENCH_ROWS and $BENCH_BIG_ROWS"
	fi
	check_collations
}

# check_collations: pass and the s4_ shards order text bytewise (C), pass_en
# and the s4en_ shards in the libc locale; the report says which.
check_collations() {
	local db c
	for db in pass s4_0 s4_1 s4_2 s4_3; do
		c=$(psql_direct -d "$db" -At -c "SHOW lc_collate") || die "SHOW lc_collate in $db failed"
		[ "$c" = C ] || die "$db has lc_collate $c, want C"
	done
	COLLATE_C=$c
	[ -n "$BENCH_LIBC_LOCALE" ] || return 0
	for db in pass_en s4en_0 s4en_1 s4en_2 s4en_3; do
		c=$(psql_direct -d "$db" -At -c "SHOW lc_collate") || die "SHOW lc_collate in $db failed"
		[ "$c" = "$BENCH_LIBC_LOCALE" ] || die "$db has lc_collate $c, want $BENCH_LIBC_LOCALE"
	done
	COLLATE_LIBC="$c, provider $(psql_direct -d pass_en -At -c "SELECT datlocprovider FROM pg_database WHERE datname = 'pass_en'" | sed 's/^c$/libc/;s/^i$/icu/'), version $(psql_direct -d pass_en -At -c "SELECT pg_database_collation_actual_version(oid) FROM pg_database WHERE datname = 'pass_en'")"
}

start_shardgate_sharded() {
	reserve_port PORT_SHARDGATE "${BENCH_SHARDGATE_PORT:-57432}"
	if [ -x "$BENCH_TMP/proxy" ]; then
		: # a restart
	elif [ -n "${SHARDGATE_BIN:-}" ]; then
		log "using shardgate binary $SHARDGATE_BIN"
		cp "$SHARDGATE_BIN" "$BENCH_TMP/proxy" || die "cannot copy $SHARDGATE_BIN"
	else
		log "building shardgate (go build ./cmd/proxy)"
		(cd "$REPO_DIR" && go build -o "$BENCH_TMP/proxy" ./cmd/proxy) || die "go build failed"
	fi
	local h="host: 127.0.0.1, port: $PORT_DIRECT"
	cat >"$BENCH_TMP/shardgate.yaml" <<EOF
# generated by bench/sharding.sh: trust auth, transaction pooling; every shard
# is a database on the same PostgreSQL server
listen: 127.0.0.1:$PORT_SHARDGATE
auth_type: trust
pool:
  mode: transaction
  size: $BENCH_POOL_SIZE
users:
  - name: $BENCH_USER
    server_password: ""
databases:
  - name: pass
    shards:
      - { $h, database: pass }
  - name: routed
    pool: { size: $BENCH_ROUTED_POOL_SIZE }
    shards:
      - { $h, database: s2_0 }
      - { $h, database: s2_1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
  - name: fan
    shards:
      - { $h, database: s4_0 }
      - { $h, database: s4_1 }
      - { $h, database: s4_2 }
      - { $h, database: s4_3 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { table: big, column: id, type: bigint }
EOF
	if [ -n "$BENCH_LIBC_LOCALE" ]; then
		cat >>"$BENCH_TMP/shardgate.yaml" <<EOF
  - name: pass_en
    shards:
      - { $h, database: pass_en }
  - name: fan_en
    shards:
      - { $h, database: s4en_0 }
      - { $h, database: s4en_1 }
      - { $h, database: s4en_2 }
      - { $h, database: s4en_3 }
    sharded_tables:
      - { table: big, column: id, type: bigint }
EOF
	fi
	"$BENCH_TMP/proxy" check-config "$BENCH_TMP/shardgate.yaml" >"$BENCH_TMP/check-config.log" 2>&1 ||
		{ cat "$BENCH_TMP/check-config.log" >&2; die "generated shardgate config is invalid"; }
	SHARDGATE_VERSION=${SHARDGATE_VERSION:-$(cd "$REPO_DIR" && git describe --always --dirty 2>/dev/null || echo unknown)}
	log "starting shardgate $SHARDGATE_VERSION on 127.0.0.1:$PORT_SHARDGATE (transaction mode, pool $BENCH_POOL_SIZE per shard, GOMAXPROCS=${GOMAXPROCS:-default})"
	local try
	for try in 1 2 3; do
		"$BENCH_TMP/proxy" -config "$BENCH_TMP/shardgate.yaml" -log-level "${BENCH_SHARDGATE_LOG_LEVEL:-warn}" >"$BENCH_TMP/shardgate.log" 2>&1 &
		PID_SHARDGATE=$!
		wait_sql "$PORT_SHARDGATE" shardgate "$PID_SHARDGATE" && break
		# The port reserve_port found can be taken before the proxy binds it
		# (a client's ephemeral port: the range includes ours).
		if [ "$try" -eq 3 ] || ! grep -q 'address already in use' "$BENCH_TMP/shardgate.log"; then
			tail -20 "$BENCH_TMP/shardgate.log" >&2
			die "shardgate exited at start"
		fi
		reserve_port PORT_SHARDGATE $((PORT_SHARDGATE + 1))
		log "the port was taken meanwhile; starting shardgate on 127.0.0.1:$PORT_SHARDGATE"
		sed -i "s/^listen: 127\.0\.0\.1:.*/listen: 127.0.0.1:$PORT_SHARDGATE/" "$BENCH_TMP/shardgate.yaml"
	done
	expect_comm "$PID_SHARDGATE" proxy
}

proxy_alive() {
	kill -0 "$PID_SHARDGATE" 2>/dev/null || { tail -30 "$BENCH_TMP/shardgate.log" >&2; die "shardgate died"; }
}

# check_answers: keyed lookups find their rows through the routed and fan
# databases, and the fan-out query answers what one database answers.
check_answers() {
	log "checking answers through the proxy"
	local f=$BENCH_TMP/lookups.sql want db got
	awk -v n="$BENCH_ROWS" 'BEGIN { srand(42); for (i = 0; i < 300; i++) printf "SELECT id FROM accounts WHERE id = %d;\n", 1 + int(rand() * n) }' >"$f"
	want=$(awk '{print $NF}' "$f" | tr -d ';' | md5sum)
	for db in pass routed fan; do
		got=$(psql_proxy -d "$db" -At -f "$f" 2>&1 | md5sum)
		[ "$got" = "$want" ] || { psql_proxy -d "$db" -At -f "$f" 2>&1 | head -5 >&2; die "keyed lookups through $db did not find their rows"; }
	done
	local q='SELECT id, balance FROM accounts ORDER BY balance DESC, id LIMIT 100'
	want=$(psql_direct -d pass -At -c "$q" | md5sum)
	got=$(psql_proxy -d fan -At -c "$q" 2>&1 | md5sum)
	[ "$got" = "$want" ] || { psql_proxy -d fan -At -c "$q" 2>&1 | head -5 >&2; die "fan-out ORDER BY … LIMIT answers differently from one database"; }
	q='SELECT count(*), sum(balance), min(id), max(id) FROM accounts'
	want=$(psql_direct -d pass -At -c "$q")
	for db in routed fan; do
		got=$(psql_proxy -d "$db" -At -c "$q" 2>&1)
		[ "$got" = "$want" ] || die "$q through $db: $got, one database says $want"
	done
}

# sg_pgbench DB MODE CLIENTS SCRIPT OUT runs pgbench through the proxy and
# sets TPS, TXNS, CPU_TICKS (the proxy's CPU during the run). Any error,
# failed transaction or aborted client is fatal.
sg_pgbench() {
	local db=$1 mode=$2 clients=$3 script=$4 out=$5 secs=${6:-$BENCH_SECONDS}
	local jobs=2 before after rc=0 failed
	[ "$clients" -lt "$jobs" ] && jobs=$clients
	local perf=
	if [ "$BENCH_PERF" = 1 ]; then
		perf stat -x, -e raw_syscalls:sys_enter,context-switches -p "$PID_SHARDGATE" -o "$out.perf" &
		perf=$!
		BENCH_EXTRA_PIDS+=("$perf")
		sleep 0.5 # perf attaches; nothing to poll for
	fi
	pg_cpu_snapshot >"$out.pgcpu"
	before=$(proc_cpu_ticks "$PID_SHARDGATE")
	"$PGBENCH" -h 127.0.0.1 -p "$PORT_SHARDGATE" -U "$BENCH_USER" -n -f "$script" -M "$mode" -c "$clients" -j "$jobs" -T "$secs" "$db" >"$out" 2>&1 || rc=$?
	after=$(proc_cpu_ticks "$PID_SHARDGATE")
	CPU_TICKS=$((after - before))
	PG_TICKS=$(pg_cpu_ticks_since "$out.pgcpu")
	# The server backends the proxy holds for DB's shards after the run.
	local dbs
	case $db in pass) dbs="'pass'" ;; routed) dbs="'s2_0', 's2_1'" ;; fan) dbs="'s4_0', 's4_1', 's4_2', 's4_3'" ;; *) dbs="'$db'" ;; esac
	BACKENDS=$(psql_direct -d postgres -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND datname IN ($dbs)")
	SYSCALLS=- CSWITCHES=-
	if [ -n "$perf" ]; then
		kill -INT "$perf" 2>/dev/null || true
		wait "$perf" 2>/dev/null || true
		SYSCALLS=$(awk -F, '$3 == "raw_syscalls:sys_enter" {print $1}' "$out.perf")
		CSWITCHES=$(awk -F, '$3 == "context-switches" {print $1}' "$out.perf")
	fi
	failed=$(awk -F'[:(]' '/number of failed transactions/ {gsub(/ /,"",$2); print $2}' "$out")
	TXNS=$(awk -F: '/number of transactions actually processed/ {split($2,a,"/"); gsub(/ /,"",a[1]); print a[1]}' "$out")
	TPS=$(awk '/^tps = / {print $3}' "$out")
	if [ "$rc" -ne 0 ] || [ "${failed:-x}" != 0 ] || [ -z "$TXNS" ] || [ "$TXNS" -eq 0 ] || [ -z "$TPS" ] ||
		grep -qiE 'aborted|error' "$out"; then
		echo "----- pgbench output ($db -M $mode -c $clients $(basename "$script"), exit $rc) -----" >&2
		cat "$out" >&2
		echo "-----" >&2
		tail -20 "$BENCH_TMP/shardgate.log" >&2
		die "pgbench through shardgate to $db failed (-M $mode -c $clients: exit $rc, failed transactions ${failed:-unknown})"
	fi
	proxy_alive
}

per_txn() { case $1 in '' | - | *[!0-9]*) echo - ;; *) awk -v c="$1" -v n="$2" 'BEGIN { printf "%.2f", c / n }' ;; esac; }
us_per_txn() { awk -v t="$1" -v n="$2" -v hz="$TICK" 'BEGIN { printf "%.1f", t / hz / n * 1e6 }'; }
median() { sort -g | awk '{v[NR] = $1} END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
kib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; } # KiB → MiB
norm() { tr '[:upper:]' '[:lower:]' | tr -d '_.-'; } # en_US.UTF-8 and en_US.utf8 → enusutf8
status_kb() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status"; }

# scan DB ORDERED: reads every row of big through the proxy with psql and
# records the proxy's RSS before and its peak during the scan (VmHWM, reset
# first). Checks the rows: count, sum of ids, and order when ORDERED.
scan() {
	local db=$1 ordered=$2 q="SELECT * FROM big" check t0 t1 rss0 hwm
	[ "$ordered" = 1 ] && q="$q ORDER BY id"
	proxy_alive
	rss0=$(status_kb "$PID_SHARDGATE" VmRSS)
	echo 5 >"/proc/$PID_SHARDGATE/clear_refs" || die "cannot reset the peak RSS of pid $PID_SHARDGATE (/proc/PID/clear_refs)"
	t0=$(date +%s.%N)
	check=$(psql_proxy -d "$db" -At -c "$q" | awk -F'|' -v ordered="$ordered" '
		{ n++; s += $1; if (ordered && n > 1 && $1 <= prev) bad++; prev = $1 }
		END { printf "%d %.0f %d", n, s, bad }') || die "psql $q through $db failed"
	t1=$(date +%s.%N)
	hwm=$(status_kb "$PID_SHARDGATE" VmHWM)
	local want
	want="$BENCH_BIG_ROWS $(awk -v n="$BENCH_BIG_ROWS" 'BEGIN { printf "%.0f", n * (n + 1) / 2 }') 0"
	[ "$check" = "$want" ] || die "$q through $db: rows, id sum, out of order = $check; want $want"
	proxy_alive
	SCAN_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	SCAN_RSS0=$rss0
	SCAN_HWM=$hwm
}

# restart_shardgate stops the proxy, keeps its log in shardgate-all.log and
# starts a fresh one.
restart_shardgate() {
	stop_pid "$PID_SHARDGATE"
	cat "$BENCH_TMP/shardgate.log" >>"$BENCH_TMP/shardgate-all.log"
	start_shardgate_sharded
}

# merge_statements prints part 3's merging statements, one a line:
# COLLATIONS|ORDERED|WANT|SQL. COLLATIONS: "c" runs it through pass and fan,
# "libc" through pass_en and fan_en as well (the ones that compare text).
# ORDERED is 1 when the statement fixes the order of its rows (else both
# answers are sorted before they are compared); WANT, when set, is the only
# right answer.
merge_statements() {
	local tags=$((BENCH_BIG_ROWS < BENCH_BIG_TAGS ? BENCH_BIG_ROWS : BENCH_BIG_TAGS))
	cat <<EOF
c libc|1|$BENCH_BIG_ROWS|SELECT count(DISTINCT payload) FROM big
c libc|1|$tags|SELECT count(DISTINCT tag) FROM big
c libc|0||SELECT id % 1000 AS g, count(DISTINCT payload) FROM big GROUP BY 1
c libc|0||SELECT id % 1000 AS g, count(DISTINCT tag) FROM big GROUP BY 1
c|1||SELECT string_agg(payload, ',' ORDER BY id) FROM big WHERE id <= 200000
c|0||SELECT id % 100000 AS g, string_agg(payload, ',' ORDER BY id) FROM big GROUP BY 1
c libc|1||SELECT payload FROM big ORDER BY payload
EOF
}

# run_merge DB SQL ORDERED: on a freshly started proxy (an earlier
# statement's heap, kept by the Go runtime, would otherwise absorb this
# one's), after one warm-up query through DB, psql writes SQL's answer
# through DB to a file. Sets M_SECS (wall), M_CPU (the proxy's CPU seconds),
# M_RSS0, M_HWM, M_ROWS, M_BYTES and M_MD5 (of the answer, sorted unless
# ORDERED), or M_REFUSED when the proxy answers 0A000. Any other error is
# fatal, and so is any error through a pass-through database.
run_merge() {
	local db=$1 q=$2 ordered=$3 out=$BENCH_TMP/merge.out err=$BENCH_TMP/merge.err t0 t1 c0 c1 rc=0
	restart_shardgate
	psql_proxy -d "$db" -At -c "SELECT count(*) FROM big" >/dev/null || die "SELECT count(*) FROM big through $db failed"
	M_RSS0=$(status_kb "$PID_SHARDGATE" VmRSS)
	echo 5 >"/proc/$PID_SHARDGATE/clear_refs" || die "cannot reset the peak RSS of pid $PID_SHARDGATE (/proc/PID/clear_refs)"
	c0=$(proc_cpu_ticks "$PID_SHARDGATE")
	t0=$(date +%s.%N)
	psql_proxy -d "$db" -At -v VERBOSITY=verbose -c "$q" >"$out" 2>"$err" || rc=$?
	t1=$(date +%s.%N)
	c1=$(proc_cpu_ticks "$PID_SHARDGATE")
	M_HWM=$(status_kb "$PID_SHARDGATE" VmHWM)
	proxy_alive
	M_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	M_CPU=$(awk -v t=$((c1 - c0)) -v hz="$TICK" 'BEGIN { printf "%.1f", t / hz }')
	M_REFUSED="" M_ROWS=- M_BYTES=- M_MD5=-
	if [ "$rc" -ne 0 ]; then
		if [[ $db == fan* ]] && grep -q '^ERROR:  0A000:' "$err"; then
			M_REFUSED=$(tr '\n\t' '  ' <"$err" | sed 's/  */ /g; s/ $//')
			return 0
		fi
		cat "$err" >&2
		die "$q through $db failed (psql exit $rc)"
	fi
	[ -s "$err" ] && { cat "$err" >&2; die "$q through $db: psql wrote to stderr"; }
	M_ROWS=$(wc -l <"$out")
	M_BYTES=$(stat -c %s "$out")
	if [ "$ordered" = 1 ]; then
		M_MD5=$(md5sum <"$out" | cut -c1-32)
	else
		M_MD5=$(LC_ALL=C sort "$out" | md5sum | cut -c1-32)
	fi
}

# merges runs every merging statement through its pass-through and its
# 4-shard database, checks that the answers are equal (and right, where the
# right answer is known), and writes a line per run to MERGES.
merges() {
	local colls ordered want q coll pass fan db pass_md5
	while IFS='|' read -r colls ordered want q <&3; do
		for coll in $colls; do
			case $coll in
			c) pass=pass fan=fan ;;
			libc) [ -n "$BENCH_LIBC_LOCALE" ] || continue; pass=pass_en fan=fan_en ;;
			esac
			for db in $pass $fan; do
				run_merge "$db" "$q" "$ordered"
				if [ -n "$M_REFUSED" ]; then
					log "$q via $db: refused: $M_REFUSED"
				else
					log "$q via $db: ${M_SECS}s, $M_ROWS row(s), RSS before $(kib "$M_RSS0") MiB, peak $(kib "$M_HWM") MiB"
				fi
				if [ "$db" = "$pass" ]; then
					pass_md5=$M_MD5
					if [ -n "$want" ] && [ "$(cat "$BENCH_TMP/merge.out")" != "$want" ]; then
						die "$q through $db answered $(head -c 100 "$BENCH_TMP/merge.out"), want $want"
					fi
				elif [ -z "$M_REFUSED" ] && [ "$M_MD5" != "$pass_md5" ]; then
					head -c 300 "$BENCH_TMP/merge.out" >&2
					die "$q through $db answers differently from $pass (md5 $M_MD5, $M_ROWS rows; $pass: $pass_md5)"
				fi
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$q" "$coll" "$db" "$M_SECS" "$M_CPU" "$M_RSS0" "$M_HWM" \
					"$M_ROWS" "$M_BYTES" "$M_MD5" "$(cut -d' ' -f1 /proc/loadavg)" "$M_REFUSED" >>"$MERGES"
			done
		done
	done 3< <(merge_statements)
}

# ---------------------------------------------------------------------------

[ "$(id -u)" -eq 0 ] && ! id postgres >/dev/null 2>&1 && die "running as root needs a 'postgres' OS user (apt-get install -y postgresql creates it)"
find_pg_bin
PGBENCH=${PGBENCH:-$PG_BIN/pgbench}
[ -x "$PGBENCH" ] || PGBENCH=$(command -v pgbench) || die "pgbench not found"
[ -n "${SHARDGATE_BIN:-}" ] || command -v go >/dev/null || die "go not found"
if [ -n "$BENCH_LIBC_LOCALE" ]; then
	locale -a | norm | grep -qx "$(norm <<<"$BENCH_LIBC_LOCALE")" ||
		die "locale $BENCH_LIBC_LOCALE is not installed (locale -a); set BENCH_LIBC_LOCALE to one that is, or to empty to measure the C collation only"
fi
BENCH_TMP=$(mktemp -d /tmp/shardgate-bench.XXXXXX)
chmod 755 "$BENCH_TMP"
chown postgres: "$BENCH_TMP" 2>/dev/null || true
cd "$BENCH_TMP" || die "cannot enter $BENCH_TMP"

start_pg_sharded
load_all
start_shardgate_sharded
RSS_IDLE=$(status_kb "$PID_SHARDGATE" VmRSS)
check_answers

printf '\\set aid random(1, %d)\nSELECT balance FROM accounts WHERE id = :aid;\n' "$BENCH_ROWS" >"$BENCH_TMP/keyed.sql"
printf 'SELECT id, balance FROM accounts ORDER BY balance DESC, id LIMIT 100;\n' >"$BENCH_TMP/topn.sql"

log "warm-up"
for m in $BENCH_MODES; do
	for db in pass routed; do sg_pgbench "$db" "$m" "$BENCH_CLIENTS" "$BENCH_TMP/keyed.sql" "$BENCH_TMP/warmup-$db-$m.log" 3; done
done
for m in $BENCH_FANOUT_MODES; do
	for db in pass fan; do sg_pgbench "$db" "$m" "$BENCH_FANOUT_CLIENTS" "$BENCH_TMP/topn.sql" "$BENCH_TMP/warmup-topn-$db-$m.log" 3; done
done

RAW=${BENCH_OUT%.md}.tsv
RAW_TMP=$BENCH_TMP/raw.tsv
printf 'round\tpart\tmode\tclients\tdb\ttps\ttxns\tcpu_ticks\tus_cpu_per_txn\tload1\tsyscalls_per_txn\tcswitches_per_txn\tpg_us_cpu_per_txn\tbackends\n' >"$RAW_TMP"
# record ROUND PART MODE CLIENTS DB LOAD1 adds the sg_pgbench run just made
# to $RAW_TMP, in the columns above.
record() {
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$TPS" "$TXNS" "$CPU_TICKS" \
		"$(us_per_txn "$CPU_TICKS" "$TXNS")" "$6" "$(per_txn "$SYSCALLS" "$TXNS")" "$(per_txn "$CSWITCHES" "$TXNS")" \
		"$(us_per_txn "$PG_TICKS" "$TXNS")" "$BACKENDS" >>"$RAW_TMP"
}
for r in $(seq "$BENCH_REPEAT"); do
	# Alternate which database goes first, so that a trend in the machine's
	# load does not favour one side.
	if [ $((r % 2)) -eq 1 ]; then pair="pass routed" fanpair="pass fan"; else pair="routed pass" fanpair="fan pass"; fi
	for m in $BENCH_MODES; do
		for db in $pair; do
			load1=$(cut -d' ' -f1 /proc/loadavg)
			log "round $r/$BENCH_REPEAT: keyed -M $m -c $BENCH_CLIENTS → $db (load $load1)"
			sg_pgbench "$db" "$m" "$BENCH_CLIENTS" "$BENCH_TMP/keyed.sql" "$BENCH_TMP/run-$r-keyed-$m-$db.log"
			record "$r" keyed "$m" "$BENCH_CLIENTS" "$db" "$load1"
		done
	done
	for m in $BENCH_FANOUT_MODES; do
		for db in $fanpair; do
			load1=$(cut -d' ' -f1 /proc/loadavg)
			log "round $r/$BENCH_REPEAT: top-100 -M $m -c $BENCH_FANOUT_CLIENTS → $db (load $load1)"
			sg_pgbench "$db" "$m" "$BENCH_FANOUT_CLIENTS" "$BENCH_TMP/topn.sql" "$BENCH_TMP/run-$r-topn-$m-$db.log"
			record "$r" topn "$m" "$BENCH_FANOUT_CLIENTS" "$db" "$load1"
		done
	done
done

# The scans get a freshly started proxy, so that memory left over from the
# pgbench runs (connections, buffers of 16 clients) does not hide theirs.
log "restarting shardgate for the scans of $BENCH_BIG_ROWS rows"
RSS_AFTER_PGBENCH=$(status_kb "$PID_SHARDGATE" VmRSS)
HWM_AFTER_PGBENCH=$(status_kb "$PID_SHARDGATE" VmHWM)
stop_pid "$PID_SHARDGATE"
cp "$BENCH_TMP/shardgate.log" "$BENCH_TMP/shardgate-all.log"
start_shardgate_sharded
for db in pass fan; do psql_proxy -d "$db" -At -c "SELECT count(*) FROM big" >/dev/null || die "SELECT count(*) FROM big through $db failed"; done
RSS_BEFORE_SCANS=$(status_kb "$PID_SHARDGATE" VmRSS)
SCANS=$BENCH_TMP/scans.tsv
: >"$SCANS"
for ordered in 0 1; do
	for db in pass fan; do
		load1=$(cut -d' ' -f1 /proc/loadavg)
		scan "$db" "$ordered"
		q="SELECT * FROM big"
		[ "$ordered" = 1 ] && q="$q ORDER BY id"
		log "$q via $db: ${SCAN_SECS}s, RSS before $(kib "$SCAN_RSS0") MiB, peak $(kib "$SCAN_HWM") MiB"
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$q" "$db" "$SCAN_SECS" "$SCAN_RSS0" "$SCAN_HWM" "$load1" >>"$SCANS"
	done
done
RSS_END=$(status_kb "$PID_SHARDGATE" VmRSS)
MERGES=$BENCH_TMP/merges.tsv
printf 'statement\tcollation\tdb\tseconds\tproxy_cpu_seconds\trss_before_kb\tpeak_rss_kb\trows\tbytes\tmd5\tload1\trefused\n' >"$MERGES"
merges
# The proxy logs at warn level; a panic is fatal, anything else is reported.
cat "$BENCH_TMP/shardgate.log" >>"$BENCH_TMP/shardgate-all.log"
grep -q 'panic' "$BENCH_TMP/shardgate-all.log" && { cat "$BENCH_TMP/shardgate-all.log" >&2; die "shardgate panicked"; }
LOG_LINES=$(grep -c . "$BENCH_TMP/shardgate-all.log" || true)
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report ------------------------------------------------------------------

cell() { # cell PART MODE DB FIELD → median over rounds
	awk -F'\t' -v p="$1" -v m="$2" -v d="$3" -v f="$4" '
		NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
		$2 == p && $3 == m && $5 == d { print $col[f] }' "$RAW_TMP" | median
}
ratios() { # ratios PART MODE A B → the per-round ratios A/B, comma-separated
	awk -F'\t' -v p="$1" -v m="$2" -v a="$3" -v b="$4" '
		NR > 1 && $2 == p && $3 == m { t[$1, $5] = $6; if ($1 > n) n = $1 }
		END { for (i = 1; i <= n; i++) s = s (i > 1 ? ", " : "") sprintf("%.2f", t[i, a] / t[i, b]); print s }' "$RAW_TMP"
}
loads() { # loads PART MODE → min–max load1 of its runs
	awk -F'\t' -v p="$1" -v m="$2" 'NR > 1 && $2 == p && $3 == m { if (min == "" || $10 < min) min = $10; if ($10 > max) max = $10 }
		END { print min "–" max }' "$RAW_TMP"
}

GO_VERSION=$(go env GOVERSION 2>/dev/null || echo unknown)
{
	echo "# shardgate sharding benchmark"
	echo
	echo "Generated by \`bench/sharding.sh\` at $STARTED. PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), pgbench $("$PGBENCH" --version | awk '{print $3}'), shardgate $SHARDGATE_VERSION ($GO_VERSION), GOMAXPROCS ${GOMAXPROCS:-default}, $(nproc) CPUs."
	echo "Every shard is a database on one PostgreSQL server. accounts: $BENCH_ROWS rows; big: $BENCH_BIG_ROWS rows; pool $BENCH_POOL_SIZE per shard ($BENCH_ROUTED_POOL_SIZE per shard of \`routed\`), transaction mode."
	echo "${BENCH_SECONDS}-second pgbench runs, $BENCH_REPEAT round(s); each cell is the median of the rounds. Load average (1/5/15 min): $LOAD_START at the start, $LOAD_END at the end."
	echo "The proxy (log level ${BENCH_SHARDGATE_LOG_LEVEL:-warn}) logged $LOG_LINES line(s)."
	echo
	echo "## Routed (2 shards) vs pass-through (1 shard): \`SELECT balance FROM accounts WHERE id = :aid\`, $BENCH_CLIENTS clients"
	echo
	echo "| mode | pass tps | routed tps | **routed/pass** | routed/pass by round | pass µs CPU/txn | routed µs CPU/txn | syscalls/txn pass / routed | context switches/txn pass / routed | PostgreSQL µs CPU/txn pass / routed | server backends pass / routed | load1 |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for m in $BENCH_MODES; do
		rs=$(ratios keyed "$m" routed pass)
		echo "| $m | $(printf %.0f "$(cell keyed "$m" pass tps)") | $(printf %.0f "$(cell keyed "$m" routed tps)") | **$(tr ',' '\n' <<<"$rs" | median)** | $rs | $(cell keyed "$m" pass us_cpu_per_txn) | $(cell keyed "$m" routed us_cpu_per_txn) | $(cell keyed "$m" pass syscalls_per_txn) / $(cell keyed "$m" routed syscalls_per_txn) | $(cell keyed "$m" pass cswitches_per_txn) / $(cell keyed "$m" routed cswitches_per_txn) | $(cell keyed "$m" pass pg_us_cpu_per_txn) / $(cell keyed "$m" routed pg_us_cpu_per_txn) | $(cell keyed "$m" pass backends) / $(cell keyed "$m" routed backends) | $(loads keyed "$m") |"
	done
	echo
	echo "tps and µs columns: medians over the rounds. routed/pass: the median of the rounds' ratios (each round runs both back to back). PostgreSQL's CPU is that of the postmaster and all its processes (every shard's database is on that one server); server backends: the proxy's connections to the database's shards after the run."
	echo
	echo "## Fan-out: \`SELECT id, balance FROM accounts ORDER BY balance DESC, id LIMIT 100\`, $BENCH_FANOUT_CLIENTS clients"
	echo
	echo "| mode | 4 shards tps | 1 shard (pass-through) tps | 4/1 | 4/1 by round | 4 shards µs CPU/txn | pass µs CPU/txn | load1 |"
	echo "|---|---|---|---|---|---|---|---|"
	for m in $BENCH_FANOUT_MODES; do
		rs=$(ratios topn "$m" fan pass)
		echo "| $m | $(printf %.0f "$(cell topn "$m" fan tps)") | $(printf %.0f "$(cell topn "$m" pass tps)") | $(tr ',' '\n' <<<"$rs" | median) | $rs | $(cell topn "$m" fan us_cpu_per_txn) | $(cell topn "$m" pass us_cpu_per_txn) | $(loads topn "$m") |"
	done
	echo
	echo "## Proxy memory while psql reads $BENCH_BIG_ROWS rows"
	echo
	echo "The proxy's RSS: $(kib "$RSS_IDLE") MiB idle after start; $(kib "$RSS_AFTER_PGBENCH") MiB after the pgbench runs above (peak $(kib "$HWM_AFTER_PGBENCH") MiB)."
	echo "For the scans it was restarted: $(kib "$RSS_BEFORE_SCANS") MiB after one \`SELECT count(*) FROM big\` through each database, $(kib "$RSS_END") MiB after the scans."
	echo "Before each scan the peak (VmHWM) is reset by writing 5 to /proc/PID/clear_refs. psql reads the whole result (\`psql -At -c …\`), and awk checks the row count, the sum of the ids and, when ordered, that ids increase."
	echo
	echo "| query | through | seconds | RSS before (MiB) | peak RSS during (MiB) | peak − before (MiB) | load1 |"
	echo "|---|---|---|---|---|---|---|"
	while IFS=$'\t' read -r q db secs rss0 hwm l; do
		via="1 shard (pass)"
		[ "$db" = fan ] && via="4 shards (fan)"
		echo "| \`$q\` | $via | $secs | $(kib "$rss0") | $(kib "$hwm") | $(kib $((hwm - rss0))) | $l |"
	done <"$SCANS"
	echo
	echo "## Proxy memory while it merges: DISTINCT aggregates, string_agg, ORDER BY text"
	echo
	echo "Collations (\`SHOW lc_collate\` in each database): pass, fan: $COLLATE_C; pass_en, fan_en: ${COLLATE_LIBC:-not measured (BENCH_LIBC_LOCALE empty)}."
	echo "big.payload is unique; big.tag has $BENCH_BIG_TAGS values (md5 of id % $BENCH_BIG_TAGS), each on several shards."
	echo "Each statement runs on a freshly started proxy, after one \`SELECT count(*) FROM big\` through the same database; the peak is reset as above, and psql writes the answer to a file."
	echo "The 4-shard answer's md5 (over sorted lines when the statement leaves the order open) must equal the pass-through answer's, and counts must be the known ones."
	echo
	echo "| statement | collation | through | seconds | proxy CPU s | answer rows | answer MiB | RSS before (MiB) | peak RSS during (MiB) | peak − before (MiB) | load1 |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	while IFS=$'\t' read -r q coll db secs cpu rss0 hwm rows bytes _ l refused; do
		via="1 shard ($db)"
		[[ $db == fan* ]] && via="4 shards ($db)"
		if [ -n "$refused" ]; then
			echo "| \`$q\` | $coll | $via | **refused**: $refused | | | | | | | $l |"
		else
			echo "| \`$q\` | $coll | $via | $secs | $cpu | $rows | $(kib $((bytes / 1024))) | $(kib "$rss0") | $(kib "$hwm") | $(kib $((hwm - rss0))) | $l |"
		fi
	done < <(tail -n +2 "$MERGES")
	if [ "$LOG_LINES" -gt 0 ]; then
		echo
		echo "The proxy's log (first 20 lines):"
		echo
		echo '```'
		head -20 "$BENCH_TMP/shardgate-all.log"
		echo '```'
	fi
} >"$BENCH_TMP/report.md"

mkdir -p "$(dirname "$BENCH_OUT")"
cp "$BENCH_TMP/report.md" "$BENCH_OUT"
cp "$RAW_TMP" "$RAW"
cp "$MERGES" "${BENCH_OUT%.md}.memory.tsv"
echo
cat "$BENCH_TMP/report.md"
echo
log "wrote $BENCH_OUT, $RAW and ${BENCH_OUT%.md}.memory.tsv"
