package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardFunctionCallAtGate: a transaction-pooled client whose
// FunctionCall waits at the gate of a paused one-shard database while a
// reload makes the database sharded (as a RESHARD cutover does) gets the
// function's answer when the gate opens, from shard 0, and goes on as a
// sharded session — no 57P01.
func TestReshardFunctionCallAtGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret"})
	for _, db := range []string{"app_0", "app_1"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, db, "CREATE TABLE accounts (id bigint PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
	}
	yml := func(shards ...string) string {
		var list string
		for i, db := range shards {
			if i > 0 {
				list += ", "
			}
			list += fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, db)
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
`, t.TempDir(), appPassword, c.User, c.Password, list)
	}
	o := startOperated(t, yml("app_0"))
	adm := connect(t, o.AdminURL())
	fe := dialFrontend(t, o.AppURL("app"))
	fe.want("SELECT 1", "RowDescription DataRow CommandComplete ReadyForQuery ", []string{"1"}, queryMsg("SELECT 1"))
	mustRun(t, adm, "PAUSE app")
	type answer struct{ types string }
	got := make(chan answer, 1)
	go func() {
		// pg_catalog.current_database() (OID 861), as a fast-path call;
		// read here without t (not the test's goroutine).
		var a answer
		defer func() { got <- a }()
		fe.fe.Send(&pgproto3.FunctionCall{Function: 861})
		if err := fe.fe.Flush(); err != nil {
			a.types = err.Error()
			return
		}
		for {
			m, err := fe.fe.Receive()
			if err != nil {
				a.types += err.Error()
				return
			}
			if e, ok := m.(*pgproto3.ErrorResponse); ok {
				a.types += e.Severity + " " + e.Code + " "
				continue
			}
			a.types += fmt.Sprintf("%T ", m)[len("*pgproto3."):]
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				return
			}
		}
	}()
	eventually(t, 10*time.Second, "the FunctionCall to wait at the gate", func() bool {
		tb, err := adminPgx(adm, "SHOW DATABASES")
		return err == nil && tb.get(t, map[string]string{"name": "app"}, "waiting") == "1"
	})
	o.rewrite(t, yml("app_0", "app_1"))
	mustRun(t, adm, "RELOAD")
	mustRun(t, adm, "RESUME app")
	select {
	case a := <-got:
		if a.types != "FunctionCallResponse ReadyForQuery " {
			t.Fatalf("the FunctionCall that waited at the gate: %s, want FunctionCallResponse ReadyForQuery", a.types)
		}
	case <-ctx.Done():
		t.Fatal("the FunctionCall got no answer")
	}
	fe.want("a sharded statement after it", "RowDescription DataRow CommandComplete ReadyForQuery ", []string{"0"},
		queryMsg("SELECT count(*) FROM accounts"))
}
