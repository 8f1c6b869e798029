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

// TestReshardRoutesWithNewShardCount isolates what
// TestReshardCutoverThroughProxy/2to3 runs into at the cutover: a client of
// a sharded database that stays connected while a reload changes the shard
// count (2 → 3, as a RESHARD cutover does) must route its next statement
// with the new rules, on the new shards: a key's shard of 3, every one of
// the 3 for an omni table.
func TestReshardRoutesWithNewShardCount(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode pgx.QueryExecMode
		omni bool
	}{
		{"simple", pgx.QueryExecModeSimpleProtocol, false},
		{"extended", pgx.QueryExecModeExec, false},
		{"omni", pgx.QueryExecModeSimpleProtocol, true},
	} {
		t.Run(tc.name, func(t *testing.T) { testRoutesWithNewShardCount(t, tc.mode, tc.omni) })
	}
}

func testRoutesWithNewShardCount(t *testing.T, mode pgx.QueryExecMode, omni bool) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"max_prepared_transactions": "50",
	}})
	id := int64(1)
	for hashShard(id, 2) == hashShard(id, 3) {
		id++
	}
	conns := map[string]*pgx.Conn{}
	config := func(name string, n int) string {
		var s []string
		for i := range n {
			db := fmt.Sprintf("%s_%d", name, i)
			if err := c.CreateDatabase(ctx, db); err != nil {
				t.Fatal(err)
			}
			conns[db] = reshardConnect(t, ctx, c.DSN(db))
			reshardExec(t, ctx, conns[db], `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text);
INSERT INTO countries VALUES ('c1', 'before')`)
			if hashShard(id, n) == i {
				reshardExec(t, ctx, conns[db], fmt.Sprintf("INSERT INTO accounts VALUES (%d, 0, 'before')", id))
			}
			s = append(s, fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, db))
		}
		return fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
    omni_tables: [countries]
`, t.TempDir(), appPassword, c.User, c.Password, strings.Join(s, ", "))
	}
	o := startOperated(t, config("old", 2))
	newConfig := config("new", 3)
	app := connect(t, o.AppURL("app"))
	var n int
	if err := app.QueryRow(ctx, "SELECT count(*) FROM accounts", mode).Scan(&n); err != nil || n != 1 {
		t.Fatalf("before the reload: %d accounts (%v), want 1", n, err)
	}
	o.rewrite(t, newConfig)
	mustRun(t, connect(t, o.AdminURL()), "RELOAD")

	if omni {
		if _, err := app.Exec(ctx, "UPDATE countries SET name = 'after' WHERE code = 'c1'", mode); err != nil {
			t.Fatal(err)
		}
		for d := range 3 {
			var name string
			if err := conns[fmt.Sprintf("new_%d", d)].QueryRow(ctx, "SELECT name FROM countries").Scan(&name); err != nil {
				t.Fatal(err)
			}
			if name != "after" {
				t.Errorf("omni UPDATE after the reload: new_%d has %q, want \"after\" on every one of the 3 shards", d, name)
			}
		}
		return
	}
	tag, err := app.Exec(ctx, "UPDATE accounts SET balance = 1 WHERE id = $1", mode, id)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("new_%d", hashShard(id, 3))
	var balance int
	if err := conns[want].QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", id).Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() != 1 || balance != 1 {
		t.Errorf("UPDATE of id %d after the reload: %d rows affected, balance %d on %s (its shard of 3); routed as with 2 shards (shard %d)?",
			id, tag.RowsAffected(), balance, want, hashShard(id, 2))
	}
}
