#!/usr/bin/env bash
# bench/pgo.sh — the CPU profile that shardgate is built with
# (cmd/proxy/default.pgo: go build uses it by itself, -pgo=auto).
#
# Same throwaway PostgreSQL and shardgate as bench/run.sh. shardgate runs
# with -cpuprofile while pgbench drives the pass-through's workloads one
# after another (SELECT 1, -S and tpcb, each in the simple, extended and
# prepared protocols, PGO_CLIENTS clients, PGO_SECONDS each); then it is
# stopped and its profile copied to PGO_OUT.
#
# The profile is an input of the build, not a result: take it again when the
# hot path changed much (the compiler ignores what no longer matches), and
# compare the builds with and without it in one run of bench/profile.sh
# (PROFILE_BASE_REF) before committing it (docs/benchmarks.md).
#
# Environment: PGO_SECONDS (10), PGO_CLIENTS (16), PGO_OUT
# (cmd/proxy/default.pgo), plus BENCH_POOL_SIZE and BENCH_SCALE as in
# run.sh.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

PGO_SECONDS=${PGO_SECONDS:-10}
PGO_CLIENTS=${PGO_CLIENTS:-16}
PGO_OUT=${PGO_OUT:-$REPO_DIR/cmd/proxy/default.pgo}
case $PGO_OUT in /*) ;; *) PGO_OUT=$PWD/$PGO_OUT ;; esac
BENCH_LATENCY_SAMPLE=0
export BENCH_SHARDGATE_CPUPROFILE=1

bench_setup
for workload in select1 select-only tpcb; do
	for mode in simple extended prepared; do
		log "profiling: $workload -M $mode, $PGO_CLIENTS clients, $PGO_SECONDS s"
		run_pgbench shardgate "$workload" "$mode" "$PGO_CLIENTS" "$PGO_SECONDS" "$BENCH_TMP/pgbench-$workload-$mode.out"
		log "  $TPS tps"
	done
done
stop_pid "$PID_SHARDGATE"
PID_SHARDGATE=""
[ -s "$BENCH_TMP/shardgate.pprof" ] || die "shardgate wrote no profile (see $BENCH_TMP/shardgate.log)"
cp "$BENCH_TMP/shardgate.pprof" "$PGO_OUT"
log "wrote $PGO_OUT ($(stat -c %s "$PGO_OUT") bytes)"
