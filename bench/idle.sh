#!/usr/bin/env bash
# bench/idle.sh — what idle clients cost: memory per idle client, and the
# load figures while they sit there.
#
# Same throwaway PostgreSQL, PgBouncer and shardgate as bench/run.sh, plus a
# build of git revision IDLE_BASE_REF as target "base" (before/after in one
# run). For each target:
#   1. pgbench cells (select1 and -S, simple protocol, IDLE_PGBENCH_CLIENTS
#      clients) without idle clients: TPS and the proxy's CPU µs/txn;
#   2. IDLE_CLIENTS connections (bench/idle_clients.py: log in, SELECT 1,
#      then idle), opened to every target at once; after IDLE_SETTLE seconds
#      the proxy's RSS is read: (RSS with them - RSS before) / IDLE_CLIENTS;
#   3. the same pgbench cells again while the idle clients stay connected.
# Cells run interleaved (every target for one cell, then the next cell),
# IDLE_ROUNDS times. PostgreSQL's pool stays at BENCH_POOL_SIZE.
#
# Environment: IDLE_CLIENTS (10000), IDLE_BASE_REF (main; empty for no base
# target), IDLE_EVENT_LOOP (1 adds target evloop: this build with
# limits.event_loop on), IDLE_SECONDS (8), IDLE_SETTLE (20), IDLE_ROUNDS (2),
# IDLE_PGBENCH_CLIENTS (16), IDLE_OUT (bench/results/idle.md), plus
# BENCH_POOL_SIZE, BENCH_SCALE and BENCH_TLS as in run.sh (with TLS clients,
# the idle clients ask for TLS too).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

IDLE_CLIENTS=${IDLE_CLIENTS:-10000}
IDLE_BASE_REF=${IDLE_BASE_REF-main}
IDLE_SECONDS=${IDLE_SECONDS:-8}
IDLE_SETTLE=${IDLE_SETTLE:-20}
IDLE_ROUNDS=${IDLE_ROUNDS:-2}
IDLE_PGBENCH_CLIENTS=${IDLE_PGBENCH_CLIENTS:-16}
IDLE_OUT=${IDLE_OUT:-$BENCH_DIR/results/idle.md}
IDLE_EVENT_LOOP=${IDLE_EVENT_LOOP:-0}
case $IDLE_OUT in /*) ;; *) IDLE_OUT=$PWD/$IDLE_OUT ;; esac

# Every idle connection is a descriptor in the proxy and in the helper.
need_fds=$((IDLE_CLIENTS + 1000))
[ "$(ulimit -Hn)" -ge "$need_fds" ] || die "ulimit -Hn is $(ulimit -Hn); $need_fds descriptors needed"
ulimit -n "$need_fds"
export BENCH_PGBOUNCER_MAX_CLIENTS=$need_fds
export BENCH_SHARDGATE_LIMITS="{ max_client_conn: $need_fds }"
export BENCH_SHARDGATE_METRICS=1

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
bench_setup
TARGETS="pgbouncer shardgate"
BASE_DESC="not measured"
if [ -n "$IDLE_BASE_REF" ]; then
	build_ref "$IDLE_BASE_REF" "$BENCH_TMP/proxy-base"
	start_shardgate_variant base "$BENCH_TMP/proxy-base"
	BASE_DESC="$IDLE_BASE_REF ($(git -C "$REPO_DIR" rev-parse --short "$IDLE_BASE_REF"))"
	TARGETS="$TARGETS base"
fi
if [ "$IDLE_EVENT_LOOP" = 1 ]; then
	start_shardgate_variant evloop "$BENCH_TMP/proxy" "" "{ max_client_conn: $need_fds, event_loop: true }"
	TARGETS="$TARGETS evloop"
	if [ -n "$IDLE_BASE_REF" ]; then
		start_shardgate_variant base-evloop "$BENCH_TMP/proxy-base" "" "{ max_client_conn: $need_fds, event_loop: true }"
		TARGETS="$TARGETS base-evloop"
	fi
fi
CLK_TCK=$(getconf CLK_TCK)

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
# scrape TARGET: the /metrics text of a shardgate target, empty for
# PgBouncer; go_stats and go_more read one scrape, so that their figures
# come from the same moment.
scrape() {
	local port=${SG_METRICS[$1]:-}
	[ -z "$port" ] || curl -s "http://127.0.0.1:$port/metrics"
}

# go_stats METRICS: goroutines, heap in use, heap free but not returned to
# the OS (idle - released: resident, counted in RSS) and stacks in use (kB)
# from a scrape; "-" for PgBouncer (no scrape).
go_stats() {
	[ -n "$1" ] || { echo "- | - | - | -"; return; }
	awk '
		$1 == "go_goroutines" { g = $2 }
		$1 == "go_memstats_heap_inuse_bytes" { h = $2 }
		$1 == "go_memstats_heap_idle_bytes" { i = $2 }
		$1 == "go_memstats_heap_released_bytes" { r = $2 }
		$1 == "go_memstats_stack_inuse_bytes" { s = $2 }
		END { printf "%d | %d | %d | %d", g, h / 1024, (i - r) / 1024, s / 1024 }' <<<"$1"
}

log "warm-up"
for t in $TARGETS; do
	run_pgbench "$t" select-only simple "$IDLE_PGBENCH_CLIENTS" 2 "$BENCH_TMP/warmup-$t.log"
done

# go_more METRICS: the Go runtime's memory outside the heap's spans and
# its threads (kB, and a count), from a scrape: all memory obtained from the
# OS, released heap, span structures, GC metadata, other runtime
# structures, OS threads.
go_more() {
	[ -n "$1" ] || { echo "- | - | - | - | - | -"; return; }
	awk '
		$1 == "go_memstats_sys_bytes" { y = $2 }
		$1 == "go_memstats_heap_released_bytes" { r = $2 }
		$1 == "go_memstats_mspan_inuse_bytes" { m = $2 }
		$1 == "go_memstats_gc_sys_bytes" { c = $2 }
		$1 == "go_memstats_other_sys_bytes" { o = $2 }
		$1 == "go_threads" { t = $2 }
		END { printf "%d | %d | %d | %d | %d | %d", y / 1024, r / 1024, m / 1024, c / 1024, o / 1024, t }' <<<"$1"
}

CELLS=$BENCH_TMP/cells.tsv
: >"$CELLS"
# cells PHASE: every workload × target, IDLE_ROUNDS times, into $CELLS.
cells() {
	local phase=$1 r w t load1 us
	for r in $(seq "$IDLE_ROUNDS"); do
		for w in select1 select-only; do
			for t in $TARGETS; do
				load1=$(cut -d' ' -f1 /proc/loadavg)
				run_pgbench "$t" "$w" simple "$IDLE_PGBENCH_CLIENTS" "$IDLE_SECONDS" "$BENCH_TMP/pgbench-$phase-$r-$w-$t.log"
				us=$(awk -v c="$CPU_TICKS" -v n="$TXNS" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", c * 1e6 / hz / n }')
				printf '%s\t%s\t%s\t%s\t%.0f\t%s\t%s\n' "$phase" "$r" "$w" "$t" "$TPS" "$us" "$load1" >>"$CELLS"
				log "$phase round $r $w $t: $TPS tps, $us µs/txn (load $load1)"
			done
		done
	done
}

cells without
declare -A RSS0 RSS1 RSS2 GO0 GO1 GM0 GM1
for t in $TARGETS; do m=$(scrape "$t"); RSS0[$t]=$(rss_kb "$(target_pid "$t")") GO0[$t]=$(go_stats "$m") GM0[$t]=$(go_more "$m"); done

# peak "GOROUTINES HEAP" METRICS: the larger of the goroutines and of the
# heap in use (kB) so far and in a scrape. Sampled while the idle clients
# log in: the runtime keeps a goroutine's g (about 480 bytes) after it
# exits, for the next goroutine to reuse, so the most goroutines that ran at
# once is how many gs the login burst leaves behind.
peak() {
	[ -n "$2" ] || { echo "$1"; return; }
	awk -v prev="$1" '
		$1 == "go_goroutines" { g = $2 }
		$1 == "go_memstats_heap_inuse_bytes" { h = $2 / 1024 }
		END { split(prev, p, " "); printf "%d %d", (g > p[1] ? g : p[1]), (h > p[2] ? h : p[2]) }' <<<"$2"
}

# The idle clients: one helper per target, holding its connections until
# its stdin (a FIFO we keep open) closes.
declare -A HOLD PEAK
for t in $TARGETS; do
	fifo=$BENCH_TMP/idle-$t.in
	mkfifo "$fifo"
	tls=
	tls_to "$t" && tls=tls
	python3 "$BENCH_DIR/idle_clients.py" 127.0.0.1 "$(target_port "$t")" "$BENCH_USER" "$BENCH_DB" "$IDLE_CLIENTS" $tls \
		<"$fifo" >"$BENCH_TMP/idle-$t.out" 2>&1 &
	BENCH_EXTRA_PIDS+=("$!")
	exec {fd}>"$fifo"
	HOLD[$t]=$fd
	log "opening $IDLE_CLIENTS idle clients to $t"
	PEAK[$t]="0 0"
	for _ in $(seq 3000); do
		grep -q '^ready' "$BENCH_TMP/idle-$t.out" 2>/dev/null && break
		kill -0 "${BENCH_EXTRA_PIDS[-1]}" 2>/dev/null || { cat "$BENCH_TMP/idle-$t.out" >&2; die "idle clients to $t failed"; }
		PEAK[$t]=$(peak "${PEAK[$t]}" "$(scrape "$t")")
		sleep 0.2
	done
	grep -q '^ready' "$BENCH_TMP/idle-$t.out" || die "idle clients to $t not ready after 10 minutes"
done
log "idle clients connected; settling ${IDLE_SETTLE}s" # parking, GC and scavenging take their time
sleep "$IDLE_SETTLE"
for t in $TARGETS; do m=$(scrape "$t"); RSS1[$t]=$(rss_kb "$(target_pid "$t")") GO1[$t]=$(go_stats "$m") GM1[$t]=$(go_more "$m"); done

cells with-idle
for t in $TARGETS; do RSS2[$t]=$(rss_kb "$(target_pid "$t")"); done
for t in $TARGETS; do exec {HOLD[$t]}>&-; done
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$IDLE_OUT")"
{
	echo "# Idle clients: latest run"
	echo
	echo "Generated by \`bench/idle.sh\`: $IDLE_CLIENTS idle client connections (each logged in and ran \`SELECT 1\`) to each of"
	echo "PgBouncer $PGBOUNCER_VERSION, shardgate $SHARDGATE_VERSION (evloop: the same build with limits.event_loop on, if measured) and base = $BASE_DESC (base-evloop: with the option on); transaction mode, pool size $BENCH_POOL_SIZE;"
	echo "pgbench \`-c $IDLE_PGBENCH_CLIENTS -j 2 -T $IDLE_SECONDS -M simple\`, $IDLE_ROUNDS rounds, targets interleaved per cell; TLS: ${BENCH_TLS:-none} (the idle clients' too)."
	echo "$(nproc) CPUs, load average $LOAD_START at start, $LOAD_END at end."
	echo
	echo "## Memory"
	echo
	echo "| proxy | RSS before (kB) | RSS with idle clients, after ${IDLE_SETTLE}s (kB) | RSS after the cells (kB) | per idle client (bytes) |"
	echo "|---|---|---|---|---|"
	for t in $TARGETS; do
		echo "| $t | ${RSS0[$t]} | ${RSS1[$t]} | ${RSS2[$t]} | $(((RSS1[$t] - RSS0[$t]) * 1024 / IDLE_CLIENTS)) |"
	done
	echo
	echo "Go runtime of the shardgate targets (from /metrics), before the idle clients and after ${IDLE_SETTLE}s with them:"
	echo
	echo "| proxy | goroutines before | heap in use before (kB) | heap free, not released, before (kB) | stacks before (kB) | goroutines with idle | heap in use with idle (kB) | heap free, not released, with idle (kB) | stacks with idle (kB) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for t in $TARGETS; do echo "| $t | ${GO0[$t]} | ${GO1[$t]} |"; done
	echo
	echo "Most goroutines and most heap in use while the idle clients logged in (sampled every 0.2 s; every goroutine that ran at once leaves its g behind):"
	echo
	echo "| proxy | goroutines at peak | heap in use at peak (kB) |"
	echo "|---|---|---|"
	for t in $TARGETS; do if [ -n "${SG_METRICS[$t]:-}" ]; then echo "| $t | ${PEAK[$t]% *} | ${PEAK[$t]#* } |"; fi; done
	echo
	echo "The rest of the Go runtime's memory, before and with the idle clients (kB; threads a count):"
	echo
	echo "| proxy | sys before | heap released before | span structs before | GC metadata before | other before | threads before | sys with idle | heap released with idle | span structs with idle | GC metadata with idle | other with idle | threads with idle |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
	for t in $TARGETS; do echo "| $t | ${GM0[$t]} | ${GM1[$t]} |"; done
	echo
	echo "## Load figures without and with the idle clients"
	echo
	echo "| phase | round | workload | proxy | tps | CPU µs/txn | load1 |"
	echo "|---|---|---|---|---|---|---|"
	while IFS=$'\t' read -r a b c d e f g; do echo "| $a | $b | $c | $d | $e | $f | $g |"; done <"$CELLS"
} >"$IDLE_OUT"
cat "$IDLE_OUT"
log "wrote $IDLE_OUT"
