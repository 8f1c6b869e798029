package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardCutoverShardedSessionMode reshards a sharded database (2 → 3
// shards) under session pooling while pgbench writes through the proxy in
// simple and prepared mode: the session-pooled clients, which keep a
// server per shard, no longer keep the cutover from draining; they move
// to the new shards at their next transaction without an error. An idle
// session keeps its setting and its prepared statement; a session holding
// an advisory lock cannot move and ends with 57P01.
func TestReshardCutoverShardedSessionMode(t *testing.T) {
	pgbench := need(t, "pgbench")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10", "max_prepared_transactions": "20",
	}})
	shards := func(name string, n int) string { return createShardDBs(t, ctx, c, name, n) }
	const rules = "\n    sharded_tables: [{ table: accounts, column: id, type: bigint }]"
	yml := fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: session, size: 10, checkout_timeout: 5s }
limits: { client_login_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]%s
  - name: app_new
    shards: [%s]%s
`, appPassword, c.User, c.Password, shards("app", 2), rules, shards("app_new", 3), rules)
	for s := range 2 {
		reshardExec(t, ctx, reshardConnect(t, ctx, c.DSN(fmt.Sprintf("app_%d", s))), fmt.Sprintf(`
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 2000) i WHERE i = ANY (%s)`, ownedIDs(1, 2000, 2, s)))
	}
	o := startOperated(t, yml)
	adm := connect(t, o.AdminURL())
	idle := idleSession(t, ctx, o.AppURL("app"))
	var n int
	if err := idle.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil || n != 2000 {
		t.Fatalf("count(*) through the proxy: %d, %v", n, err) // the session now holds both shards' servers
	}
	pinned := connect(t, o.AppURL("app"))
	mustExec(t, pinned, "SELECT pg_advisory_lock(42)")
	script := updateScript(t)
	done := pgbenchAcrossReshard(t, o, adm, pgbench, script, "simple", "prepared")
	checkIdleSession(t, ctx, idle)
	var bumped int64
	for d := range 3 {
		var s int64
		if err := reshardConnect(t, ctx, c.DSN(fmt.Sprintf("app_new_%d", d))).QueryRow(ctx, "SELECT coalesce(sum(balance), 0) FROM accounts").Scan(&s); err != nil {
			t.Fatal(err)
		}
		bumped += s
	}
	if bumped != done+3000 {
		t.Errorf("the new shards hold %d of balance, want %d (pgbench) + 3000", bumped, done)
		compareAcrossCutover(t, ctx, c, []string{"app_0", "app_1"}, []string{"app_new_0", "app_new_1", "app_new_2"})
	}
	err := pinned.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n)
	if pe := pgErr(err); pe == nil || pe.Code != "57P01" || pe.Severity != "FATAL" {
		t.Errorf("the session holding an advisory lock after the cutover: %v, want FATAL 57P01", err)
	}
}

// TestReshardMoveOneShardSessionMode moves a one-shard database to
// another server (RESHARD to a one-shard destination) under session
// pooling while pgbench writes through the proxy in simple and prepared
// mode: no transaction fails. An idle session, whose server is on the
// old, fenced database, moves at its next statement to the new one with
// its setting and its prepared statements (describe-only and a pipeline
// with one Sync use them there); a session holding a temporary table
// cannot move and ends with 57P01; a new session reads and writes the new
// database.
func TestReshardMoveOneShardSessionMode(t *testing.T) {
	pgbench := need(t, "pgbench")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	for _, db := range []string{"app_0", "app_new_0"} {
		if err := c.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
	}
	reshardExec(t, ctx, reshardConnect(t, ctx, c.DSN("app_0")), `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 2000) i`)
	o := startOperated(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: session, size: 10, checkout_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - { name: app, shards: [{ host: %s, port: %d, database: app_0 }] }
  - { name: app_new, shards: [{ host: %s, port: %d, database: app_new_0 }] }
`, appPassword, c.User, c.Password, c.Host, c.Port, c.Host, c.Port))
	adm := connect(t, o.AdminURL())
	idle := idleSession(t, ctx, o.AppURL("app"))
	if _, err := idle.Prepare(ctx, "one", "SELECT balance, current_database() FROM accounts WHERE id = $1::int8"); err != nil {
		t.Fatal(err)
	}
	var db string
	if err := idle.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != "app_0" {
		t.Fatalf("the session's database before the move: %q, %v", db, err)
	}
	// A session whose next message after the move is a Bind of the
	// unnamed statement it prepared before (describe-exec drivers).
	unnamed := connect(t, o.AppURL("app"))
	if _, err := unnamed.PgConn().Prepare(ctx, "", "SELECT current_database(), $1::int8 + 1", nil); err != nil {
		t.Fatal(err)
	}
	pinned := connect(t, o.AppURL("app"))
	mustExec(t, pinned, "CREATE TEMP TABLE scratch (x int)")
	script := updateScript(t)
	done := pgbenchAcrossReshard(t, o, adm, pgbench, script, "simple", "prepared")

	// The idle session moved with its setting and its statements.
	checkIdleSession(t, ctx, idle)
	res := unnamed.PgConn().ExecPrepared(ctx, "", [][]byte{[]byte("41")}, nil, nil).Read()
	if res.Err != nil || len(res.Rows) != 1 || string(res.Rows[0][0]) != "app_new_0" || string(res.Rows[0][1]) != "42" {
		t.Errorf("Bind of the unnamed statement prepared before the move: %v %q, want app_new_0, 42", res.Err, res.Rows)
	}
	// Describe-only, then a pipeline of two Bind/Execute with one Sync,
	// of a statement prepared before the move.
	pc := idle.PgConn()
	sd, err := pc.Prepare(ctx, "one", "SELECT balance, current_database() FROM accounts WHERE id = $1::int8", nil)
	if pe := pgErr(err); pe == nil || pe.Code != "42P05" {
		t.Errorf("preparing \"one\" again after the move: %v, want 42P05 (the statement moved)", err)
	}
	sd, err = pc.Prepare(ctx, "", "SELECT balance FROM accounts WHERE id = $1::int8", nil)
	if err != nil || len(sd.Fields) != 1 || string(sd.Fields[0].Name) != "balance" {
		t.Errorf("describe-only after the move: %+v, %v", sd, err)
	}
	batch := &pgconn.Batch{}
	batch.ExecPrepared("one", [][]byte{[]byte("1")}, nil, nil)
	batch.ExecPrepared("one", [][]byte{[]byte("2")}, nil, nil)
	results, err := pc.ExecBatch(ctx, batch).ReadAll()
	if err != nil || len(results) != 2 {
		t.Fatalf("a pipeline after the move: %d results, %v", len(results), err)
	}
	for i, r := range results {
		if r.Err != nil || len(r.Rows) != 1 || string(r.Rows[0][1]) != "app_new_0" {
			t.Errorf("pipeline result %d after the move: %v %q, want one row of app_new_0", i, r.Err, r.Rows)
		}
	}
	var bumped int64
	if err := reshardConnect(t, ctx, c.DSN("app_new_0")).QueryRow(ctx, "SELECT coalesce(sum(balance), 0) FROM accounts").Scan(&bumped); err != nil {
		t.Fatal(err)
	}
	if bumped != done+3000 {
		t.Errorf("the new database holds %d of balance, want %d (pgbench) + 3000", bumped, done)
		compareAcrossCutover(t, ctx, c, []string{"app_0"}, []string{"app_new_0"})
	}
	// The session with a temporary table cannot move.
	var x int
	err = pinned.QueryRow(ctx, "SELECT count(*) FROM scratch").Scan(&x)
	if pe := pgErr(err); pe == nil || pe.Code != "57P01" || pe.Severity != "FATAL" {
		t.Errorf("the session with a temporary table after the move: %v, want FATAL 57P01", err)
	}
	fresh := connect(t, o.AppURL("app"))
	mustExec(t, fresh, "INSERT INTO accounts VALUES (100000, 7)")
	var b int
	if err := reshardConnect(t, ctx, c.DSN("app_new_0")).QueryRow(ctx, "SELECT balance FROM accounts WHERE id = 100000").Scan(&b); err != nil || b != 7 {
		t.Errorf("a new session's write is not on the new database: %d, %v", b, err)
	}
}

// pgbenchAcrossReshard runs pgbench through o's proxy, 2 clients at 60
// transactions/s each for 12 s in each of modes, with script, while
// RESHARD app app_new cuts over. It fails t for a run that failed any
// transaction and returns how many they completed.
func pgbenchAcrossReshard(t *testing.T, o *operated, adm *pgx.Conn, pgbench, script string, modes ...string) int64 {
	t.Helper()
	type run struct {
		stdout, stderr string
		code           int
	}
	runs := make([]run, len(modes))
	var wg sync.WaitGroup
	for i, mode := range modes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, code := runShardPgbench(t, o.proxy, pgbench, 90*time.Second,
				"-n", "-c", "2", "-j", "1", "-T", "12", "-R", "60", "-M", mode, "-f", script)
			runs[i] = run{out, errOut, code}
		}()
	}
	time.Sleep(time.Second) // pgbench is under way
	if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitOnlyTaskDone(t, adm, 60*time.Second, "the task to cut over")
	wg.Wait()
	var done int64
	for i, r := range runs {
		res, err := parseShardPgbench(r.stdout, 1)
		if r.code != 0 || err != nil || res.failed != 0 {
			t.Errorf("pgbench -M %s: exit %d, %v, %d failed\nstdout:\n%s\nstderr:\n%s", modes[i], r.code, err, res.failed, r.stdout, r.stderr)
		}
		done += res.done
	}
	return done
}

// idleSession connects to url, sets statement_timeout and prepares
// "bump", for a session that sits idle through a cutover
// (checkIdleSession).
func idleSession(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	idle := connect(t, url)
	mustExec(t, idle, "SET statement_timeout = '12345ms'")
	if _, err := idle.Prepare(ctx, "bump", "UPDATE accounts SET balance = balance + $2 WHERE id = $1"); err != nil {
		t.Fatal(err)
	}
	return idle
}

// checkIdleSession checks that idleSession's session kept its setting and
// its statement through the cutover, with which it adds 1000 to the
// balances of accounts 1, 2 and 3.
func checkIdleSession(t *testing.T, ctx context.Context, idle *pgx.Conn) {
	t.Helper()
	var timeout string
	if err := idle.QueryRow(ctx, "SHOW statement_timeout").Scan(&timeout); err != nil || timeout != "12345ms" {
		t.Errorf("after the cutover the session's statement_timeout is %q (%v), want 12345ms", timeout, err)
	}
	for _, id := range []int64{1, 2, 3} {
		if _, err := idle.Exec(ctx, "bump", id, 1000); err != nil {
			t.Errorf("the session's prepared statement after the cutover: %v", err)
		}
	}
}

// updateScript writes a pgbench script that adds 1 to the balance of a
// random account of 1–2000, and returns its path.
func updateScript(t *testing.T) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "update.sql")
	if err := os.WriteFile(script, []byte("\\set id random(1, 2000)\nUPDATE accounts SET balance = balance + 1 WHERE id = :id;\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return script
}

// compareAcrossCutover explains a balance sum that came out short after a
// cutover: it compares each account's balance on the old shards (fenced,
// their rows as the last write before the fence left them) with the new
// ones'. Writes only add, and the new shards start from the old ones'
// rows, so an account whose new balance is below its old one lost a write
// that committed on an old shard after the stream stopped. A short sum
// without such an account points at a write that the new shards answered
// without changing a row (UPDATE 0: routed to a shard that does not hold
// the account).
func compareAcrossCutover(t *testing.T, ctx context.Context, c *pgtest.Cluster, oldDBs, newDBs []string) {
	t.Helper()
	balances := func(dbs []string) map[int64]int64 {
		m := map[int64]int64{}
		for _, db := range dbs {
			rows, err := reshardConnect(t, ctx, c.DSN(db)).Query(ctx, "SELECT id, balance FROM accounts")
			if err != nil {
				t.Errorf("read %s: %v", db, err)
				return m
			}
			for rows.Next() {
				var id, b int64
				if err := rows.Scan(&id, &b); err != nil {
					t.Errorf("read %s: %v", db, err)
					break
				}
				m[id] += b
			}
			rows.Close()
		}
		return m
	}
	before, after := balances(oldDBs), balances(newDBs)
	var lost []string
	for id, b := range before {
		if a, ok := after[id]; !ok || a < b {
			lost = append(lost, fmt.Sprintf("%d (old %d, new %d, present %v)", id, b, a, ok))
		}
	}
	t.Logf("accounts: %d on the old shards, %d on the new; with a lower balance on the new: %v", len(before), len(after), lost)
}
