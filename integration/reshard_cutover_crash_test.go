package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardResumesAfterCrashInCutover kills the proxy (SIGKILL, through
// crashproxy -crash-cutover) in the middle of a RESHARD's cutover,
// with traffic paused, and starts it again without the crash:
//
//   - after-config-write: the file already gives app the new shards. The
//     restarted proxy serves app from them and finishes the task by itself:
//     the slot and publication on the old source shard, the origins and the
//     bookkeeping are dropped.
//   - before-config-write: the task recorded the source's shards, but the
//     file still names them. The restarted proxy resumes streaming and cuts
//     over again.
//
// Either way the restarted proxy is not paused, the task shows as done, and
// app, read through the proxy, has every row written to the source.
func TestReshardResumesAfterCrashInCutover(t *testing.T) {
	bin := buildCrashProxy(t)
	for _, tc := range []struct {
		stage         string
		shardsAtCrash int // app's shards in the file when the proxy dies
	}{
		{"after-config-write", 2},
		{"before-config-write", 1},
	} {
		t.Run(tc.stage, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
				"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
			}})
			for _, db := range []string{"app_0", "app_new_0", "app_new_1"} {
				if err := c.CreateDatabase(ctx, db); err != nil {
					t.Fatal(err)
				}
			}
			src := connect(t, c.DSN("app_0"))
			mustExec(t, src, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, i % 7 FROM generate_series(1, 3000) i`)

			dir := t.TempDir()
			addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			cfg := reshardYAML(processHead(addr, dir), c, accountsRule,
				[]string{shardYAML(c, "app_0")}, []string{shardYAML(c, "app_new_0"), shardYAML(c, "app_new_1")})
			path := filepath.Join(dir, "shardgate.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			adminURL := fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", addr)
			appURL := fmt.Sprintf("postgres://app:%s@%s/app?sslmode=disable", appPassword, addr)

			p1 := startProxyProcess(t, bin, path, addr, "-crash-cutover", tc.stage)
			app := connect(t, appURL)
			for i := 3001; i <= 3100; i++ { // through the proxy, before the task
				mustExec(t, app, "INSERT INTO accounts VALUES ($1, 5)", i)
			}
			adm := connect(t, adminURL)
			if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
				t.Fatal(err)
			}
			// Writes through the proxy while the task copies and streams,
			// until the proxy dies in the cutover (the pause holds them).
			for i := 3101; ; i++ {
				if _, err := app.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%3000+1); err != nil {
					break
				}
				if _, err := app.Exec(ctx, "INSERT INTO accounts VALUES ($1, 1)", i); err != nil {
					break
				}
			}
			select {
			case <-p1.done:
			case <-ctx.Done():
				t.Fatal("the proxy did not crash in the cutover")
			}
			app.Close(ctx)
			adm.Close(ctx)

			if got := len(loadConfig(t, path).Database("app").Shards); got != tc.shardsAtCrash {
				t.Fatalf("after the crash the file gives app %d shards", got)
			}
			slotsLeft := func() (slots, pubs int) {
				t.Helper()
				src = reconnected(t, ctx, src) // each cutover fences the source
				err := src.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'sg_app_to_app_new%'),
					(SELECT count(*) FROM pg_publication WHERE pubname LIKE 'sg_app_to_app_new%')`).Scan(&slots, &pubs)
				if err != nil {
					t.Fatal(err)
				}
				return slots, pubs
			}
			if slots, pubs := slotsLeft(); slots != 1 || pubs != 1 {
				t.Fatalf("after the crash the source has %d slots and %d publications of the task, want 1 and 1", slots, pubs)
			}
			// The task recorded the source's shard, and no password.
			var recorded, db string
			var port, nShards int
			if err := connect(t, c.DSN("app_new_0")).QueryRow(ctx, `SELECT source_shards::text, source_shards->0->>'database',
				(source_shards->0->>'port')::int, jsonb_array_length(source_shards) FROM shardgate_reshard.tasks`).Scan(&recorded, &db, &port, &nShards); err != nil {
				t.Fatalf("the task's record: %v", err)
			}
			if db != "app_0" || port != c.Port || nShards != 1 || strings.Contains(recorded, c.Password) {
				t.Fatalf("the task recorded source_shards %s", recorded)
			}
			// Nothing writes to the source any more: it holds what was written.
			var wantN, wantSum int64
			if err := src.QueryRow(ctx, "SELECT count(*), sum(balance) FROM accounts").Scan(&wantN, &wantSum); err != nil {
				t.Fatal(err)
			}

			startProxyProcess(t, bin, path, addr)
			adm = connect(t, adminURL)
			waitOnlyTaskDone(t, adm, 40*time.Second, "the task to finish after the restart")
			if slots, pubs := slotsLeft(); slots != 0 || pubs != 0 {
				t.Fatalf("the finished task left %d slots and %d publications on the source", slots, pubs)
			}
			dst0 := connect(t, c.DSN("app_new_0"))
			var origins, schemas int
			if err := dst0.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'sg_app_to_app_new%'),
				(SELECT count(*) FROM pg_namespace WHERE nspname = 'shardgate_reshard')`).Scan(&origins, &schemas); err != nil {
				t.Fatal(err)
			}
			if origins != 0 || schemas != 0 {
				t.Fatalf("destination shard 0 keeps %d origins of the task and %d bookkeeping schemas", origins, schemas)
			}
			if got := len(loadConfig(t, path).Database("app").Shards); got != 2 {
				t.Fatalf("after the restart the file gives app %d shards", got)
			}

			// The restarted proxy is not paused, and app reads the new shards.
			app = connect(t, appURL)
			var n, sum int64
			if err := app.QueryRow(ctx, "SELECT count(*), sum(balance) FROM accounts").Scan(&n, &sum); err != nil {
				t.Fatal(err)
			}
			if n != wantN || sum != wantSum {
				t.Fatalf("app through the proxy has %d rows with balance sum %d; %d and %d were written", n, sum, wantN, wantSum)
			}
			for _, db := range []string{"app_new_0", "app_new_1"} {
				var k int64
				if err := connect(t, c.DSN(db)).QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&k); err != nil {
					t.Fatal(err)
				}
				if k == 0 || k == wantN {
					t.Fatalf("%s has %d of the %d rows: not split over the new shards", db, k, wantN)
				}
			}
		})
	}
}

func loadConfig(t testing.TB, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
