package integration

import (
	"context"
	"testing"

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
