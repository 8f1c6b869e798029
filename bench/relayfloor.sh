#!/usr/bin/env bash
# bench/relayfloor.sh — the floor of a Go relay against PgBouncer and
# shardgate (issue 13's design step).
#
# Starts a throwaway PostgreSQL, PgBouncer and shardgate (bench/lib.sh, both
# in transaction mode) and two relays of bench/relayfloor — `goroutine` (two
# goroutines per connection on Go's netpoller) and `epoll` (event loops on
# locked OS threads over raw descriptors; `floor-epoll1` is one loop, as
# PgBouncer runs one thread; `floor-coro1`, blocking-style code run as
# coroutines on one such loop) — which pass bytes between each
# client and a server connection of its own. pgbench runs through all of them
# in turn per cell (interleaved rounds), and the table gives TPS and the
# relay process's CPU per transaction (utime+stime from /proc/PID/stat).
#
# Environment: RELAYFLOOR_SECONDS (default 8), RELAYFLOOR_ROUNDS (2),
# RELAYFLOOR_CLIENTS ("16 64"), RELAYFLOOR_WORKLOADS ("select1 select-only"),
# RELAYFLOOR_MODES ("simple"), RELAYFLOOR_LOOPS (epoll loops; default
# GOMAXPROCS), RELAYFLOOR_OUT (default bench/results/relayfloor.md).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

SECS=${RELAYFLOOR_SECONDS:-8}
ROUNDS=${RELAYFLOOR_ROUNDS:-2}
CLIENTS=${RELAYFLOOR_CLIENTS:-16 64}
WORKLOADS=${RELAYFLOOR_WORKLOADS:-select1 select-only}
MODES=${RELAYFLOOR_MODES:-simple}
OUT=${RELAYFLOOR_OUT:-$REPO_DIR/bench/results/relayfloor.md}
TICK=$(getconf CLK_TCK)

bench_setup

start_floor floor-goroutine goroutine
start_floor floor-epoll epoll "${RELAYFLOOR_LOOPS:-}"
start_floor floor-epoll1 epoll 1
start_floor floor-coro1 coro 1

TARGETS="pgbouncer shardgate floor-goroutine floor-epoll floor-epoll1 floor-coro1"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
rows=()
for c in $CLIENTS; do
	for w in $WORKLOADS; do
		for m in $MODES; do
			for r in $(seq "$ROUNDS"); do
				for t in $TARGETS; do
					run_pgbench "$t" "$w" "$m" "$c" "$SECS" "$BENCH_TMP/pgbench.out"
					us=$(awk -v t="$CPU_TICKS" -v n="$TXNS" -v hz="$TICK" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
					load1=$(cut -d' ' -f1 /proc/loadavg)
					log "$w -M $m -c $c round $r: $t $TPS tps, $us µs CPU/txn (load $load1)"
					rows+=("| $w | $m | $c | $r | $t | ${TPS%.*} | $us | $load1 |")
				done
			done
		done
	done
done
{
	echo "# relayfloor: $(date -u +%Y-%m-%dT%H:%MZ), $(git -C "$REPO_DIR" describe --always --dirty), $(nproc) CPUs, load $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
	echo
	echo "pgbench ${SECS}s per run, rounds interleaved per cell; CPU is the relay process's utime+stime per transaction."
	echo
	echo "| workload | mode | clients | round | relay | tps | CPU µs/txn | load1 |"
	echo "|---|---|---|---|---|---|---|---|"
	printf '%s\n' "${rows[@]}"
} >"$OUT"
cat "$OUT"
