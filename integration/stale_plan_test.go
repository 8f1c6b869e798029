package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/wire"
)

// TestStalePlanHeals: after ALTER TABLE changes a shared prepared
// statement's result type, a server that reports "cached plan must not
// change result type" deallocates its statements at checkin, so each
// server fails at most once and every later execution works — instead of
// every client failing until the server connections are recycled.
func TestStalePlanHeals(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	a := connect(t, p.AppURL("app"))
	mustExec(t, a, "CREATE TABLE t (id int PRIMARY KEY, v text)")
	mustExec(t, a, "INSERT INTO t VALUES (1, 'x')")
	query := func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, "SELECT * FROM t WHERE id = $1", 1)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	}
	if err := query(a); err != nil {
		t.Fatal(err)
	}
	mustExec(t, a, "ALTER TABLE t ADD COLUMN extra int")
	b := connect(t, p.AppURL("app"))
	failures := 0
	for i := 0; i < 10; i++ {
		if err := query(b); err != nil {
			if sqlstate(err) != wire.FeatureNotSupported {
				t.Fatalf("unexpected error: %v", err)
			}
			failures++
		}
	}
	// One failure per server connection at most (pool size 2).
	if failures > 2 {
		t.Fatalf("%d failures after ALTER TABLE; the stale plans did not heal", failures)
	}
	if err := query(b); err != nil {
		t.Fatalf("still failing: %v", err)
	}
}
