package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestShardCursorParksForOtherStatements: statements that run on the
// shards between two FETCHes of a cursor over both shards do not make the
// shards compute the rest of the cursor. The proxy parks the cursor's
// merge instead (frontend.parkCursorStream): it reads the batch each
// shard is sending, runs the statement, and the next FETCH goes on where
// the cursor was. So, as on one PostgreSQL:
//   - a row that fails further on (1000 / (id - 1500)) fails the FETCH that
//     reaches it, not the UPDATE or SELECT in between (which would answer
//     25P02 had the shards' cursors been read to their end);
//   - a volatile function in another cursor's select list (tick(), which
//     calls nextval) runs for the rows fetched plus at most the shards'
//     batches under way, not for every row.
//
// Both the simple and the extended protocol run the same steps against
// one plain PostgreSQL holding the same rows and through the proxy.
func TestShardCursorParksForOtherStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 2000
	cl, p, plain := tickRows(t, ctx, n)
	steps := []struct {
		q    string
		rows int
		end  string
	}{
		{"BEGIN", 0, "BEGIN"},
		{"DECLARE d CURSOR FOR SELECT id, 1000 / (id - 1500) AS q FROM accounts ORDER BY id", 0, "DECLARE CURSOR"},
		{"DECLARE e CURSOR FOR SELECT id, tick() FROM accounts ORDER BY id", 0, "DECLARE CURSOR"},
		{"FETCH 5 FROM d", 5, "FETCH 5"},
		{"FETCH 3 FROM e", 3, "FETCH 3"},
		{"UPDATE accounts SET email = 'u' WHERE id = 7", 0, "UPDATE 1"},
		{"SELECT count(*) FROM accounts", 1, "SELECT 1"},
		{"FETCH 10 FROM d", 10, "FETCH 10"},
		{"FETCH 2 FROM e", 2, "FETCH 2"},
		{"SELECT id FROM accounts WHERE email = 'u'", 1, "SELECT 1"},
		{"SAVEPOINT sp", 0, "SAVEPOINT"},
		{"FETCH 1 FROM d", 1, "FETCH 1"},
		{"ROLLBACK TO SAVEPOINT sp", 0, "ROLLBACK"},
		{"FETCH 2000 FROM d", 0, "E22012"},
		{"ROLLBACK", 0, "ROLLBACK"},
	}
	run := func(name string, url string, extended bool) {
		t.Helper()
		c := dialStream(t, url)
		for _, s := range steps {
			var rows int
			var end string
			if extended {
				rows, end = c.chunk(&pgproto3.Parse{Query: s.q}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{})
			} else {
				rows, end = c.chunk(&pgproto3.Query{String: s.q})
			}
			if rows != s.rows || end != s.end {
				t.Fatalf("%s: %s: %d rows, %q; want %d rows, %q", name, s.q, rows, end, s.rows, s.end)
			}
		}
	}
	for _, extended := range []bool{false, true} {
		proto := "simple"
		if extended {
			proto = "extended"
		}
		for _, db := range []string{"plain", "shard0", "shard1"} {
			if err := cl.Exec(ctx, db, "SELECT setval('s', 1, false)"); err != nil {
				t.Fatal(err)
			}
		}
		run(proto+": plain PostgreSQL", plain, extended)
		run(proto+": the proxy", p.AppURL("app"), extended)
		for _, db := range []string{"plain", "shard0", "shard1"} {
			last, called := ticks(t, ctx, cl, db)
			// Plain: the 5 rows fetched. Each shard: its batches of 1, 2
			// and 4 rows at most, which the merge's look-ahead may start.
			limit := int64(5)
			if db != "plain" {
				limit = 7
			}
			if !called || last > limit {
				t.Errorf("%s: %s: nextval() ran %d times (called %v) for 5 rows fetched of %d; want 1 to %d", proto, db, last, called, n, limit)
			}
		}
	}
}
