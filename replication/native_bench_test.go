package replication

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkStreamApplyNative is BenchmarkStreamApply's backlog applied by
// PostgreSQL's own logical replication instead, on the same server: a
// subscription in a database of its own (one destination, no sharding) to
// the task's publication, from a slot of its own. It reports the same
// metrics: the apply worker's CPU as backend-s/100k, its walsender's as
// walsender-s/100k; proxy-s/100k is only the test process's polling.
func BenchmarkStreamApplyNative(b *testing.B) {
	l := newAccountsLoad(b)
	n := newNativeSub(b, l)
	l.bench(b, n.catchUp())
	n.compare(b)
}

// BenchmarkStreamApplyTPCBNative is BenchmarkStreamApplyNative with
// BenchmarkStreamApplyTPCB's backlog.
func BenchmarkStreamApplyTPCBNative(b *testing.B) {
	l := newTPCBLoad(b)
	n := newNativeSub(b, l)
	l.bench(b, n.catchUp())
	n.compare(b)
}

// nativeSlot is the name of the native subscription and of its slot.
const nativeSlot = "bench_native"

// nativeSub is a native subscription of database "native" on the
// fixture's server to the task's publication of source shard 0, created
// disabled, with copy_data = false after the load's tables were copied
// into it, and from a slot created beforehand (as bench/reshard.sh does:
// on one server CREATE SUBSCRIPTION cannot create its slot).
type nativeSub struct {
	l    streamLoad
	conn *pgx.Conn // to database native
}

func newNativeSub(tb testing.TB, l streamLoad) *nativeSub {
	tb.Helper()
	ctx := tb.Context()
	f := l.f
	if err := f.c.CreateDatabase(ctx, "native"); err != nil {
		tb.Fatal(err)
	}
	n := &nativeSub{l: l, conn: fixtureConnect(tb, f.c.DSN("native"))}
	f.exec(tb, n.conn, l.schema)
	for _, table := range l.tables {
		n.copyTable(tb, table)
	}
	// The launcher starts a subscription's worker at most once per
	// wal_retrieve_retry_interval (5 s by default), which would delay the
	// start of every iteration after the first.
	f.exec(tb, f.srcConn, "ALTER SYSTEM SET wal_retrieve_retry_interval = '10ms'")
	f.exec(tb, f.srcConn, "SELECT pg_reload_conf()")
	f.exec(tb, f.srcConn, fmt.Sprintf("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", quoteLiteral(nativeSlot)))
	f.exec(tb, n.conn, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION %s PUBLICATION %s WITH (copy_data = false, create_slot = false, slot_name = %s, enabled = false)",
		nativeSlot, quoteLiteral(f.c.DSN("src_0")), quoteIdent(f.task.publication(0)), quoteLiteral(nativeSlot)))
	tb.Cleanup(func() {
		ctx := context.Background()
		n.conn.Exec(ctx, "ALTER SUBSCRIPTION "+nativeSlot+" DISABLE")
		n.conn.Exec(ctx, "ALTER SUBSCRIPTION "+nativeSlot+" SET (slot_name = NONE)")
		n.conn.Exec(ctx, "DROP SUBSCRIPTION "+nativeSlot)
	})
	return n
}

// copyTable copies table's rows from the source into database native.
func (n *nativeSub) copyTable(tb testing.TB, table string) {
	tb.Helper()
	ctx := tb.Context()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := n.l.f.srcConn.PgConn().CopyTo(ctx, pw, "COPY "+quoteIdent(table)+" TO STDOUT (FORMAT binary)")
		pw.CloseWithError(err)
		done <- err
	}()
	_, err := n.conn.PgConn().CopyFrom(ctx, pr, "COPY "+quoteIdent(table)+" FROM STDIN (FORMAT binary)")
	pr.CloseWithError(err)
	if cerr := <-done; err == nil {
		err = cerr
	}
	if err != nil {
		tb.Fatalf("copy %s into native: %v", table, err)
	}
}

func (n *nativeSub) catchUp() catchUp {
	return catchUp{run: n.run, ticks: n.ticks}
}

// run enables the subscription until its slot confirmed the source's WAL
// position at the start, calls caughtUp, and disables it again. The apply
// worker commits asynchronously (the subscription's default
// synchronous_commit = off) and confirms what the WAL writer flushed, so
// the time measured may run up to a few hundred ms past its last apply.
func (n *nativeSub) run(tb testing.TB, caughtUp func(context.Context)) {
	tb.Helper()
	ctx := tb.Context()
	f := n.l.f
	target := f.walPosition(tb)
	f.exec(tb, n.conn, "ALTER SUBSCRIPTION "+nativeSlot+" ENABLE")
	if err := f.waitConfirmed(ctx, nativeSlot, target, nil); err != nil {
		tb.Fatal(err)
	}
	caughtUp(ctx)
	f.exec(tb, n.conn, "ALTER SUBSCRIPTION "+nativeSlot+" DISABLE")
	// The next iteration's worker can only start once this one's
	// walsender released the slot.
	deadline := time.Now().Add(time.Minute)
	for {
		var active bool
		if err := f.srcConn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", nativeSlot).Scan(&active); err != nil {
			tb.Fatal(err)
		}
		if !active {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("the native slot stayed active a minute after DISABLE")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ticks returns the CPU clock ticks of the subscription's apply worker and
// of its walsender so far.
func (n *nativeSub) ticks(tb testing.TB, ctx context.Context) (worker, walsender int64) {
	tb.Helper()
	return splitTicks(tb, ctx, n.l.f.srcConn, `SELECT pid, false FROM pg_stat_subscription WHERE subname = $1 AND relid IS NULL AND pid IS NOT NULL
		UNION ALL SELECT pid, true FROM pg_stat_replication WHERE application_name = $1`, nativeSlot)
}

// compare checks that database native holds the source's rows of the
// load's tables.
func (n *nativeSub) compare(tb testing.TB) {
	tb.Helper()
	for i, table := range n.l.tables {
		q := fmt.Sprintf("SELECT count(*), coalesce(md5(string_agg(t::text, ',' ORDER BY %s)), '') FROM %s t",
			quoteIdent(n.l.keys[i]), quoteIdent(table))
		var want, got string
		for _, c := range []struct {
			conn *pgx.Conn
			out  *string
		}{{n.l.f.srcConn, &want}, {n.conn, &got}} {
			var count int64
			var sum string
			if err := c.conn.QueryRow(tb.Context(), q).Scan(&count, &sum); err != nil {
				tb.Fatal(err)
			}
			*c.out = fmt.Sprint(count, " ", sum)
		}
		if got != want {
			tb.Errorf("%s: native holds %s, the source %s", table, got, want)
		}
	}
}
