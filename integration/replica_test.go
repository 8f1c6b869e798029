package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// withReplica starts a cluster holding dbs (cluster) and a streaming
// replica of it, stopped with the test.
func withReplica(t *testing.T, dbs ...string) (primary, replica *pgtest.Cluster) {
	t.Helper()
	primary = cluster(t, dbs...)
	replica, err := primary.StartReplica(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { replica.Stop() })
	return primary, replica
}

// replicaConfig is a single-shard database "app" on primary with one
// streaming replica, with fast health checks.
func replicaConfig(host string, primary, replica int, user, password string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 5, checkout_timeout: 2s, connect_timeout: 2s }
load_balancing: { health_check_interval: 200ms, health_check_timeout: 1s, ban_time: 500ms }
limits: { client_login_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
      - { host: %s, port: %d, database: app, replicas: [{ host: %s, port: %d }] }
`, appPassword, user, password, host, primary, host, replica)
}

// TestReplicaReadWriteSplit runs a proxy in front of a primary with a real
// streaming replica: reads outside transactions go to the replica, writes
// and explicit transactions to the primary; a stopped replica is banned
// and reads fall back to the primary without client errors; a restarted
// replica serves reads again after a health check.
func TestReplicaReadWriteSplit(t *testing.T) {
	ctx := context.Background()
	primary, replica := withReplica(t, "app")
	o := startOperated(t, replicaConfig(primary.Host, primary.Port, replica.Port, primary.User, primary.Password))

	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(o.AppURL("app"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			app, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close(ctx)
			inRecovery := func() bool {
				t.Helper()
				var r bool
				if err := app.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
					t.Fatalf("read: %v", err)
				}
				return r
			}
			table := fmt.Sprintf("t_%d", i)
			if _, err := app.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (id bigserial PRIMARY KEY, v text)"); err != nil {
				t.Fatal(err)
			}
			if _, err := app.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ('a'), ('b')"); err != nil {
				t.Fatal(err)
			}
			// The write landed on the primary.
			direct := connect(t, primary.DSN("app"))
			var n int
			if err := direct.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 2 {
				t.Fatalf("primary has %d rows (%v), want 2", n, err)
			}
			// Reads outside transactions run on the replica.
			for range 5 {
				if !inRecovery() {
					t.Fatal("a read outside a transaction ran on the primary")
				}
			}
			eventually(t, 10*time.Second, "the rows to reach the replica through the proxy", func() bool {
				var n int
				err := app.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n)
				return err == nil && n == 2
			})
			// Write functions and locking reads go to the primary.
			var id int64
			if err := app.QueryRow(ctx, "SELECT nextval('"+table+"_id_seq')").Scan(&id); err != nil {
				t.Fatalf("nextval: %v", err)
			}
			if _, err := app.Exec(ctx, "SELECT * FROM "+table+" FOR UPDATE"); err != nil {
				t.Fatalf("SELECT FOR UPDATE: %v", err)
			}
			// Everything inside BEGIN runs on the primary.
			tx, err := app.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var r bool
			if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil || r {
				t.Fatalf("read inside BEGIN: in recovery %v (%v), want the primary", r, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (v) VALUES ('c')"); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			// BEGIN READ ONLY runs on the replica.
			tx, err = app.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil || !r {
				t.Fatalf("read inside BEGIN READ ONLY: in recovery %v (%v), want the replica", r, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}

	app := connect(t, o.AppURL("app"))
	inRecovery := func() bool {
		t.Helper()
		var r bool
		if err := app.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
			t.Fatalf("read: %v", err)
		}
		return r
	}
	acfg, err := pgx.ParseConfig(o.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	acfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	adm, err := pgx.ConnectConfig(ctx, acfg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close(ctx)
	banned := func() string {
		t.Helper()
		tb, err := adminPgx(adm, "SHOW POOLS")
		if err != nil {
			t.Fatal(err)
		}
		return tb.get(t, map[string]string{"database": "app", "user": "app", "role": "replica"}, "banned")
	}
	healthy := func() string {
		t.Helper()
		tb, err := adminPgx(adm, "SHOW SHARDS")
		if err != nil {
			t.Fatal(err)
		}
		return tb.get(t, map[string]string{"database": "app", "role": "replica"}, "healthy")
	}
	if !inRecovery() {
		t.Fatal("a read ran on the primary")
	}
	if b := banned(); b != "f" {
		t.Fatalf("replica banned = %s before it stopped", b)
	}

	// Stop the replica: reads keep working, on the primary.
	if err := replica.StopKeep(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if inRecovery() {
			t.Fatalf("read %d ran on the stopped replica", i)
		}
	}
	if b := banned(); b != "t" {
		t.Fatalf("replica banned = %s after it stopped", b)
	}
	if h := healthy(); h != "f" {
		t.Fatalf("SHOW SHARDS healthy = %s for the stopped replica", h)
	}
	// Restart it: after a health check, reads go back to it.
	if err := replica.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "reads to reach the restarted replica", inRecovery)
	if b := banned(); b != "f" {
		t.Fatalf("replica banned = %s after it came back", b)
	}
}

// TestReplicaSharded checks read routing on a sharded database: reads
// outside transactions go to each shard's replica, transactions to the
// primaries, and a stopped replica costs no client errors.
func TestReplicaSharded(t *testing.T) {
	ctx := context.Background()
	primary, replica := withReplica(t, "shard0", "shard1")
	p := startProxy(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 2s, connect_timeout: 2s }
load_balancing: { strategy: round_robin, health_check_interval: 200ms, health_check_timeout: 1s, ban_time: 500ms }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
      - { host: %[5]s, port: %[6]d, database: shard0, replicas: [{ host: %[5]s, port: %[7]d }] }
      - { host: %[5]s, port: %[6]d, database: shard1, replicas: [{ host: %[5]s, port: %[7]d }] }
    sharded_tables:
      - { table: items, column: id, type: bigint }
`, t.TempDir(), appPassword, primary.User, primary.Password, primary.Host, primary.Port, replica.Port))
	app := connect(t, p.AppURL("app"))
	simple := pgx.QueryExecModeSimpleProtocol
	if _, err := app.Exec(ctx, "CREATE TABLE items (id bigint PRIMARY KEY, v text)", simple); err != nil {
		t.Fatal(err)
	}
	for id := range 10 {
		if _, err := app.Exec(ctx, fmt.Sprintf("INSERT INTO items VALUES (%d, 'x')", id), simple); err != nil {
			t.Fatal(err)
		}
	}
	inRecovery := func(sql string) bool {
		t.Helper()
		var r bool
		if err := app.QueryRow(ctx, sql, simple).Scan(&r); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return r
	}
	for range 4 {
		if !inRecovery("SELECT pg_is_in_recovery()") || !inRecovery("SELECT pg_is_in_recovery() FROM items WHERE id = 3") {
			t.Fatal("a read outside a transaction ran on a primary")
		}
	}
	// The extended protocol routes reads to replicas too, in every shape a
	// driver sends: the first message that takes a shard's server may be a
	// Parse the shard validates or a Describe it answers (pgx's exec and
	// describe modes, JDBC and node-postgres send Parse, Bind, Describe,
	// Execute, Sync), and a read routed to another shard than the one that
	// validated it stays on replicas. Each mode on a new connection, so
	// that its first Parse is validated.
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		c := connectConfig(t, p.AppURL("app"), mode, nil)
		for id := range 4 {
			var r bool
			if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery() FROM items WHERE id = $1", id).Scan(&r); err != nil || !r {
				t.Fatalf("extended-protocol read (%v), id %d: in recovery %v (%v), want a replica", mode, id, r, err)
			}
		}
	}
	eventually(t, 10*time.Second, "all rows on the replicas through the proxy", func() bool {
		var n int
		err := app.QueryRow(ctx, "SELECT count(*) FROM items", simple).Scan(&n)
		return err == nil && n == 10
	})
	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r bool
	if err := tx.QueryRow(ctx, "SELECT pg_is_in_recovery() FROM items WHERE id = 3", simple).Scan(&r); err != nil || r {
		t.Fatalf("read inside BEGIN: in recovery %v (%v), want a primary", r, err)
	}
	if _, err := tx.Exec(ctx, "UPDATE items SET v = 'y' WHERE id = 3", simple); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	if err := replica.StopKeep(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if inRecovery(fmt.Sprintf("SELECT pg_is_in_recovery() FROM items WHERE id = %d", i)) {
			t.Fatalf("read %d ran on the stopped replica", i)
		}
	}
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM items", simple).Scan(&n); err != nil || n != 10 {
		t.Fatalf("count with the replica stopped: %d (%v)", n, err)
	}
	if err := replica.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "reads to reach the restarted replica", func() bool {
		return inRecovery("SELECT pg_is_in_recovery() FROM items WHERE id = 3")
	})
}

// TestReloadReplicasConnectedClient adds a replica by RELOAD and removes
// it again while a client stays connected: the client's reads outside
// transactions go to the replica from its next statement after the first
// reload, and back to the primary after the second, as a new client's do.
func TestReloadReplicasConnectedClient(t *testing.T) {
	ctx := context.Background()
	primary, replica := withReplica(t, "app")
	withCfg := replicaConfig(primary.Host, primary.Port, replica.Port, primary.User, primary.Password)
	without := strings.Replace(withCfg, fmt.Sprintf(", replicas: [{ host: %s, port: %d }]", primary.Host, replica.Port), "", 1)
	if without == withCfg {
		t.Fatal("could not take the replica out of the configuration")
	}
	o := startOperated(t, without)
	adm := connect(t, o.AdminURL())
	app := connect(t, o.AppURL("app"))
	inRecovery := func(c *pgx.Conn) bool {
		t.Helper()
		var r bool
		if err := c.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&r); err != nil {
			t.Fatalf("read: %v", err)
		}
		return r
	}
	if inRecovery(app) {
		t.Fatal("a read ran on a replica the configuration does not name")
	}
	o.rewrite(t, withCfg)
	mustRun(t, adm, "RELOAD")
	if fresh := connect(t, o.AppURL("app")); !inRecovery(fresh) {
		t.Fatal("a new client's read after the reload ran on the primary")
	}
	for i := range 5 {
		if !inRecovery(app) {
			t.Fatalf("read %d of the connected client after the reload that added the replica ran on the primary", i)
		}
	}
	o.rewrite(t, without)
	mustRun(t, adm, "RELOAD")
	for i := range 5 {
		if inRecovery(app) {
			t.Fatalf("read %d of the connected client after the reload that removed the replica ran on it", i)
		}
	}
}
