package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/wire"
)

// TestProxyStatementNamesAreNotReachable: a client cannot run another
// client's shared prepared statement by guessing its proxy-wide name.
func TestProxyStatementNamesAreNotReachable(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	a := connect(t, p.AppURL("app"))
	var v int
	// pgx prepares this as a named statement: the proxy gives it sg_1.
	if err := a.QueryRow(ctx, "SELECT 41 + $1::int", 1).Scan(&v); err != nil || v != 42 {
		t.Fatalf("a: %d %v", v, err)
	}
	b := connect(t, p.AppURL("app"))
	for _, name := range []string{"sg_1", "sg_2"} {
		res := b.PgConn().ExecPrepared(ctx, name, [][]byte{[]byte("1")}, nil, nil).Read()
		if got := sqlstate(res.Err); got != wire.InvalidSQLStatementName {
			t.Fatalf("Bind of %s: SQLSTATE %q (%v), want 26000", name, got, res.Err)
		}
		if _, err := b.PgConn().Prepare(ctx, "", "SELECT 1", nil); err != nil {
			t.Fatal(err) // the connection stays usable
		}
	}
}

// TestPreparedFetchDescribesOwnCursor: a prepared FETCH is described by
// the cursor of the client that prepares it, never by the cursor another
// client had when the server first parsed the same text; and preparing it
// again after its cursor closed does not crash the server (PostgreSQL 15
// dereferences the missing cursor when it describes a statement parsed
// while the cursor existed).
func TestPreparedFetchDescribesOwnCursor(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	describe := func(conn *pgconn.PgConn, name string) []string {
		t.Helper()
		sd, err := conn.Prepare(ctx, name, "FETCH 1 FROM c", nil)
		if err != nil {
			t.Fatalf("prepare %s: %v", name, err)
		}
		var cols []string
		for _, f := range sd.Fields {
			cols = append(cols, f.Name)
		}
		return cols
	}
	run := func(conn *pgconn.PgConn, sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	a := connect(t, p.AppURL("app")).PgConn()
	b := connect(t, p.AppURL("app")).PgConn()
	run(a, "BEGIN")
	run(a, "DECLARE c CURSOR FOR SELECT 1 AS secret_of_a")
	if got := describe(a, "fa"); len(got) != 1 || got[0] != "secret_of_a" {
		t.Fatalf("a's FETCH describes %v", got)
	}
	run(a, "COMMIT")
	run(b, "BEGIN")
	run(b, "DECLARE c CURSOR FOR SELECT 2 AS mine, 3 AS also_mine")
	if got := describe(b, "fb"); len(got) != 2 || got[0] != "mine" {
		t.Fatalf("b's FETCH describes %v, want b's cursor (mine, also_mine)", got)
	}
	run(b, "COMMIT")
	// The cursor is gone: PostgreSQL describes the FETCH as NoData.
	for _, conn := range []*pgconn.PgConn{a, b} {
		if got := describe(conn, "again"); len(got) != 0 {
			t.Fatalf("FETCH without its cursor describes %v", got)
		}
		if err := conn.Exec(ctx, "SELECT 1").Close(); err != nil {
			t.Fatalf("the server did not survive: %v", err)
		}
	}
}
