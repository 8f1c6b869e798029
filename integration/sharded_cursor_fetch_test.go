package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestShardCursorFetchesAsNeeded: a cursor over both shards computes its
// rows as FETCH asks for them, as PostgreSQL's own cursor does, because
// each shard runs the query as a cursor of its own (executor.ShardCursor):
//   - an error in a row comes at the FETCH that reaches the row, not at
//     DECLARE and not at an earlier FETCH, where one PostgreSQL raises it
//     (the same statements on a plain database say where);
//   - a cursor closed after a few rows has not computed the others: a
//     nextval() in its select list (tick()) advanced each shard's sequence by a few
//     values, not by every row the shard holds.
func TestShardCursorFetchesAsNeeded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 2000
	cl, p, plain := tickRows(t, ctx, n)
	c := dialStream(t, p.AppURL("app"))
	run := func(name string, c *streamConn) {
		t.Helper()
		steps := []struct {
			q    string
			rows int
			end  string
		}{
			{"BEGIN", 0, "BEGIN"},
			{"DECLARE d CURSOR FOR SELECT id, 1000 / (id - 40) AS q FROM accounts ORDER BY id", 0, "DECLARE CURSOR"},
			{"FETCH 2 FROM d", 2, "FETCH 2"},
			{"FETCH 10 FROM d", 10, "FETCH 10"},
			{"FETCH 100 FROM d", 0, "E22012"},
			{"ROLLBACK", 0, "ROLLBACK"},
			{"BEGIN", 0, "BEGIN"},
			{"DECLARE e CURSOR FOR SELECT id, tick() FROM accounts ORDER BY id", 0, "DECLARE CURSOR"},
			{"FETCH 3 FROM e", 3, "FETCH 3"},
			{"CLOSE e", 0, "CLOSE CURSOR"},
			{"COMMIT", 0, "COMMIT"},
		}
		for _, s := range steps {
			rows, end := c.chunk(&pgproto3.Query{String: s.q})
			if rows != s.rows || end != s.end {
				t.Fatalf("%s: %s: %d rows, %q; want %d rows, %q", name, s.q, rows, end, s.rows, s.end)
			}
		}
	}
	run("plain PostgreSQL", dialStream(t, plain))
	run("the proxy", c)
	for _, db := range []string{"plain", "shard0", "shard1"} {
		// Plain: the 3 rows fetched. Each shard: the rows of its
		// batches, 1 then 2, plus the merge's look-ahead.
		limit := int64(3)
		if db != "plain" {
			limit = 4
		}
		if last, called := ticks(t, ctx, cl, db); !called || last > limit {
			t.Errorf("%s: nextval() ran %d times (called %v) for a cursor closed after 3 of %d rows; want 1 to %d", db, last, called, n, limit)
		}
	}
}

// tickRows starts two shards beside a plain database and puts n rows in
// accounts on both sides (ANALYZEd, so that a cursor's plan uses the
// index), with tick(), a volatile function that counts its calls in
// sequence s of each database (ticks reads it). The router refuses
// nextval() over several shards; a function of the application's own
// that calls it is no business of its.
func tickRows(t *testing.T, ctx context.Context, n int) (*pgtest.Cluster, *proxy, string) {
	t.Helper()
	cl, p, plain := twoShardsBesidePlain(t, ctx)
	fill := fmt.Sprintf("INSERT INTO accounts SELECT g, 'e' || g FROM generate_series(1, %d) g", n)
	for _, db := range []string{"shard0", "shard1", "plain"} {
		if err := cl.Exec(ctx, db, "CREATE SEQUENCE s; CREATE FUNCTION tick() RETURNS bigint LANGUAGE sql VOLATILE AS $$SELECT nextval('s')$$"); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.Exec(ctx, "plain", fill); err != nil {
		t.Fatal(err)
	}
	if _, end := dialStream(t, p.AppURL("app")).chunk(&pgproto3.Query{String: fill}); end != fmt.Sprintf("INSERT 0 %d", n) {
		t.Fatalf("insert through the proxy: %q", end)
	}
	for _, db := range []string{"shard0", "shard1", "plain"} {
		if err := cl.Exec(ctx, db, "ANALYZE accounts"); err != nil {
			t.Fatal(err)
		}
	}
	return cl, p, plain
}

// ticks reads how often tick() ran in database db: sequence s's last
// value and whether it was called at all.
func ticks(t *testing.T, ctx context.Context, cl *pgtest.Cluster, db string) (last int64, called bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, cl.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT last_value, is_called FROM s").Scan(&last, &called); err != nil {
		t.Fatal(err)
	}
	return last, called
}
