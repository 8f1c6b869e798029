#!/usr/bin/env bash
# bench/profile.sh — where shardgate's CPU goes, without touching its code.
#
# Same throwaway PostgreSQL, PgBouncer and shardgate as bench/run.sh. For
# every workload × pgbench mode (16 clients by default) it runs PgBouncer,
# shardgate and its variants back to back and measures, per transaction and
# for each proxy process:
#   1. CPU time, context switches and syscalls by kind (perf stat with
#      syscall tracepoints: cheap, counts every thread of the process);
#   2. a syscall summary with strace -c -f (slows the proxy a lot, so its TPS
#      is not meaningful, but the counts per transaction are a cross-check);
#   3. shardgate's hottest functions (perf record -g, cpu-clock samples).
# Variants are more shardgate processes measured in the same run: the same
# build under each GOMAXPROCS of PROFILE_GOMAXPROCS, and a build of git
# revision PROFILE_BASE_REF (before/after a change, under the same load),
# with the limits section PROFILE_BASE_LIMITS if set (such as
# "{ event_loop: true }", to compare against the evloop variant).
# PgBouncer before 1.21 cannot run -M prepared in transaction mode with
# several clients: those cells are skipped.
#
# Environment: PROFILE_SECONDS (default 10), PROFILE_ROUNDS (1: how many
# times every cell is measured, the targets interleaved), PROFILE_CLIENTS (16),
# PROFILE_WORKLOADS ("select1 select-only"; PROFILE_WORKLOAD is the old
# name), PROFILE_MODES ("simple extended prepared"), PROFILE_GOMAXPROCS ("1";
# empty for none), PROFILE_BASE_REF (none), PROFILE_PARK_AFTER (values of
# limits.client_park_after, each a variant parkV; none), PROFILE_EVENT_LOOP
# (GOMAXPROCS values, "default" for Go's, each a variant with
# limits.event_loop on: evloop, evloop-gomaxprocsN; none), PROFILE_OUT
# (bench/results/profile.md), PROFILE_STRACE=0 to skip strace,
# PROFILE_RECORD=0 to skip perf record, PROFILE_RECORD_TARGET (the target
# perf record samples: shardgate, or a variant such as evloop),
# PROFILE_RECORD_MODES (the pgbench modes it samples, one profile each;
# "prepared"), PROFILE_RECORD_KEEP (a directory to copy the perf.data
# files to), PROFILE_FLOORS=1 to measure the
# relays of bench/relayfloor (floor-goroutine, floor-epoll1, floor-coro1,
# floor-coro1go) too, plus BENCH_POOL_SIZE and BENCH_SCALE
# as in run.sh. Needs perf (apt-get install -y linux-perf) and strace.
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

PROFILE_SECONDS=${PROFILE_SECONDS:-10}
PROFILE_ROUNDS=${PROFILE_ROUNDS:-1}
PROFILE_CLIENTS=${PROFILE_CLIENTS:-16}
PROFILE_WORKLOADS=${PROFILE_WORKLOADS:-${PROFILE_WORKLOAD:-select1 select-only}}
PROFILE_MODES=${PROFILE_MODES:-simple extended prepared}
PROFILE_GOMAXPROCS=${PROFILE_GOMAXPROCS-1}
PROFILE_BASE_REF=${PROFILE_BASE_REF:-}
PROFILE_BASE_LIMITS=${PROFILE_BASE_LIMITS:-}
PROFILE_PARK_AFTER=${PROFILE_PARK_AFTER:-}
PROFILE_EVENT_LOOP=${PROFILE_EVENT_LOOP:-}
PROFILE_RECORD=${PROFILE_RECORD:-1}
PROFILE_RECORD_TARGET=${PROFILE_RECORD_TARGET:-shardgate}
PROFILE_RECORD_MODES=${PROFILE_RECORD_MODES:-prepared}
PROFILE_STRACE=${PROFILE_STRACE:-1}
PROFILE_OUT=${PROFILE_OUT:-$BENCH_DIR/results/profile.md}
case $PROFILE_OUT in /*) ;; *) PROFILE_OUT=$PWD/$PROFILE_OUT ;; esac

install_if_missing perf linux-perf
[ "$PROFILE_STRACE" = 0 ] || install_if_missing strace strace

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
bench_setup
OUTDIR=$BENCH_TMP/profile
mkdir -p "$OUTDIR"

SYSCALLS="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_pwait2 epoll_ctl futex nanosleep sched_yield getpid tgkill rt_sigreturn madvise mmap accept4 close setsockopt getsockopt poll ppoll select pselect6"
# shellcheck disable=SC2086 # SYSCALLS is a list of words
EVENTS=$(perf_syscall_events task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter $SYSCALLS)

VARIANTS=()
for g in $PROFILE_GOMAXPROCS; do
	start_shardgate_variant "gomaxprocs$g" "$BENCH_TMP/proxy" "$g"
	VARIANTS+=("gomaxprocs$g")
done
for a in $PROFILE_PARK_AFTER; do
	start_shardgate_variant "park$a" "$BENCH_TMP/proxy" "" "{ client_park_after: $a }"
	VARIANTS+=("park$a")
done
for g in $PROFILE_EVENT_LOOP; do
	if [ "$g" = default ]; then
		start_shardgate_variant evloop "$BENCH_TMP/proxy" "" "{ event_loop: true }"
		VARIANTS+=(evloop)
	else
		start_shardgate_variant "evloop-gomaxprocs$g" "$BENCH_TMP/proxy" "$g" "{ event_loop: true }"
		VARIANTS+=("evloop-gomaxprocs$g")
	fi
done
if [ -n "$PROFILE_BASE_REF" ]; then
	build_ref "$PROFILE_BASE_REF" "$BENCH_TMP/proxy-base"
	start_shardgate_variant base "$BENCH_TMP/proxy-base" "" "$PROFILE_BASE_LIMITS"
	VARIANTS+=(base)
	BASE_DESC="$PROFILE_BASE_REF ($(git -C "$REPO_DIR" rev-parse --short "$PROFILE_BASE_REF"))"
fi
if [ "${PROFILE_FLOORS:-0}" = 1 ]; then
	start_floor floor-goroutine goroutine
	start_floor floor-epoll1 epoll 1
	start_floor floor-coro1 coro 1
	start_floor floor-coro1go coro 1 -keep-go
	VARIANTS+=(floor-goroutine floor-epoll1 floor-coro1 floor-coro1go)
fi
TARGETS="pgbouncer shardgate ${VARIANTS[*]}"

log "warm-up"
for t in $TARGETS; do
	run_pgbench "$t" select-only extended "$PROFILE_CLIENTS" 2 "$BENCH_TMP/warmup-$t.log"
done

# with_tool LABEL TARGET WORKLOAD MODE CMD... runs CMD in the background
# while pgbench runs against TARGET, then stops it with SIGINT.
with_tool() {
	local label=$1 target=$2 workload=$3 mode=$4
	shift 4
	"$@" &
	local tool=$!
	BENCH_EXTRA_PIDS+=("$tool")
	sleep 0.5 # perf/strace attach; nothing to poll for
	run_pgbench "$target" "$workload" "$mode" "$PROFILE_CLIENTS" "$PROFILE_SECONDS" "$OUTDIR/pgbench-$label.log"
	kill -INT "$tool" 2>/dev/null || true
	wait "$tool" 2>/dev/null || true
}

SUMMARY=$OUTDIR/summary.tsv
: >"$SUMMARY"
# perf_stat TARGET WORKLOAD MODE: CPU, context switches and syscalls per txn.
perf_stat() {
	local target=$1 workload=$2 mode=$3 label=$1-$2-$3 pid load1
	pid=$(target_pid "$target")
	load1=$(cut -d' ' -f1 /proc/loadavg)
	log "perf stat: $target $workload -M $mode (load $load1)"
	local before after
	before=$(proc_user_sys_ticks "$pid")
	with_tool "$label" "$target" "$workload" "$mode" perf stat -x, -e "$EVENTS" -p "$pid" -o "$OUTDIR/stat-$label.csv"
	after=$(proc_user_sys_ticks "$pid")
	# User and system time per transaction, from /proc (clock ticks): where
	# the proxy's own code and the kernel's share of its CPU go.
	local usersys
	usersys=$(awk -v b="$before" -v a="$after" -v n="$TXNS" -v hz="$(getconf CLK_TCK)" 'BEGIN {
		split(b, x, " "); split(a, y, " ")
		printf "%.1f / %.1f", (y[1] - x[1]) / hz / n * 1e6, (y[2] - x[2]) / hz / n * 1e6 }')
	local detail
	detail=$(awk -F, -v n="$TXNS" '$3 ~ /^syscalls:sys_enter_/ && $1 / n >= 0.005 {
			name = $3; sub(/^syscalls:sys_enter_/, "", name); printf "%.2f %s\n", $1 / n, name }' "$OUTDIR/stat-$label.csv" |
		sort -rn | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1 }')
	awk -F, -v n="$TXNS" -v tps="$TPS" -v p99="$P99_MS" -v w="$workload" -v m="$mode" -v t="$target" -v load1="$load1" -v detail="$detail" -v usersys="$usersys" '
		$3 == "task-clock" { cpu = $1 }          # msec
		$3 == "context-switches" { cs = $1 }
		$3 == "raw_syscalls:sys_enter" { sc = $1 }
		END { printf "%s\t%s\t%s\t%.0f\t%s\t%.1f\t%s\t%.2f\t%.2f\t%s\t%s\n", w, m, t, tps, p99, cpu * 1000 / n, usersys, cs / n, sc / n, load1, detail }' \
		"$OUTDIR/stat-$label.csv" >>"$SUMMARY"
	tail -1 "$SUMMARY" >&2
}

for r in $(seq "$PROFILE_ROUNDS"); do
	for w in $PROFILE_WORKLOADS; do
		for m in $PROFILE_MODES; do
			for t in $TARGETS; do
				if [ "$t" = pgbouncer ] && [ "$m" = prepared ] && ! pgbouncer_prepared_ok; then continue; fi
				perf_stat "$t" "$w" "$m"
			done
		done
	done
done

LAST_WORKLOAD=${PROFILE_WORKLOADS##* }
STRACE_OUT=""
if [ "$PROFILE_STRACE" != 0 ]; then
	for l in "pgbouncer extended" "shardgate prepared"; do
		# shellcheck disable=SC2086 # split "target mode"
		set -- $l
		log "strace -c -f: $1 -M $2"
		with_tool "strace-$1-$2" "$1" "$LAST_WORKLOAD" "$2" strace -c -f -qq -o "$OUTDIR/strace-$1-$2.txt" -p "$(target_pid "$1")"
		STRACE_OUT="$STRACE_OUT
### strace -c -f, $1, $LAST_WORKLOAD -M $2 ($TXNS transactions, $TPS tps under strace)

\`\`\`
$(awk -v n="$TXNS" 'NR > 25 && !/total/ { next } NR <= 2 || /^-/ { print; next } $4 ~ /^[0-9]+$/ { printf "%s   (%.2f calls/txn)\n", $0, $4 / n; next } { print }' "$OUTDIR/strace-$1-$2.txt")
\`\`\`
"
	done
fi

# report NAME LINES DATA ARGS...: perf report of DATA into $OUTDIR/NAME.txt,
# comments dropped, at most LINES lines (no `| head` under pipefail).
report() {
	local name=$1 lines=$2 data=$3
	shift 3
	: >"$OUTDIR/$name.txt"
	[ -f "$data" ] || return 0
	perf report -i "$data" --stdio -g none "$@" >"$OUTDIR/$name.full" 2>/dev/null || true
	grep -v -e '^#' -e '^$' "$OUTDIR/$name.full" >"$OUTDIR/$name.all" || true
	sed -n "1,${lines}p" "$OUTDIR/$name.all" >"$OUTDIR/$name.txt"
}
REC_OUT=""
if [ "$PROFILE_RECORD" != 0 ]; then
	for m in $PROFILE_RECORD_MODES; do
		data=$OUTDIR/perf-$PROFILE_RECORD_TARGET-$m.data
		log "perf record: $PROFILE_RECORD_TARGET $LAST_WORKLOAD -M $m"
		with_tool "record-$m" "$PROFILE_RECORD_TARGET" "$LAST_WORKLOAD" "$m" \
			perf record -F 1999 -g -p "$(target_pid "$PROFILE_RECORD_TARGET")" -o "$data" -q
		[ -z "${PROFILE_RECORD_KEEP:-}" ] || cp "$data" "$PROFILE_RECORD_KEEP/"
		report self 30 "$data" --no-children --sort sym --percent-limit 0.8
		report go 40 "$data" --no-children --sort sym --dsos proxy --percent-limit 0.15
		report children 50 "$data" --children --sort sym --percent-limit 4
		report dso 8 "$data" --no-children --sort dso
		REC_OUT="$REC_OUT
## $PROFILE_RECORD_TARGET, $LAST_WORKLOAD -M $m: hottest functions (perf record, cpu-clock, self time; $TPS tps while sampling)

\`\`\`
$(cat "$OUTDIR/self.txt")
\`\`\`

Go code only (self time, percent of all samples):

\`\`\`
$(cat "$OUTDIR/go.txt")
\`\`\`

By object:

\`\`\`
$(cat "$OUTDIR/dso.txt")
\`\`\`

Cumulative (children included, ≥ 4%):

\`\`\`
$(cat "$OUTDIR/children.txt")
\`\`\`
"
	done
fi
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p "$(dirname "$PROFILE_OUT")"
{
	echo "# shardgate profile: latest run"
	echo
	echo "Generated by \`bench/profile.sh\`: \`pgbench -c $PROFILE_CLIENTS -j 2 -T $PROFILE_SECONDS\` over TCP on 127.0.0.1, workloads $PROFILE_WORKLOADS (select1: \`SELECT 1;\`, select-only: \`-S\`);"
	echo "PgBouncer $PGBOUNCER_VERSION and shardgate $SHARDGATE_VERSION, transaction mode, pool size $BENCH_POOL_SIZE;"
	echo "variants: gomaxprocsN is the same shardgate build under GOMAXPROCS=N; evloop is the same build with limits.event_loop on (evloop-gomaxprocsN under GOMAXPROCS=N); base is ${BASE_DESC:-not measured}."
	echo "$(nproc) CPUs, $(pin_desc), load average $LOAD_START at start, $LOAD_END at end."
	echo
	echo "## Per transaction (perf stat, all threads of the proxy process)"
	echo
	echo "| workload | mode | proxy | tps | p99 ms | CPU µs/txn | user / sys µs/txn | context switches/txn | syscalls/txn | load1 | syscalls/txn by kind |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	while IFS=$'\t' read -r a b c d p e u f g h i; do echo "| $a | $b | $c | $d | $p | $e | $u | $f | $g | $h | $i |"; done <"$SUMMARY"
	echo
	echo "CPU µs/txn is perf's task-clock; user / sys splits the process's CPU time as /proc/PID/stat counts it (utime, stime; clock ticks of 1/$(getconf CLK_TCK) s), so the two may differ by a tick's worth."
	echo "$REC_OUT"
	echo "$STRACE_OUT"
} >"$PROFILE_OUT"
cat "$PROFILE_OUT"
log "wrote $PROFILE_OUT"
