#!/usr/bin/env bash
# bench/icount.sh — user-space instructions per transaction of PgBouncer and
# shardgate, counted by valgrind's callgrind: the same figure in every run,
# whatever else the machine does.
#
# The gap between shardgate's and PgBouncer's CPU per transaction is user
# time (docs/benchmarks.md, issue 13), and user time follows the number of
# instructions the proxy runs; but a pgbench cell's CPU time moves by ±20%
# between runs, so a change that saves a few percent cannot be seen there.
# Instructions can: callgrind counts every one the proxy process executes
# (all its threads, the Go runtime and libc included; not the kernel's).
#
# For every workload × mode × target it starts the proxy twice under
# callgrind on a port of its own, in front of the same throwaway PostgreSQL
# as bench/run.sh (lib.sh), and runs pgbench -t N1 and -t N2 with C clients
# against the two; the difference of the two processes' counts divided by
# (N2 - N1) × C is the count per transaction: start-up, logins and the
# first statements of each connection cancel out. Callgrind runs the proxy
# some 50 times slower, so the transaction counts are small.
#
# shardgate runs with GODEBUG=asyncpreemptoff=1 (callgrind 3.19 aborts on
# the signals of Go's asynchronous preemption) and cpu.rdtscp=off (it does
# not know RDTSCP either, which the runtime's cputicks uses on CPUs that
# have it), and is stopped with SIGKILL
# after callgrind_control dumped its counts (its SIGINT handling aborts
# callgrind the same way); PgBouncer stops with SIGINT and callgrind prints
# its total. PgBouncer before 1.21 cannot run -M prepared in transaction
# mode: those cells are skipped.
#
# Environment: ICOUNT_N1 (100) and ICOUNT_N2 (600) transactions per client,
# ICOUNT_CLIENTS (16), ICOUNT_WORKLOADS ("select1 select-only"),
# ICOUNT_MODES ("simple extended"), ICOUNT_BASE_REF (a git revision: its
# build is counted too, as target base), ICOUNT_FUNCS (0: for N > 0, the
# N functions of shardgate, and of base, with the most instructions per
# transaction, each function's count in the -t N2 run minus the -t N1 run,
# after the table; the event loop's coroutines confuse callgrind's call
# graph, not its counts per function), ICOUNT_OUT
# (bench/results/icount.md), plus BENCH_POOL_SIZE, BENCH_SCALE and
# SHARDGATE_BIN as in run.sh. Needs valgrind (apt-get install -y valgrind;
# installed when missing and running as root).
set -euo pipefail

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

ICOUNT_N1=${ICOUNT_N1:-100}
ICOUNT_N2=${ICOUNT_N2:-600}
ICOUNT_CLIENTS=${ICOUNT_CLIENTS:-16}
ICOUNT_WORKLOADS=${ICOUNT_WORKLOADS:-select1 select-only}
ICOUNT_MODES=${ICOUNT_MODES:-simple extended}
ICOUNT_BASE_REF=${ICOUNT_BASE_REF:-}
ICOUNT_FUNCS=${ICOUNT_FUNCS:-0}
ICOUNT_OUT=${ICOUNT_OUT:-$BENCH_DIR/results/icount.md}
case $ICOUNT_OUT in /*) ;; *) ICOUNT_OUT=$PWD/$ICOUNT_OUT ;; esac
[ "$ICOUNT_N2" -gt "$ICOUNT_N1" ] || die "ICOUNT_N2 ($ICOUNT_N2) must be larger than ICOUNT_N1 ($ICOUNT_N1)"

install_if_missing valgrind valgrind

bench_setup
TARGETS="pgbouncer shardgate"
if [ -n "$ICOUNT_BASE_REF" ]; then
	build_ref "$ICOUNT_BASE_REF" "$BENCH_TMP/proxy-base"
	TARGETS="$TARGETS base"
	BASE_DESC="$ICOUNT_BASE_REF ($(git -C "$REPO_DIR" rev-parse --short "$ICOUNT_BASE_REF"))"
fi
reserve_port ICOUNT_PORT $((PORT_SHARDGATE + 40))
OUTDIR=$BENCH_TMP/icount
mkdir -p "$OUTDIR"
chmod 777 "$OUTDIR"

# wait_callgrind PORT PID TARGET LOG waits until the proxy under callgrind
# answers SELECT 1: it starts some 50 times slower than without, more on a
# loaded machine, so longer than wait_sql waits.
wait_callgrind() {
	local port=$1 pid=$2 t=$3 logf=$4
	for _ in $(seq 1200); do
		if "$PG_BIN/psql" -X -q -h 127.0.0.1 -p "$port" -U "$BENCH_USER" -d "$BENCH_DB" -c 'SELECT 1' >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || { cat "$logf" >&2; die "$t under callgrind exited"; }
		sleep 0.25
	done
	cat "$logf" >&2
	die "$t under callgrind on port $port does not answer SELECT 1 after 5 minutes"
}

# count TARGET WORKLOAD MODE N prints the instructions of a fresh TARGET
# process under callgrind that served pgbench -t N (and its logins).
count() {
	local t=$1 workload=$2 mode=$3 n=$4 pid out=$OUTDIR/$1-$2-$3-$4
	case $t in
	pgbouncer)
		sed -e "s/^listen_port = .*/listen_port = $ICOUNT_PORT/" \
			-e "s#^pidfile = .*#pidfile = $OUTDIR/pgbouncer.pid#" \
			-e "s#^logfile = .*#logfile = $OUTDIR/pgbouncer.log#" \
			"$BENCH_TMP/pgbouncer/pgbouncer.ini" >"$OUTDIR/pgbouncer.ini"
		chown postgres: "$OUTDIR/pgbouncer.ini" 2>/dev/null || true
		if [ "$(id -u)" -eq 0 ]; then
			setpriv --reuid=postgres --regid=postgres --init-groups -- \
				valgrind --tool=callgrind --callgrind-out-file=/dev/null "$PGBOUNCER" "$OUTDIR/pgbouncer.ini" >"$out.log" 2>&1 &
		else
			valgrind --tool=callgrind --callgrind-out-file=/dev/null "$PGBOUNCER" "$OUTDIR/pgbouncer.ini" >"$out.log" 2>&1 &
		fi
		pid=$!
		;;
	shardgate | base)
		local bin=$BENCH_TMP/proxy
		[ "$t" = base ] && bin=$BENCH_TMP/proxy-base
		sed "s/^listen: .*/listen: 127.0.0.1:$ICOUNT_PORT/" "$BENCH_TMP/shardgate.yaml" >"$OUTDIR/shardgate.yaml"
		GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind --callgrind-out-file="$out.cg" \
			"$bin" -config "$OUTDIR/shardgate.yaml" -log-level warn >"$out.log" 2>&1 &
		pid=$!
		;;
	esac
	wait_callgrind "$ICOUNT_PORT" "$pid" "$t" "$out.log"
	# shellcheck disable=SC2046
	"$PGBENCH" -h 127.0.0.1 -p "$ICOUNT_PORT" $(pgbench_args "$workload" "$mode" "$ICOUNT_CLIENTS" 1 | sed "s/-T 1/-t $n/") >"$out.pgbench" 2>&1 ||
		{ cat "$out.pgbench" "$out.log" >&2; die "pgbench against $t under callgrind failed"; }
	grep -q "number of failed transactions: 0 " "$out.pgbench" || { cat "$out.pgbench" >&2; die "failed transactions against $t"; }
	if [ "$t" = pgbouncer ]; then
		kill -INT "$pid"
		wait "$pid" || true
		awk '/Collected :/ {gsub(",", "", $4); print $4}' "$out.log"
	else
		callgrind_control -d "$pid" >/dev/null || die "callgrind_control could not dump $t"
		kill -KILL "$pid"
		wait "$pid" 2>/dev/null || true
		awk '/^(summary|totals):/ {print $2; exit}' "$out.cg".*
	fi
}

# funcs T WORKLOAD MODE prints the ICOUNT_FUNCS functions of T with the
# most instructions per transaction: each function's own count (callees
# not included) in the -t ICOUNT_N2 dump minus the -t ICOUNT_N1 one.
funcs() {
	local t=$1 workload=$2 mode=$3 n f
	n=$(((ICOUNT_N2 - ICOUNT_N1) * ICOUNT_CLIENTS))
	for f in "$ICOUNT_N1" "$ICOUNT_N2"; do
		# shellcheck disable=SC2012 # one dump file, named by callgrind
		callgrind_annotate --tree=none --auto=no --threshold=100 "$(ls "$OUTDIR/$t-$workload-$mode-$f.cg".* | head -n 1)" \
			>"$OUTDIR/$t-$workload-$mode-$f.funcs" 2>/dev/null
	done
	awk -v n="$n" -v q="'" '
		# "  5,925,123 ( 5.09%)  /path/file.go:pkg.func [/path/proxy]"
		$1 ~ /^[0-9,]+$/ && $2 ~ /^\(/ {
			c = $1; gsub(",", "", c)
			f = $0; sub(/^[^)]*\)[ \t]*/, "", f); sub(/ \[.*$/, "", f); sub(/^.*:/, "", f); sub(q "[0-9]+$", "", f); sub(/^github\.com\/shardgate\/shardgate\//, "", f)
			if (f == "" || f ~ /PROGRAM TOTALS/) next
			d[f] += (FILENAME == ARGV[1] ? -c : c)
		}
		END {
			for (f in d) printf "%10.0f  %s\n", d[f] / n, f
		}' "$OUTDIR/$t-$workload-$mode-$ICOUNT_N1.funcs" "$OUTDIR/$t-$workload-$mode-$ICOUNT_N2.funcs" |
		sort -rn | head -n "$ICOUNT_FUNCS" || true
}

# wait_port_free waits until the last proxy under callgrind let go of
# ICOUNT_PORT, for the next one.
wait_port_free() {
	local i
	for i in $(seq 1 100); do
		[ -z "$(ss -Htln "sport = :$ICOUNT_PORT")" ] && return
		sleep 0.1
	done
	die "port $ICOUNT_PORT still in use"
}

mkdir -p "$(dirname "$ICOUNT_OUT")"
{
	echo "# Instructions per transaction: latest run"
	echo
	echo "Generated by \`bench/icount.sh\`: user-space instructions of the whole proxy process (valgrind callgrind), per transaction:"
	echo "the difference between a process that served \`pgbench -t $ICOUNT_N2\` and one that served \`-t $ICOUNT_N1\`, $ICOUNT_CLIENTS clients, divided by $((ICOUNT_N2 - ICOUNT_N1)) × $ICOUNT_CLIENTS."
	echo "PgBouncer $PGBOUNCER_VERSION and shardgate $SHARDGATE_VERSION${BASE_DESC:+ (base: $BASE_DESC)}, transaction mode, pool size $BENCH_POOL_SIZE; $(date -u +%Y-%m-%d)."
	echo
	if [ -n "$ICOUNT_BASE_REF" ]; then
		echo "| workload | mode | PgBouncer | shardgate | sg/pgb | base | sg/base |"
		echo "|---|---|---|---|---|---|---|"
	else
		echo "| workload | mode | PgBouncer | shardgate | sg/pgb |"
		echo "|---|---|---|---|---|"
	fi
} >"$ICOUNT_OUT"

FUNCS_OUT=""
for workload in $ICOUNT_WORKLOADS; do
	for mode in $ICOUNT_MODES; do
		declare -A per=()
		for t in $TARGETS; do
			if [ "$t" = pgbouncer ] && [ "$mode" = prepared ] && ! pgbouncer_prepared_ok; then
				per[$t]=n/a
				continue
			fi
			log "$workload -M $mode: $t, -t $ICOUNT_N1 and -t $ICOUNT_N2"
			a=$(count "$t" "$workload" "$mode" "$ICOUNT_N1")
			wait_port_free
			b=$(count "$t" "$workload" "$mode" "$ICOUNT_N2")
			wait_port_free
			[ -n "$a" ] && [ -n "$b" ] || die "no instruction count for $t (see $OUTDIR)"
			per[$t]=$(((b - a) / ((ICOUNT_N2 - ICOUNT_N1) * ICOUNT_CLIENTS)))
			log "$workload -M $mode: $t ${per[$t]} instructions per transaction"
		done
		ratio() { if [ "$1" = n/a ] || [ "$2" = n/a ]; then echo n/a; else awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; fi; }
		row="| $workload | $mode | ${per[pgbouncer]} | ${per[shardgate]} | $(ratio "${per[shardgate]}" "${per[pgbouncer]}") |"
		[ -n "$ICOUNT_BASE_REF" ] && row="$row ${per[base]} | $(ratio "${per[shardgate]}" "${per[base]}") |"
		echo "$row" >>"$ICOUNT_OUT"
		if [ "$ICOUNT_FUNCS" -gt 0 ]; then
			for t in shardgate base; do
				[[ " $TARGETS " == *" $t "* ]] || continue
				FUNCS_OUT="$FUNCS_OUT
## $t, $workload -M $mode: instructions per transaction by function (own count)

\`\`\`
$(funcs "$t" "$workload" "$mode")
\`\`\`
"
			done
		fi
		unset per
	done
done
[ -z "$FUNCS_OUT" ] || echo "$FUNCS_OUT" >>"$ICOUNT_OUT"
log "wrote $ICOUNT_OUT"
cat "$ICOUNT_OUT"
