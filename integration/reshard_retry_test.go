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

// TestReshardStreamSurvivesDestinationCrash: the destination's PostgreSQL
// crashes while a task streams and writes go on at the source; the task
// keeps running, says in SHOW TASKS that it retries, and once the
// destination is back it applies every write exactly once.
func TestReshardStreamSurvivesDestinationCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	opts := pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret"}
	srcOpts := opts
	srcOpts.Settings = map[string]string{"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10"}
	sc := pgtest.New(t, srcOpts)
	dc := pgtest.New(t, opts)
	if err := sc.CreateDatabase(ctx, "app_0"); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"app_new_0", "app_new_1"} {
		if err := dc.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	src := reshardConnect(t, ctx, sc.DSN("app_0"))
	reshardExec(t, ctx, src, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, i % 7 FROM generate_series(1, 2000) i`)

	shard := func(c *pgtest.Cluster, db string) string {
		return fmt.Sprintf("{ host: %s, port: %d, database: %s }", c.Host, c.Port, db)
	}
	o := startOperated(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
  - name: app_new
    shards: [%s, %s]
    sharded_tables: [{ table: accounts, column: id, type: bigint }]
`, appPassword, sc.User, sc.Password, shard(sc, "app_0"), shard(dc, "app_new_0"), shard(dc, "app_new_1")))
	adm := connect(t, o.AdminURL())

	tb, err := adminPgx(adm, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	task := func() (state, phase, errText string) {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			t.Fatalf("SHOW TASKS: %v", err)
		}
		m := map[string]string{"id": id}
		return tasks.get(t, m, "state"), tasks.get(t, m, "phase"), tasks.get(t, m, "error")
	}
	eventually(t, 30*time.Second, "task streaming", func() bool {
		_, phase, _ := task()
		return phase == "stream"
	})

	// dest returns count and sum of accounts over the destination shards,
	// or ok false while they cannot be read.
	dest := func() (n, sum int64, ok bool) {
		for _, db := range []string{"app_new_0", "app_new_1"} {
			conn, err := pgx.Connect(ctx, dc.DSN(db))
			if err != nil {
				return 0, 0, false
			}
			var c, s int64
			err = conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(id + balance), 0) FROM accounts").Scan(&c, &s)
			conn.Close(ctx)
			if err != nil {
				return 0, 0, false
			}
			n, sum = n+c, sum+s
		}
		return n, sum, true
	}
	source := func() (n, sum int64) {
		if err := src.QueryRow(ctx, "SELECT count(*), sum(id + balance) FROM accounts").Scan(&n, &sum); err != nil {
			t.Fatal(err)
		}
		return n, sum
	}
	caughtUp := func(what string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() bool {
			wn, ws := source()
			n, s, ok := dest()
			return ok && n == wn && s == ws
		})
	}

	reshardExec(t, ctx, src, `INSERT INTO accounts SELECT i, 1 FROM generate_series(2001, 2100) i`)
	caughtUp("the destination has the rows written before the crash")

	if err := dc.Kill(); err != nil {
		t.Fatal(err)
	}
	reshardExec(t, ctx, src, `INSERT INTO accounts SELECT i, 2 FROM generate_series(2101, 2300) i;
UPDATE accounts SET balance = balance + 10 WHERE id % 10 = 0;
DELETE FROM accounts WHERE id % 50 = 1`)
	eventually(t, 30*time.Second, "SHOW TASKS reporting the retries", func() bool {
		state, _, errText := task()
		if state != "running" {
			t.Fatalf("task %s while the destination is down (error %q)", state, errText)
		}
		return strings.Contains(errText, "retrying")
	})
	if err := dc.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	reshardExec(t, ctx, src, `INSERT INTO accounts SELECT i, 3 FROM generate_series(2301, 2400) i`)
	caughtUp("the destination catching up after its restart")
	if state, phase, errText := task(); state != "running" || phase != "stream" {
		t.Errorf("after the restart: state %s phase %s error %q", state, phase, errText)
	}

	if _, err := adminPgx(adm, "STOP_TASK "+id); err != nil {
		t.Fatal(err)
	}
	if n := countSlots(t, ctx, src); n != 0 {
		t.Errorf("%d slots left after STOP_TASK", n)
	}
}
