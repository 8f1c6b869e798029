#!/usr/bin/env bash
# bench/run.sh — pgbench against PostgreSQL directly, PgBouncer and shardgate.
#
# Starts a throwaway PostgreSQL (fsync=off), PgBouncer (installed with apt if
# missing) and shardgate (built from this tree), all on loopback, both proxies
# in transaction mode with the same pool size. For every workload × protocol
# mode × client count it runs pgbench against direct, pgbouncer and shardgate
# back to back (interleaved, so machine noise hits all three alike), and
# records TPS and the proxy process's CPU time (utime+stime from
# /proc/PID/stat) per transaction, and the 99th percentile of the transaction
# latencies (pgbench --log, a sample: BENCH_LATENCY_SAMPLE in lib.sh). Prints a
# table and writes it as Markdown.
#
# Environment:
#   BENCH_SECONDS    seconds per pgbench run (default 10)
#   BENCH_REPEAT     rounds over the whole matrix (default 1); each cell of
#                    the table is then the median of its rounds
#   BENCH_CLIENTS    client counts (default "1 16 64"); -j is min(2, clients)
#   BENCH_MODES      pgbench -M modes (default "simple extended prepared")
#   BENCH_WORKLOADS  select1 (custom script `SELECT 1;`), select-only
#                    (pgbench -S), tpcb (pgbench's default transaction),
#                    rows100 (100 rows of pgbench_accounts, ~100 bytes
#                    each); default "select1 select-only"
#   BENCH_POOL_SIZE  server pool size of both proxies (default 20)
#   BENCH_SCALE      pgbench -i scale (default 10)
#   BENCH_OUT        Markdown output (default bench/results/latest.md)
#   BENCH_TLS        legs over TLS: clients, servers or both (default none; lib.sh)
#   BENCH_PIN        "PG:PROXY" taskset CPU lists: PostgreSQL and pgbench on PG,
#                    the proxies on PROXY (default: no pinning; lib.sh)
#   GOMAXPROCS       passed to shardgate as usual
#   SHARDGATE_BIN    use this proxy binary instead of building ./cmd/proxy
#                    (SHARDGATE_VERSION labels it in the results)
#   BENCH_KEEP_ON_FAILURE=1  keep the temp dir (logs) when something fails
#
# PgBouncer before 1.21 cannot serve protocol-level prepared statements in
# transaction mode: a statement is missing on the next server, or a new client
# finds its "P_0" already there from an earlier client ("prepared statement
# already exists"), even with one client. Its `-M prepared` runs are skipped
# and shown as n/a. Every other pgbench error, failed transaction or aborted
# client stops the script with a non-zero exit.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_REPEAT=${BENCH_REPEAT:-1}
BENCH_CLIENTS=${BENCH_CLIENTS:-1 16 64}
BENCH_MODES=${BENCH_MODES:-simple extended prepared}
BENCH_WORKLOADS=${BENCH_WORKLOADS:-select1 select-only}
BENCH_OUT=${BENCH_OUT:-$BENCH_DIR/results/latest.md}
case $BENCH_OUT in /*) ;; *) BENCH_OUT=$PWD/$BENCH_OUT ;; esac

TICK=$(getconf CLK_TCK)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)

bench_setup

# Warm up: server connections of both pools, caches, the Go runtime.
log "warm-up"
for t in direct pgbouncer shardgate; do
	run_pgbench "$t" select-only simple 16 3 "$BENCH_TMP/warmup-$t.log"
done

RAW=$BENCH_TMP/raw.tsv
: >"$RAW"
n_total=0
for w in $BENCH_WORKLOADS; do for m in $BENCH_MODES; do for c in $BENCH_CLIENTS; do n_total=$((n_total + BENCH_REPEAT)); done; done; done
n=0
for r in $(seq "$BENCH_REPEAT"); do
	for w in $BENCH_WORKLOADS; do
		for m in $BENCH_MODES; do
			for c in $BENCH_CLIENTS; do
				n=$((n + 1))
				load1=$(cut -d' ' -f1 /proc/loadavg)
				line="$w	$m	$c	$load1"
				for t in direct pgbouncer shardgate; do
					if [ "$t" = pgbouncer ] && [ "$m" = prepared ] && ! pgbouncer_prepared_ok; then
						line="$line	n/a	-	-"
						continue
					fi
					run_pgbench "$t" "$w" "$m" "$c" "$BENCH_SECONDS" "$BENCH_TMP/run-$w-$m-$c-$t-$r.log"
					if [ -n "$CPU_TICKS" ]; then
						cpu_us=$(awk -v t="$CPU_TICKS" -v hz="$TICK" -v n="$TXNS" 'BEGIN{printf "%.1f", t / hz * 1e6 / n}')
					else
						cpu_us=-
					fi
					line="$line	$TPS	$cpu_us	$P99_MS"
				done
				echo "$line" >>"$RAW"
				IFS=$'\t' read -r _ _ _ _ td _ pd tb cb pb ts cs ps <<<"$line"
				log "[$n/$n_total] $w -M $m -c $c: direct $td (p99 $pd ms), pgbouncer $tb (${cb} µs/txn, p99 $pb ms), shardgate $ts (${cs} µs/txn, p99 $ps ms) tps"
			done
		done
	done
done

# With BENCH_REPEAT > 1, each cell is the median of its rounds (per column;
# n/a and - stay as they are). Rows keep the order of the first round.
MEDIAN=$BENCH_TMP/median.tsv
awk -F'\t' -v OFS='\t' '
	function median(key, col,   n, i, j, v, a, t) {
		n = split(vals[key, col], a, " ")
		for (i = 2; i <= n; i++) { v = a[i] + 0; t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = t }
		if (n == 0) return "-"
		if (n % 2) return a[(n + 1) / 2]
		return sprintf("%.1f", (a[n / 2] + a[n / 2 + 1]) / 2)
	}
	{
		key = $1 OFS $2 OFS $3
		if (!(key in seen)) { seen[key] = 1; order[++nk] = key }
		for (col = 4; col <= 13; col++) {
			if ($col ~ /^[0-9.]+$/) vals[key, col] = vals[key, col] " " $col
			else other[key, col] = $col
		}
	}
	END {
		for (k = 1; k <= nk; k++) {
			key = order[k]; line = key
			for (col = 4; col <= 13; col++) line = line OFS (((key, col) in vals) ? median(key, col) : other[key, col])
			print line
		}
	}' "$RAW" >"$MEDIAN"
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# ratio A B prints A/B with two decimals, or n/a.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (a+0 > 0 && b+0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
int() { awk -v a="$1" 'BEGIN{ if (a ~ /^[0-9.]+$/) printf "%.0f", a; else print a }'; }

HEADER="workload|mode|clients|direct tps|pgbouncer tps|shardgate tps|sg/pgb tps|sg/direct tps|pgb µs CPU/txn|sg µs CPU/txn|sg/pgb CPU|direct p99 ms|pgb p99 ms|sg p99 ms|sg/pgb p99|load1"
ROWS=$BENCH_TMP/rows.txt
: >"$ROWS"
while IFS=$'\t' read -r w m c load1 td _ pd tb cb pb ts cs ps; do
	echo "$w|$m|$c|$(int "$td")|$(int "$tb")|$(int "$ts")|$(ratio "$ts" "$tb")|$(ratio "$ts" "$td")|$cb|$cs|$(ratio "$cs" "$cb")|$pd|$pb|$ps|$(ratio "$ps" "$pb")|$load1" >>"$ROWS"
done <"$MEDIAN"

GO_VERSION=$( (go version 2>/dev/null || echo "? unknown-go") | awk '{print $3}')
CPU_MODEL=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
META="date: $STARTED; machine: $(nproc) CPUs ($CPU_MODEL), $(uname -sr); PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}'), PgBouncer $PGBOUNCER_VERSION, shardgate $SHARDGATE_VERSION ($GO_VERSION, GOMAXPROCS=${GOMAXPROCS:-default}); pool size $BENCH_POOL_SIZE (transaction mode) in both proxies; pgbench -T $BENCH_SECONDS × $BENCH_REPEAT round(s) (median), -j min(2,clients), scale $BENCH_SCALE, TCP on 127.0.0.1, TLS: ${BENCH_TLS:-none}, $(pin_desc); load average at start $LOAD_START, at end $LOAD_END"

echo
echo "$META" | fold -s -w 120
echo
{
	echo "$HEADER"
	cat "$ROWS"
} | column -t -s'|'

mkdir -p "$(dirname "$BENCH_OUT")"
{
	echo "# shardgate benchmark: latest run"
	echo
	echo "Generated by \`bench/run.sh\` (\`make bench\`). $META."
	echo
	echo "CPU columns: the proxy process's utime+stime during the run divided by the transactions pgbench processed."
	echo "\"sg/pgb\" is shardgate divided by PgBouncer (for TPS higher is better, for CPU lower is better)."
	echo "load1 is the 1-minute load average just before each triple of runs (median over rounds)."
	echo "p99 ms: the 99th percentile of the transaction latencies pgbench logged (a sample of BENCH_LATENCY_SAMPLE=$BENCH_LATENCY_SAMPLE of the transactions)."
	if ! pgbouncer_prepared_ok; then
		echo "PgBouncer $PGBOUNCER_VERSION cannot serve protocol-level prepared statements in transaction mode (1.21+ can): pgbench fails with \"prepared statement P_0 already exists\" or \"does not exist\" as clients move between server connections, so its \`-M prepared\` runs are n/a."
	fi
	echo
	echo "| ${HEADER//|/ | } |"
	sep=${HEADER//[^|]/}
	echo "|${sep//|/---|}---|"
	while read -r r; do echo "| ${r//|/ | } |"; done <"$ROWS"
} >"$BENCH_OUT"
# Every run, unaggregated, next to the Markdown.
{
	printf 'workload\tmode\tclients\tload1\tdirect_tps\tdirect_cpu_us\tdirect_p99_ms\tpgbouncer_tps\tpgbouncer_cpu_us\tpgbouncer_p99_ms\tshardgate_tps\tshardgate_cpu_us\tshardgate_p99_ms\n'
	cat "$RAW"
} >"${BENCH_OUT%.md}.tsv"
log "wrote $BENCH_OUT and ${BENCH_OUT%.md}.tsv"
