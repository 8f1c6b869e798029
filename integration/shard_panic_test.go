package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// TestShardPanicReleasesServers panics a sharded client's goroutine while
// it holds a server of each shard (in a two-phase commit, through the
// listener's test hook). The client must be closed with XX000 and its
// servers closed and given back: with one server per pool, the next
// client still gets both shards.
func TestShardPanicReleasesServers(t *testing.T) {
	var panicking atomic.Bool
	panicking.Store(true)
	cl, p := twoShards(t, "transaction", func(l *frontend.Listener) {
		l.TwoPhaseHookForTest = func(stage string) {
			if stage == "prepared" && panicking.CompareAndSwap(true, false) {
				panic("test: a panic in the middle of a two-phase commit")
			}
		}
	})
	t.Cleanup(func() { rollbackPrepared(t, cl, "shard0", "shard1") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn := connect(t, p.AppURL("app"))
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{1, 2, 3, 4} { // both shards
		if _, err := conn.Exec(ctx, "INSERT INTO accounts (id) VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
	}
	_, err := conn.Exec(ctx, "COMMIT")
	if sqlstate(err) != wire.InternalError {
		t.Fatalf("COMMIT with a panic: %v, want XX000", err)
	}
	if panicking.Load() {
		t.Fatal("the commit did not reach the hook: its shards were not both joined")
	}

	// Both pools must lend their only server again.
	other := connect(t, p.AppURL("app"))
	var n int
	if err := other.QueryRow(ctx, "SELECT count(*) FROM accounts", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("a query of both shards after the panic: %v", err)
	}
	st := p.Listener.DatabaseStatus("app")
	if st.Holders != 0 {
		t.Errorf("%d clients hold the database's gate after the panicked client left", st.Holders)
	}
}

// rollbackPrepared rolls back the prepared transactions left on dbs.
func rollbackPrepared(t testing.TB, cl *pgtest.Cluster, dbs ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, db := range dbs {
		conn, err := pgx.Connect(ctx, cl.DSN(db))
		if err != nil {
			t.Errorf("%s: %v", db, err)
			continue
		}
		rows, _ := conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
		gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("%s: %v", db, err)
		}
		for _, gid := range gids {
			if _, err := conn.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'"); err != nil {
				t.Errorf("%s: %v", db, err)
			}
		}
		conn.Close(ctx)
	}
}
