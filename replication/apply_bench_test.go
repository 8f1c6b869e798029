package replication

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/shardgate/shardgate/config"
)

// selfCPU returns the CPU time (user + system) the test process has used
// so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkApplyTPCB feeds one applier decoded changes of pgbench's
// tpcb-like transactions at scale 1 (BenchmarkStreamApplyTPCB's), a fixed
// number of source transactions per destination transaction, without a
// source: how many source transactions join a group, which decides how
// many changes can collapse, is then the benchmark's choice instead of the
// machine's. It reports the statements sent per change and the CPU of the
// destination backend and of the test process (the applier and its
// garbage collection, as nothing else runs) per 100 000 changes; ns/op is
// the applier's own work plus the wait for the destination, per source
// transaction.
func BenchmarkApplyTPCB(b *testing.B) {
	const accounts = 100000
	f := newStreamFixture(b, 1, tpcbSchema, fmt.Sprintf(`INSERT INTO pgbench_branches VALUES (1, 0);
INSERT INTO pgbench_tellers SELECT g, 1, 0 FROM generate_series(1, 10) g;
INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, %d) g;`, accounts),
		func(db *config.Database) {
			db.OmniTables = []string{"pgbench_branches", "pgbench_tellers", "pgbench_accounts", "pgbench_history"}
		})
	rel := func(name string, cols ...string) *relation {
		return &relation{name: "public." + name, ident: qualified("public", name), cols: cols, key: []int{0}}
	}
	branches := rel("pgbench_branches", "bid", "bbalance", "filler")
	tellers := rel("pgbench_tellers", "tid", "bid", "tbalance", "filler")
	accts := rel("pgbench_accounts", "aid", "bid", "abalance", "filler")
	history := rel("pgbench_history", "hid", "tid", "bid", "aid", "delta", "mtime", "filler")
	text := func(v string) *pglogrepl.TupleDataColumn {
		return &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeText, Data: []byte(v)}
	}
	null := &pglogrepl.TupleDataColumn{DataType: pglogrepl.TupleDataTypeNull}
	itoa := func(i int) *pglogrepl.TupleDataColumn { return text(strconv.Itoa(i)) }
	for _, group := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("group=%d", group), func(b *testing.B) {
			ctx := b.Context()
			f.exec(b, f.dstConns[0], `UPDATE pgbench_branches SET bbalance = 0; UPDATE pgbench_tellers SET tbalance = 0;
UPDATE pgbench_accounts SET abalance = 0 WHERE abalance <> 0; TRUNCATE pgbench_history`)
			a, err := f.task.newApplier(ctx, 0, 0, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer a.conn.Close(ctx)
			var pid int
			if err := a.conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			bbal, tbal, abal := 0, make([]int, 11), make([]int, accounts+1)
			hid := 0
			lsn := a.progress
			upd := func(r *relation, vs ...*pglogrepl.TupleDataColumn) change {
				return change{kind: changeUpdate, rel: r, new: vs, old: vs}
			}
			// The changes are built before the timer starts, so that
			// allocs/op is the applier's own.
			ops := make([]op, b.N)
			for i := range ops {
				aid, tid, delta := 1+rng.IntN(accounts), 1+rng.IntN(10), rng.IntN(10001)-5000
				abal[aid] += delta
				tbal[tid] += delta
				bbal += delta
				hid++
				lsn += 100
				ops[i] = op{final: lsn - 1, commit: true, end: lsn, changes: []change{
					upd(accts, itoa(aid), itoa(1), itoa(abal[aid]), text("")),
					upd(tellers, itoa(tid), itoa(1), itoa(tbal[tid]), null),
					upd(branches, itoa(1), itoa(bbal), null),
					{kind: changeInsert, rel: history, new: []*pglogrepl.TupleDataColumn{
						itoa(hid), itoa(tid), itoa(1), itoa(aid), itoa(delta), text("2026-12-05 12:00:00"), null}},
				}}
			}
			ticks0, stmts0, self0 := procTicks(pid), f.task.prog.statements.Load(), selfCPU()
			b.ReportAllocs()
			b.ResetTimer()
			for i, o := range ops {
				if err := a.apply(ctx, o); err != nil {
					b.Fatal(err)
				}
				if i%group == group-1 || i == b.N-1 {
					if err := a.commit(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			changes := float64(4 * b.N)
			b.ReportMetric(float64(f.task.prog.statements.Load()-stmts0)/changes, "stmts/change")
			b.ReportMetric(float64(procTicks(pid)-ticks0)*1e5/changes/100, "backend-s/100k")
			b.ReportMetric((selfCPU()-self0).Seconds()*1e5/changes, "proxy-s/100k")
			var sum int
			if err := f.dstConns[0].QueryRow(ctx, "SELECT (SELECT sum(bbalance) FROM pgbench_branches) - (SELECT sum(delta) FROM pgbench_history)").Scan(&sum); err != nil || sum != 0 {
				b.Fatalf("branch balance minus history %d (%v), want 0", sum, err)
			}
			if err := f.dstConns[0].QueryRow(ctx, "SELECT count(*) FROM pgbench_history").Scan(&sum); err != nil || sum != hid {
				b.Fatalf("history %d rows (%v), want %d", sum, err, hid)
			}
		})
	}
}
