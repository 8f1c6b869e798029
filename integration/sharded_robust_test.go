package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// twoShards starts a cluster with databases shard0 and shard1, each with
// table accounts sharded by id, and a proxy of database "app" over them
// in pool mode mode with one server per pool, so that a test's statements
// reuse the same server connections. setup runs on the listener before it
// serves.
func twoShards(t *testing.T, mode string, setup ...func(*frontend.Listener)) (*pgtest.Cluster, *proxy) {
	t.Helper()
	return twoShardsSized(t, mode, 1, setup...)
}

// twoShardsSized is twoShards with size servers per shard.
func twoShardsSized(t *testing.T, mode string, size int, setup ...func(*frontend.Listener)) (*pgtest.Cluster, *proxy) {
	t.Helper()
	cl := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "10"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var shards strings.Builder
	for i := range 2 {
		db := fmt.Sprintf("shard%d", i)
		if err := cl.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := cl.Exec(ctx, db, "CREATE TABLE accounts (id bigint PRIMARY KEY, email text)"); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&shards, "      - { host: %s, port: %d, database: %s }\n", cl.Host, cl.Port, db)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
pool: { mode: %s, size: %d, checkout_timeout: 2s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
%s    sharded_tables:
      - { table: accounts, column: id, type: bigint }
`, mode, size, t.TempDir(), appPassword, cl.User, cl.Password, shards.String())), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cl, startProxyConfig(t, cfg, setup...)
}

// twoShardsBesidePlain is twoShards with, on the same cluster, the
// database "plain": one PostgreSQL database with the same accounts table,
// for a test to compare answers against (as role app, which it creates).
// It returns the plain database's URL.
func twoShardsBesidePlain(t *testing.T, ctx context.Context) (*pgtest.Cluster, *proxy, string) {
	t.Helper()
	return twoShardsBesidePlainIn(t, ctx, "transaction", 1)
}

// twoShardsBesidePlainIn is twoShardsBesidePlain with the pool mode mode
// and size servers per shard.
func twoShardsBesidePlainIn(t *testing.T, ctx context.Context, mode string, size int) (*pgtest.Cluster, *proxy, string) {
	t.Helper()
	cl, p := twoShardsSized(t, mode, size)
	if err := cl.Exec(ctx, "postgres", fmt.Sprintf("CREATE ROLE app LOGIN PASSWORD '%s'", appPassword)); err != nil {
		t.Fatal(err)
	}
	if err := cl.CreateDatabase(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, "plain", "CREATE TABLE accounts (id bigint PRIMARY KEY, email text)"); err != nil {
		t.Fatal(err)
	}
	return cl, p, cl.DSN("plain")
}

// TestShardPreparedAfterError runs extended-protocol statements that fail
// on the shards and runs them again: a statement whose Execute failed is
// still prepared on its shard (parsing it again would fail with 42P05),
// and one whose Parse every shard rejected is not (binding it without a
// Parse would fail with 26000 once the schema is fixed).
func TestShardPreparedAfterError(t *testing.T) {
	cl, p := twoShards(t, "transaction")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := connect(t, p.AppURL("app"))
	if _, err := conn.Exec(ctx, "INSERT INTO accounts (id) VALUES (1), (2), (3), (4)", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) error {
		_, err := conn.Exec(ctx, sql, append([]any{pgx.QueryExecModeExec}, args...)...)
		return err
	}
	for _, sql := range []string{
		"SELECT 1 / (id - id) FROM accounts WHERE id = $1", // one shard
		"SELECT 1 / (id - id) FROM accounts WHERE id > $1", // both
	} {
		for try := range 2 {
			if err := exec(sql, 1); sqlstate(err) != wire.DivisionByZero {
				t.Fatalf("%s, execution %d: %v, want 22012", sql, try+1, err)
			}
		}
	}

	if err := exec("SELECT nope FROM accounts WHERE id > $1", 0); sqlstate(err) != wire.UndefinedColumn {
		t.Fatalf("a column no shard has: %v, want 42703", err)
	}
	for _, db := range []string{"shard0", "shard1"} {
		if err := cl.Exec(ctx, db, "ALTER TABLE accounts ADD COLUMN nope int"); err != nil {
			t.Fatal(err)
		}
	}
	if err := exec("SELECT nope FROM accounts WHERE id > $1", 0); err != nil {
		t.Fatalf("the same statement once every shard has the column: %v", err)
	}
}

// TestShardReloadClosesCatalog reloads the configuration of a sharded
// database several times, each time running a statement whose routing
// asks shard 0's catalog (an INSERT without a column list): the catalog
// connections of the replaced states must close, and the last one at
// Shutdown.
func TestShardReloadClosesCatalog(t *testing.T) {
	cl, p := twoShards(t, "transaction")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	watch := connect(t, cl.DSN("postgres"))
	backends := func() int {
		var n int
		if err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'shard0' AND backend_type = 'client backend'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	conn := connect(t, p.AppURL("app"))
	for i := range 4 {
		if i > 0 {
			if err := p.Listener.Reconfigure(p.Config); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO accounts VALUES (%d, 'x')", 10+i), pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Fatal(err)
		}
	}
	// shard 0's pool server and the current state's catalog.
	eventually(t, 10*time.Second, "the replaced states' catalog connections to close", func() bool { return backends() <= 2 })
	conn.Close(ctx)
	if err := p.Listener.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	p.Listener.State().Pools.Close()
	eventually(t, 10*time.Second, "every connection to shard 0 to close at shutdown", func() bool { return backends() == 0 })
}

// TestShardSessionModeLogin logs a session-pooled client in to a sharded
// database: the server it attaches at login (to validate its startup
// parameters; it is the first client) is shard 0's, outside the client's
// shards, and must go back to the pool. With one server per pool, the
// client's own statements on shard 0 need it, and so do later clients.
func TestShardSessionModeLogin(t *testing.T) {
	_, p := twoShards(t, "session")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 2 {
		conn := connect(t, p.AppURL("app"))
		for id := 1; id <= 4; id++ { // both shards
			if _, err := conn.Exec(ctx, "SELECT * FROM accounts WHERE id = $1", pgx.QueryExecModeSimpleProtocol, id); err != nil {
				t.Fatalf("id %d: %v", id, err)
			}
		}
		conn.Close(ctx)
		eventually(t, 10*time.Second, "the client's servers to go back", func() bool {
			for _, pl := range p.Listener.State().Pools.Pools() {
				if pl.Snapshot().Active > 0 {
					return false
				}
			}
			return true
		})
	}
}

// TestShardSuspendedPortal fetches a one-shard portal in chunks (Execute
// with a row limit inside a transaction, as JDBC does with a fetch size):
// each Execute continues where the last one stopped, across Syncs, until
// the rows end.
func TestShardSuspendedPortal(t *testing.T) {
	_, p := twoShards(t, "transaction")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := pgconn.Connect(ctx, p.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Exec(ctx, "INSERT INTO accounts (id) VALUES (1)").Close(); err != nil {
		t.Fatal(err)
	}
	pc.Close(ctx)
	answer := dialFrontend(t, p.AppURL("app")).answer
	answer(&pgproto3.Query{String: "BEGIN"})
	_, rows := answer(&pgproto3.Parse{Name: "s", Query: "SELECT g FROM generate_series(1, 5) g, accounts WHERE id = $1"},
		&pgproto3.Bind{DestinationPortal: "c", PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Execute{Portal: "c", MaxRows: 2}, &pgproto3.Sync{})
	if fmt.Sprint(rows) != "[1 2]" {
		t.Fatalf("first chunk %v, want [1 2]", rows)
	}
	types, rows := answer(&pgproto3.Execute{Portal: "c", MaxRows: 2}, &pgproto3.Sync{})
	if want := "DataRow DataRow PortalSuspended ReadyForQuery "; types != want || fmt.Sprint(rows) != "[3 4]" {
		t.Fatalf("second chunk: %s%v, want %s[3 4]", types, rows, want)
	}
	types, rows = answer(&pgproto3.Execute{Portal: "c", MaxRows: 2}, &pgproto3.Sync{})
	if want := "DataRow CommandComplete ReadyForQuery "; types != want || fmt.Sprint(rows) != "[5]" {
		t.Fatalf("last chunk: %s%v, want %s[5]", types, rows, want)
	}
	answer(&pgproto3.Query{String: "ROLLBACK"})
}
