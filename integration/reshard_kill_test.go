package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardSurvivesProxyKill: the proxy running RESHARD is SIGKILLed
// while the task streams; a restarted proxy resumes the task by itself and
// finishes it, and the destination ends up with exactly the source's rows
// (written directly to the source throughout).
func TestReshardSurvivesProxyKill(t *testing.T) {
	bin := buildProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
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
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 5000) i`)

	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfg := reshardYAML(processHead(addr, dir), c, accountsRule,
		[]string{shardYAML(c, "app_0")}, []string{shardYAML(c, "app_new_0"), shardYAML(c, "app_new_1")})
	path := filepath.Join(dir, "shardgate.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	adminURL := fmt.Sprintf("postgres://admin:admin-secret@%s/admin?sslmode=disable", addr)

	// A writer changes the source directly the whole time.
	stopWriter := make(chan struct{})
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		w, err := pgx.Connect(ctx, c.DSN("app_0"))
		if err != nil {
			return
		}
		defer w.Close(ctx)
		for i := int64(1); ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			w.Exec(ctx, "INSERT INTO accounts VALUES ($1, 1) ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 1", 5000+i)
			w.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", i%5000+1)
			time.Sleep(2 * time.Millisecond) // pace the writer; not synchronisation
		}
	}()

	p1 := startProxyProcess(t, bin, path, addr)
	adm := connect(t, adminURL)
	if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the task to stream", func() bool {
		tb, err := adminPgx(adm, "SHOW TASKS")
		if err != nil || len(tb.rows) == 0 {
			return false
		}
		return tb.rows[0][tb.col(t, "phase")] == "stream"
	})
	adm.Close(ctx)
	p1.cmd.Process.Kill() // SIGKILL
	<-p1.done

	startProxyProcess(t, bin, path, addr)
	adm = connect(t, adminURL)
	eventually(t, 60*time.Second, "the resumed task to stream again", func() bool {
		tb, err := adminPgx(adm, "SHOW TASKS")
		return err == nil && len(tb.rows) > 0 && tb.rows[0][tb.col(t, "phase")] == "stream"
	})
	close(stopWriter)
	<-writerDone
	// After the writer stopped, the task catches up and cuts over.
	waitOnlyTaskDone(t, adm, 90*time.Second, "the task to finish")
	src = reconnected(t, ctx, src) // the cutover fenced the source
	var wantN, wantSum int64
	if err := src.QueryRow(ctx, "SELECT count(*), sum(balance) FROM accounts").Scan(&wantN, &wantSum); err != nil {
		t.Fatal(err)
	}
	var gotN, gotSum int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		d := connect(t, c.DSN(db))
		var n, s int64
		if err := d.QueryRow(ctx, "SELECT count(*), coalesce(sum(balance), 0) FROM accounts").Scan(&n, &s); err != nil {
			t.Fatal(err)
		}
		gotN, gotSum = gotN+n, gotSum+s
	}
	if gotN != wantN || gotSum != wantSum {
		t.Fatalf("destination has %d rows with balance sum %d; the source has %d and %d", gotN, gotSum, wantN, wantSum)
	}
	var slots int
	src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots)
	if slots != 0 {
		t.Fatalf("%d replication slots left on the source", slots)
	}
}
