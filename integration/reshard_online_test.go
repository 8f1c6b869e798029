package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestReshardCutoverPgbench runs pgbench through the proxy in transaction
// mode — simple, extended and prepared protocol, 2 clients each, rate
// limited — across a RESHARD of app from one shard to two: no client
// gets an error or is disconnected at the cutover (clients waiting at the
// paused gate continue on the new shards), and every update pgbench
// completed is on the new shards.
func TestReshardCutoverPgbench(t *testing.T) {
	pgbench := need(t, "pgbench")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, o, _ := startCutoverEnv(t, ctx)
	adm := connect(t, o.AdminURL())
	// A session that a temporary table pins to its server does not hold
	// the cutover up between its transactions; it cannot move, and ends.
	pinned := connect(t, o.AppURL("app"))
	mustExec(t, pinned, "CREATE TEMP TABLE scratch (x int)")
	script := updateScript(t)
	type run struct {
		mode           string
		stdout, stderr string
		code           int
	}
	runs := make([]run, 3)
	var wg sync.WaitGroup
	for i, mode := range []string{"simple", "extended", "prepared"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, code := runShardPgbench(t, o.proxy, pgbench, 90*time.Second,
				"-n", "-c", "2", "-j", "1", "-T", "14", "-R", "60", "-M", mode, "-f", script)
			runs[i] = run{mode, out, errOut, code}
		}()
	}
	time.Sleep(time.Second) // pgbench is under way (its output tells)
	tb, err := adminPgx(adm, "RESHARD app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	var pause string
	eventually(t, 60*time.Second, "the task to finish", func() bool {
		tasks, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			t.Fatal(err)
		}
		row := tasks.find(t, map[string]string{"id": id})
		switch row[tasks.col(t, "state")] {
		case "failed", "stopped":
			t.Fatalf("task %s: %v", id, row)
		case "done":
			pause = row[tasks.col(t, "pause")]
			return true
		}
		return false
	})
	t.Logf("cutover paused the database for %s µs", pause)
	wg.Wait()
	var done int64
	for _, r := range runs {
		res, err := parseShardPgbench(r.stdout, 1)
		if r.code != 0 || err != nil || res.failed != 0 || strings.Contains(r.stderr, "error") {
			t.Errorf("pgbench -M %s: exit %d, %v, %d failed\nstdout:\n%s\nstderr:\n%s", r.mode, r.code, err, res.failed, r.stdout, r.stderr)
			continue
		}
		done += res.done
	}
	if t.Failed() {
		return
	}
	// Every update pgbench completed is on the new shards: the balances
	// there add up to the transactions.
	var total int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		conn := reshardConnect(t, ctx, c.DSN(db))
		var s int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(sum(balance), 0) FROM accounts").Scan(&s); err != nil {
			t.Fatal(err)
		}
		total += s
	}
	if total != done {
		t.Fatalf("the new shards hold %d updates, pgbench completed %d", total, done)
	}
	if done < 3*14*60/2 { // -R is each run's rate
		t.Errorf("pgbench completed only %d transactions", done)
	}
	t.Logf("pgbench completed %d transactions across the cutover, all on the new shards", done)
	// The clients' wait at the paused gate is in the metrics.
	var waits uint64
	for _, m := range scrapeMetrics(t, o)["shardgate_database_gate_wait_seconds"].GetMetric() {
		if m.GetLabel()[0].GetValue() == "app" {
			waits = m.GetHistogram().GetSampleCount()
			t.Logf("gate waits: %d, %.3fs in all", waits, m.GetHistogram().GetSampleSum())
		}
	}
	if waits == 0 {
		t.Error("shardgate_database_gate_wait_seconds counts no wait of database app")
	}
	var n int
	err = pinned.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&n)
	if pe := pgErr(err); pe == nil || pe.Code != "57P01" || pe.Severity != "FATAL" {
		t.Errorf("the session pinned by a temporary table after the cutover: %v, want FATAL 57P01", err)
	}
}

// TestReshardFencesOtherProxies: proxy B serves the same database as
// proxy A but is not told of A's RESHARD. B's clients keep writing
// through the cutover: every write B acknowledged is on the new shards
// (what B wrote before the fence was streamed), and once the source is
// fenced B's writes fail — none commits on the old shard.
func TestReshardFencesOtherProxies(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, a, _ := startCutoverEnv(t, ctx)
	b := startProxy(t, cutoverYAML(c))
	adm := connect(t, a.AdminURL())
	var mu sync.Mutex
	var acked []int64
	failed := 0
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conn *pgx.Conn
		// B writes at most 1 000 rows a second: as fast as it can, one
		// client over the event loop outruns the stream's apply on a
		// loaded 2-core machine (the lag grew from 2.5 to 34 MB in 50 s),
		// and the task never cuts over. How fast the apply is, is not
		// this test's business.
		pace := time.NewTicker(time.Millisecond)
		defer pace.Stop()
		for id := int64(5_000_000); ; id++ {
			select {
			case <-quit:
				return
			case <-pace.C:
			}
			if conn == nil || conn.IsClosed() {
				var err error
				if conn, err = pgx.Connect(ctx, b.AppURL("app")); err != nil {
					mu.Lock()
					failed++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // B's shard refuses: try again
					continue
				}
			}
			_, err := conn.Exec(ctx, "INSERT INTO accounts VALUES ($1, 0, 'b')", pgx.QueryExecModeSimpleProtocol, id)
			mu.Lock()
			if err == nil {
				acked = append(acked, id)
			} else {
				failed++
			}
			mu.Unlock()
		}
	}()
	eventually(t, 10*time.Second, "B's first writes", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) > 20 })
	if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitOnlyTaskDone(t, adm, 60*time.Second, "the task to cut over")
	mu.Lock()
	failedAtCutover := failed
	mu.Unlock()
	eventually(t, 10*time.Second, "B's writes to fail after the cutover", func() bool { mu.Lock(); defer mu.Unlock(); return failed > failedAtCutover+5 })
	close(quit)
	wg.Wait()
	var onNew int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		var n int64
		if err := reshardConnect(t, ctx, c.DSN(db)).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = ANY($1)", acked).Scan(&n); err != nil {
			t.Fatal(err)
		}
		onNew += n
	}
	if onNew != int64(len(acked)) {
		t.Fatalf("B acknowledged %d writes, %d of them are on the new shards: writes lost at the cutover", len(acked), onNew)
	}
	// Nor did anything commit on the old shard that the new ones lack (a
	// write whose acknowledgement was lost is on both).
	var oldIDs []int64
	rows, err := reshardConnect(t, ctx, c.DSN("app_0")).Query(ctx, "SELECT id FROM accounts WHERE id >= 5000000")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		oldIDs = append(oldIDs, id)
	}
	var both int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		var n int64
		if err := reshardConnect(t, ctx, c.DSN(db)).QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = ANY($1)", oldIDs).Scan(&n); err != nil {
			t.Fatal(err)
		}
		both += n
	}
	if both != int64(len(oldIDs)) {
		t.Fatalf("%d of B's writes committed on the old shard only", int64(len(oldIDs))-both)
	}
	t.Logf("B: %d writes acknowledged, all on the new shards; %d refused", len(acked), failed)
}

// TestReshardCutoverSessionMode: session-pooled clients of a one-shard
// database move to the new shards at their next transaction boundary
// after a cutover, with their settings and prepared statements: pgbench
// (simple and prepared protocol) runs across the cutover without an
// error, an idle session keeps its SET and its prepared statement, and a
// session holding a temporary table — which cannot move — ends with
// 57P01 at its next statement.
func TestReshardCutoverSessionMode(t *testing.T) {
	pgbench := need(t, "pgbench")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, o, _ := startCutoverEnvMode(t, ctx, "session")
	adm := connect(t, o.AdminURL())
	idle := idleSession(t, ctx, o.AppURL("app"))
	pinned := connect(t, o.AppURL("app"))
	mustExec(t, pinned, "CREATE TEMP TABLE scratch (x int)")
	script := updateScript(t)
	done := pgbenchAcrossReshard(t, o, adm, pgbench, script, "simple", "prepared")
	// The idle session moved with its setting and its statement.
	checkIdleSession(t, ctx, idle)
	var bumped int64
	for _, db := range []string{"app_new_0", "app_new_1"} {
		var s int64
		if err := reshardConnect(t, ctx, c.DSN(db)).QueryRow(ctx, "SELECT coalesce(sum(balance), 0) FROM accounts").Scan(&s); err != nil {
			t.Fatal(err)
		}
		bumped += s
	}
	if bumped != done+3000 {
		t.Errorf("the new shards hold %d of balance, want %d (pgbench) + 3000", bumped, done)
	}
	// The session with a temporary table cannot move.
	var x int
	err := pinned.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&x)
	if pe := pgErr(err); pe == nil || pe.Code != "57P01" || pe.Severity != "FATAL" {
		t.Errorf("the session with a temporary table after the cutover: %v, want FATAL 57P01", err)
	}
}
