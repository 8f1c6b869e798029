package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

const benchSchema = `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, filler text);
CREATE SEQUENCE bench_ins START 1000000000;`

// BenchmarkStreamApply measures the stream of one source shard into two
// destination shards catching up on a backlog of bench/reshard.sh's write
// load: source transactions of one UPDATE of a random row and one INSERT.
// Each iteration writes the backlog with the stream stopped, then times
// Stream from its start until the slot confirmed it, as bench/reshard.sh
// measures (streamUntilConfirmed). It reports
// changes/s, the statements the appliers sent per change (BEGIN, COMMIT
// and the origin's advance included; a multi-row statement counts once),
// the changes per round trip (mostly one group each: how many source
// transactions had queued up decides how many statements a change needs)
// and the CPU that the destination backends and the walsender spent per
// 100 000 changes, and the test process's (the proxy's stream, and the
// wait for the catch-up, which polls) per 100 000 changes.
func BenchmarkStreamApply(b *testing.B) {
	l := newAccountsLoad(b)
	l.bench(b, l.f.sgCatchUp())
	l.f.compare(b, "accounts", "id", "balance::text || filler")
}

// streamLoad is the backlog of a stream benchmark: a fixture (shardgate's
// copy done) and the source transactions its iterations write.
type streamLoad struct {
	f            *streamFixture
	schema       string
	tables       []string // the tables written, with their keys
	keys         []string
	txns, perTxn int                        // per iteration: transactions, changes per transaction
	txn          func(sql *strings.Builder) // appends one transaction
}

func (l streamLoad) bench(b *testing.B, c catchUp) {
	benchStreamApply(b, l.f, c, l.txns, l.perTxn, l.txn)
}

// newAccountsLoad is BenchmarkStreamApply's load: one UPDATE of a random
// row and one INSERT per transaction.
func newAccountsLoad(b *testing.B) streamLoad {
	const rows = 20000
	f := newStreamFixture(b, 2, benchSchema,
		fmt.Sprintf("INSERT INTO accounts SELECT g, g %% 1000, repeat('x', 160) FROM generate_series(1::bigint, %d) g", rows),
		func(db *config.Database) {
			db.ShardedTables = []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint"}}
		})
	rng := rand.New(rand.NewPCG(1, 2))
	return streamLoad{f: f, schema: benchSchema, tables: []string{"accounts"}, keys: []string{"id"}, txns: 20000, perTxn: 2,
		txn: func(sql *strings.Builder) {
			fmt.Fprintf(sql, "BEGIN; UPDATE accounts SET balance = balance + 1 WHERE id = %d; INSERT INTO accounts VALUES (nextval('bench_ins'), 0, repeat('y', 160)); COMMIT;\n",
				1+rng.IntN(rows))
		}}
}

// tpcbSchema is pgbench's tpcb-like schema at scale 1, with a key on
// pgbench_history, which resharding needs.
const tpcbSchema = `CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84));
CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84));
CREATE TABLE pgbench_history (hid bigserial PRIMARY KEY, tid int, bid int, aid int, delta int, mtime timestamp, filler char(22));`

// BenchmarkStreamApplyTPCB is BenchmarkStreamApply with pgbench's
// tpcb-like transactions at scale 1 (an UPDATE of a random account, of one
// of 10 tellers and of the one branch, and an INSERT into the history): the
// same few rows are updated over and over.
func BenchmarkStreamApplyTPCB(b *testing.B) {
	l := newTPCBLoad(b)
	l.bench(b, l.f.sgCatchUp())
	l.f.compare(b, "pgbench_branches", "bid", "bbalance::text")
	l.f.compare(b, "pgbench_tellers", "tid", "tbalance::text")
	l.f.compare(b, "pgbench_accounts", "aid", "abalance::text")
	l.f.compare(b, "pgbench_history", "hid", "concat_ws(':', tid, bid, aid, delta, mtime)")
}

// newTPCBLoad is BenchmarkStreamApplyTPCB's load.
func newTPCBLoad(b *testing.B) streamLoad {
	const accounts = 100000
	f := newStreamFixture(b, 2, tpcbSchema, fmt.Sprintf(`INSERT INTO pgbench_branches VALUES (1, 0);
INSERT INTO pgbench_tellers SELECT g, 1, 0 FROM generate_series(1, 10) g;
INSERT INTO pgbench_accounts SELECT g, 1, 0, '' FROM generate_series(1, %d) g;`, accounts),
		func(db *config.Database) {
			db.ShardedTables = []config.ShardedTable{
				{Table: "pgbench_branches", Column: "bid", Type: "integer"},
				{Table: "pgbench_tellers", Column: "tid", Type: "integer"},
				{Table: "pgbench_accounts", Column: "aid", Type: "integer"},
				{Table: "pgbench_history", Column: "hid", Type: "bigint"},
			}
		})
	rng := rand.New(rand.NewPCG(1, 2))
	return streamLoad{f: f, schema: tpcbSchema, txns: 10000, perTxn: 4,
		tables: []string{"pgbench_branches", "pgbench_tellers", "pgbench_accounts", "pgbench_history"},
		keys:   []string{"bid", "tid", "aid", "hid"},
		txn: func(sql *strings.Builder) {
			aid, tid, delta := 1+rng.IntN(accounts), 1+rng.IntN(10), rng.IntN(10001)-5000
			fmt.Fprintf(sql, `BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + %[4]d WHERE aid = %[1]d;
UPDATE pgbench_tellers SET tbalance = tbalance + %[4]d WHERE tid = %[2]d;
UPDATE pgbench_branches SET bbalance = bbalance + %[4]d WHERE bid = %[3]d;
INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (%[2]d, %[3]d, %[1]d, %[4]d, CURRENT_TIMESTAMP);
COMMIT;
`, aid, tid, 1, delta)
		}}
}

// catchUp is how a stream benchmark applies its backlog: shardgate's
// Stream (sgCatchUp) or a native subscription (native_bench_test.go).
type catchUp struct {
	// run applies the source's WAL until the slot confirmed the position
	// the source had when run started, then calls caughtUp and stops.
	run func(tb testing.TB, caughtUp func(context.Context))
	// ticks returns the CPU clock ticks that the destination's backends
	// (native: the apply worker) and the walsender have used so far.
	ticks func(tb testing.TB, ctx context.Context) (backends, walsender int64)
	// counts returns the statements and round trips the appliers have
	// sent so far; nil where there are none to count (native).
	counts func() (statements, trips int64)
}

// sgCatchUp is shardgate's catch-up: the task's Stream.
func (f *streamFixture) sgCatchUp() catchUp {
	return catchUp{
		run:   f.streamUntilConfirmed,
		ticks: f.serverTicks,
		counts: func() (int64, int64) {
			return f.task.prog.statements.Load(), f.task.prog.roundTrips.Load()
		},
	}
}

// benchStreamApply runs the iterations of a stream benchmark: each writes
// txns source transactions of perTxn changes each (txn appends one to sql)
// with the stream stopped, then times c's catch-up.
func benchStreamApply(b *testing.B, f *streamFixture, c catchUp, txns, perTxn int, txn func(sql *strings.Builder)) {
	b.ReportAllocs()
	b.ResetTimer()
	var elapsed time.Duration
	var backendTicks, senderTicks, statements, trips int64
	var self time.Duration
	for range b.N {
		b.StopTimer()
		var sql strings.Builder
		for i := range txns {
			txn(&sql)
			if i%500 == 499 {
				f.exec(b, f.srcConn, sql.String())
				sql.Reset()
			}
		}
		f.exec(b, f.srcConn, sql.String())
		b.StartTimer()
		start := time.Now()
		var sent, sentTrips int64
		if c.counts != nil {
			sent, sentTrips = c.counts()
		}
		self0 := selfCPU()
		c.run(b, func(ctx context.Context) {
			elapsed += time.Since(start)
			self += selfCPU() - self0
			if c.counts != nil {
				st, tr := c.counts()
				statements += st - sent
				trips += tr - sentTrips
			}
			be, ws := c.ticks(b, ctx)
			backendTicks += be
			senderTicks += ws
		})
	}
	b.StopTimer()
	changes := float64(perTxn * txns * b.N)
	b.ReportMetric(changes/elapsed.Seconds(), "changes/s")
	if c.counts != nil {
		b.ReportMetric(float64(statements)/changes, "stmts/change")
		b.ReportMetric(changes/float64(trips), "changes/roundtrip")
	}
	// Clock ticks are 1/100 s: ticks per 100 000 changes are ms per 1000.
	b.ReportMetric(float64(backendTicks)*1e5/changes/100, "backend-s/100k")
	b.ReportMetric(float64(senderTicks)*1e5/changes/100, "walsender-s/100k")
	b.ReportMetric(self.Seconds()*1e5/changes, "proxy-s/100k")
}

// streamUntilConfirmed runs the task's Stream until the slot's confirmed
// position reached the source's WAL position at the start (waitConfirmed),
// then calls caughtUp and stops the stream. It measures what
// bench/reshard.sh measures, with the reader in its normal mode:
// WaitCaughtUp (streamWhile) makes the reader confirm every 2 ms, as the
// cutover needs, which costs the proxy and the walsender more per change
// than streaming does. The reader confirms an idle slot every
// pollInterval, so the time measured may run up to that past the last
// apply.
func (f *streamFixture) streamUntilConfirmed(tb testing.TB, caughtUp func(context.Context)) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	target := f.walPosition(tb)
	done := make(chan error, 1)
	go func() { done <- f.task.Stream(ctx) }()
	if err := f.waitConfirmed(ctx, f.task.slotName(0), target, done); err != nil {
		cancel()
		if !errors.Is(err, errStreamEnded) {
			<-done
		}
		tb.Fatal(err)
	}
	caughtUp(ctx)
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("stream: %v", err)
	}
}

// walPosition returns the source's current WAL position.
func (f *streamFixture) walPosition(tb testing.TB) string {
	tb.Helper()
	var lsn string
	if err := f.srcConn.QueryRow(tb.Context(), "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		tb.Fatal(err)
	}
	return lsn
}

// errStreamEnded is waitConfirmed's error when the stream ended first.
var errStreamEnded = errors.New("the stream ended before it caught up")

// waitConfirmed polls the source every 10 ms until the confirmed position
// of slot reached target. It returns an error wrapping errStreamEnded when
// done delivers first (nil done never does), and an error after two
// minutes.
func (f *streamFixture) waitConfirmed(ctx context.Context, slot, target string, done <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var caught bool
		if err := f.srcConn.QueryRow(ctx, "SELECT coalesce(bool_and(confirmed_flush_lsn >= $1::pg_lsn), false) FROM pg_replication_slots WHERE slot_name = $2",
			target, slot).Scan(&caught); err != nil {
			return err
		}
		if caught {
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("%w: %v", errStreamEnded, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s did not confirm %s in two minutes", slot, target)
		}
	}
}

// serverTicks returns the CPU clock ticks (user + system) the stream's
// destination backends and its walsender have used so far.
func (f *streamFixture) serverTicks(tb testing.TB, ctx context.Context) (backends, walsender int64) {
	tb.Helper()
	return splitTicks(tb, ctx, f.srcConn, `SELECT pid, backend_type = 'walsender' FROM pg_stat_activity
		WHERE application_name = $1 AND (backend_type = 'walsender' OR datname LIKE 'dst\_%')`, taskAppName)
}

// splitTicks sums the CPU clock ticks of the processes sql names, rows of
// (pid, is a walsender): the others' and the walsenders'.
func splitTicks(tb testing.TB, ctx context.Context, conn *pgx.Conn, sql string, args ...any) (others, walsender int64) {
	tb.Helper()
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int
		var sender bool
		if err := rows.Scan(&pid, &sender); err != nil {
			tb.Fatal(err)
		}
		ticks := procTicks(pid)
		if sender {
			walsender += ticks
		} else {
			others += ticks
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return others, walsender
}

// procTicks returns utime + stime of process pid from /proc, 0 when it is
// not readable.
func procTicks(pid int) int64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it are
	// counted from its closing parenthesis.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return u + st
}
