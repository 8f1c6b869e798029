package integration

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardCutoverAsyncCommit: with synchronous_commit = off on the
// source server, the transactions that committed just before a cutover
// may not be written when the cutover takes its catch-up target, the
// WAL's write position (pg_current_wal_lsn()), and the walsender sends
// only WAL that is flushed. The fence commits synchronously, which
// flushes them: the cutover carries them to the new shards and does not
// wait for the WAL writer (wal_writer_delay, long here). Before, the
// target could fall short of a commit a client had been told of
// (bench/reshard.sh lost 1 and 6 of ~3 900 UPDATEs in two of six runs:
// the target was a WAL page boundary the WAL writer had written up to,
// inside the commit record of the transaction before the lost one), or,
// as in this test, the pause waited for the WAL writer (4.8 s with a 2 s
// wal_writer_delay, against 0.22 s with the synchronous fence).
func TestReshardCutoverAsyncCommit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
		"synchronous_commit": "off", "wal_writer_delay": "5s",
	}})
	for _, db := range []string{"app_0", "app_new_0", "app_new_1"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	src := reshardConnect(t, ctx, c.DSN("app_0"))
	reshardExec(t, ctx, src, `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
INSERT INTO accounts SELECT i, 0, 'initial' FROM generate_series(1, 2000) i;
INSERT INTO countries SELECT 'c'||i, 'country '||i FROM generate_series(1, 10) i`)
	o := startOperated(t, cutoverYAML(c))
	adm := connect(t, o.AdminURL())
	tb, err := adminPgx(adm, "COPY_DATA app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	eventually(t, 60*time.Second, "task streaming", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && tasks.get(t, map[string]string{"id": id}, "phase") == "stream"
	})
	// Twenty transactions that commit asynchronously on the source right
	// before the cutover (the application's last writes before the pause).
	const writes = 20
	for i := 1; i <= writes; i++ {
		if _, err := src.Exec(ctx, "UPDATE accounts SET balance = 42 WHERE id = $1", i*97); err != nil {
			t.Fatal(err)
		}
	}
	var unwritten bool
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn() < pg_current_wal_insert_lsn()").Scan(&unwritten); err != nil {
		t.Fatal(err)
	}
	t.Logf("before CUTOVER the WAL's write position is short of its insert position: %v", unwritten)
	start := time.Now()
	if _, err := adminPgx(adm, "CUTOVER "+id); err != nil {
		t.Fatalf("CUTOVER: %v", err)
	}
	pause := taskPause(t, adm, id)
	t.Logf("CUTOVER took %v, pause %v", time.Since(start), pause)
	if pause >= 5*time.Second {
		t.Errorf("the cutover paused %v: it waited for the WAL writer (wal_writer_delay 5s) instead of flushing at the fence", pause)
	}
	got := 0
	for _, db := range []string{"app_new_0", "app_new_1"} {
		var n int
		if err := reshardConnect(t, ctx, c.DSN(db)).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE balance = 42").Scan(&n); err != nil {
			t.Fatal(err)
		}
		got += n
	}
	if got != writes {
		t.Fatalf("the new shards hold %d of the %d writes committed before the cutover", got, writes)
	}
	var n int
	if err := connect(t, o.AppURL("app")).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE balance = 42", pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil || n != writes {
		t.Fatalf("through the proxy after the cutover: %d rows with the last writes (%v), want %d", n, err, writes)
	}
}
