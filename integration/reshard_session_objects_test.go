package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReshardSessionObjectsMove cuts a database over in each of the three
// ways the proxy moves sessions — a one-shard database becoming sharded
// (1 → 2), a sharded one moving to new shards (2 → 3), a one-shard one
// moving to another server (1 → 1) — under session pooling and under
// transaction pooling (where LISTEN, and a PREPARE in a multi-statement
// Query, which the proxy does not rewrite, pin the client to its server),
// while sessions sit idle holding SQL-level prepared statements and LISTEN
// registrations. After the cutover, a pgx session EXECUTEs its statements
// (one of them prepared in a multi-statement Query, one with the extended
// protocol) in every protocol mode, receives exactly one NOTIFY sent on
// every new shard, and DEALLOCATEs; another's first message after the
// cutover is an extended-protocol EXECUTE; a lib/pq session does the same
// with its own statement and channel. A pgx listener that sends nothing
// gets a NOTIFY sent on the new servers once it listens there (it moved
// at the cutover), and a lib/pq Listener gets one without reconnecting. A
// session that also holds a temporary table (an advisory lock where the
// database is sharded before the cutover) ends with 57P01 whose Detail
// names only that.
func TestReshardSessionObjectsMove(t *testing.T) {
	for _, mode := range []string{"session", "transaction"} {
		for _, kind := range []string{"becomes sharded", "sharded to new shards", "one shard to another server"} {
			t.Run(mode+"/"+kind, func(t *testing.T) { testSessionObjectsMove(t, mode, kind) })
		}
	}
}

func testSessionObjectsMove(t *testing.T, mode, kind string) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, o, newDBs, sharded := startSessionObjectsEnv(t, ctx, mode, kind)
	adm := connect(t, o.AdminURL())

	s := connect(t, o.AppURL("app"))
	mustExec(t, s, "PREPARE byid(bigint) AS SELECT id, balance FROM accounts WHERE id = $1", pgx.QueryExecModeSimpleProtocol)
	if sharded {
		// A sharded database refuses PREPARE in a multi-statement
		// Query (0A000).
		mustExec(t, s, "PREPARE twice AS SELECT $1::int8 * 2 AS n", pgx.QueryExecModeSimpleProtocol)
	} else {
		mustExec(t, s, "PREPARE twice AS SELECT $1::int8 * 2 AS n; SELECT 1", pgx.QueryExecModeSimpleProtocol)
	}
	mustExec(t, s, "PREPARE plus AS SELECT $1::int8 + 1 AS n", pgx.QueryExecModeExec)
	mustExec(t, s, `LISTEN "Jobs"`, pgx.QueryExecModeSimpleProtocol)

	// A session whose first message after the cutover is an extended
	// protocol batch.
	e := connect(t, o.AppURL("app"))
	mustExec(t, e, "PREPARE eid AS SELECT $1::int8 + 2 AS n", pgx.QueryExecModeSimpleProtocol)
	mustExec(t, e, "LISTEN ext", pgx.QueryExecModeSimpleProtocol)

	// A listener that sends nothing after the cutover.
	idle := connect(t, o.AppURL("app")+"&application_name=sg_idle_listener")
	mustExec(t, idle, "LISTEN idle", pgx.QueryExecModeSimpleProtocol)

	// A lib/pq Listener, which only ever pings; a reconnect would hide a
	// session that ended.
	var pqEvents []pq.ListenerEventType
	var pqEventsMu sync.Mutex
	pql := pq.NewListener(o.AppURL("app"), time.Second, time.Second, func(ev pq.ListenerEventType, err error) {
		pqEventsMu.Lock()
		pqEvents = append(pqEvents, ev)
		pqEventsMu.Unlock()
	})
	t.Cleanup(func() { pql.Close() })
	if err := pql.Listen("pqidle"); err != nil {
		t.Fatal(err)
	}

	pqNotes := make(chan *pq.Notification, 16)
	pqConnector, err := pq.NewConnector(o.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(pq.ConnectorWithNotificationHandler(pqConnector, func(n *pq.Notification) { pqNotes <- n }))
	t.Cleanup(func() { db.Close() })
	pqc, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pqc.Close() })
	for _, q := range []string{"PREPARE pqid(bigint) AS SELECT balance FROM accounts WHERE id = $1", "LISTEN pqjobs"} {
		if _, err := pqc.ExecContext(ctx, q); err != nil {
			t.Fatalf("lib/pq: %s: %v", q, err)
		}
	}

	pinned := connect(t, o.AppURL("app"))
	if sharded {
		mustExec(t, pinned, "SELECT pg_advisory_lock(42)")
	} else {
		mustExec(t, pinned, "CREATE TEMP TABLE scratch (x int)")
	}
	mustExec(t, pinned, "LISTEN alsohere")
	mustExec(t, pinned, "PREPARE alsohere AS SELECT 1")

	if _, err := adminPgx(adm, "RESHARD app app_new"); err != nil {
		t.Fatal(err)
	}
	waitOnlyTaskDone(t, adm, 60*time.Second, "the task to cut over")

	// The idle listener moved at the cutover, without a statement of its
	// own: a NOTIFY on the new servers reaches it — while it waits, on one
	// server; with its next statement on a sharded database, where
	// notifications arrive that way, once it listens on a new shard.
	if len(newDBs) == 1 {
		direct := reshardConnect(t, ctx, c.DSN(newDBs[0]))
		var got *pgconn.Notification
		eventually(t, 10*time.Second, "a NOTIFY to reach the idle listener", func() bool {
			mustExec(t, direct, "NOTIFY idle, 'idle after'")
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			n, err := idle.WaitForNotification(wctx)
			got = n
			return err == nil
		})
		if got.Channel != "idle" || got.Payload != "idle after" {
			t.Errorf("the idle listener's notification: %+v", got)
		}
	} else {
		eventually(t, 10*time.Second, "the idle listener to listen on a new shard", func() bool {
			for _, d := range newDBs {
				var n int
				if err := reshardConnect(t, ctx, c.DSN(d)).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = 'sg_idle_listener' AND state = 'idle' AND (query ILIKE 'LISTEN%' OR query LIKE '%pg_listening_channels%')`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					return true
				}
			}
			return false
		})
		for _, d := range newDBs {
			mustExec(t, reshardConnect(t, ctx, c.DSN(d)), "NOTIFY idle, 'idle after'")
		}
		if n := waitNotification(t, ctx, idle); n.Channel != "idle" || n.Payload != "idle after" {
			t.Errorf("the idle listener's notification: %+v", n)
		}
		if extra := pollNotification(ctx, idle, 3); extra != nil {
			t.Errorf("a second notification to the idle listener: %+v", extra)
		}
	}

	// The lib/pq Listener gets a NOTIFY sent on the new servers (pinging
	// for it: a sharded database's notifications come with a statement's
	// answer), without reconnecting.
	var lisn *pq.Notification
	eventually(t, 10*time.Second, "a NOTIFY to reach lib/pq's Listener", func() bool {
		for _, d := range newDBs {
			mustExec(t, reshardConnect(t, ctx, c.DSN(d)), "NOTIFY pqidle, 'pq idle after'")
		}
		if err := pql.Ping(); err != nil {
			t.Fatalf("lib/pq Listener: ping: %v", err)
		}
		select {
		case lisn = <-pql.Notify:
			return lisn != nil // nil: a reconnect
		case <-time.After(200 * time.Millisecond):
			return false
		}
	})
	if lisn.Channel != "pqidle" || lisn.Extra != "pq idle after" {
		t.Errorf("lib/pq Listener's notification: %+v", lisn)
	}
	pqEventsMu.Lock()
	if len(pqEvents) != 1 || pqEvents[0] != pq.ListenerEventConnected {
		t.Errorf("lib/pq Listener's events: %v, want only ListenerEventConnected (%v)", pqEvents, pq.ListenerEventConnected)
	}
	pqEventsMu.Unlock()

	// The first statement after the cutover moves the session.
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheStatement}
	for _, mode := range modes {
		var id, bal, n int64
		if err := s.QueryRow(ctx, "EXECUTE byid(5)", mode).Scan(&id, &bal); err != nil || id != 5 || bal != 0 {
			t.Errorf("%v: EXECUTE byid(5) after the cutover: %d %d, %v; want 5 0", mode, id, bal, err)
		}
		if err := s.QueryRow(ctx, "EXECUTE twice(21)", mode).Scan(&n); err != nil || n != 42 {
			t.Errorf("%v: EXECUTE twice(21) after the cutover: %d, %v; want 42", mode, n, err)
		}
		if err := s.QueryRow(ctx, "EXECUTE plus(41)", mode).Scan(&n); err != nil || n != 42 {
			t.Errorf("%v: EXECUTE plus(41) after the cutover: %d, %v; want 42", mode, n, err)
		}
	}
	var en int64
	if err := e.QueryRow(ctx, "EXECUTE eid(40)", pgx.QueryExecModeExec).Scan(&en); err != nil || en != 42 {
		t.Errorf("EXECUTE eid(40) with the extended protocol, the first message after the cutover: %d, %v; want 42", en, err)
	}
	var where string
	if err := s.QueryRow(ctx, "SELECT current_database()").Scan(&where); err != nil || where == "app_0" {
		t.Errorf("the session after the cutover is on %q (%v), want a new database", where, err)
	}
	if mode == "session" && kind == "one shard to another server" {
		// One server as before: the client's own names, as
		// SQL-level statements, with the text they were prepared
		// with (the PREPARE's own part of a multi-statement Query).
		got := map[string]string{}
		rows, err := s.Query(ctx, "SELECT name, statement FROM pg_prepared_statements WHERE from_sql ORDER BY name")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name, text string
			if err := rows.Scan(&name, &text); err != nil {
				t.Fatal(err)
			}
			got[name] = text
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"byid":  "PREPARE byid(bigint) AS SELECT id, balance FROM accounts WHERE id = $1",
			"twice": "PREPARE twice AS SELECT $1::int8 * 2 AS n",
			"plus":  "PREPARE plus AS SELECT $1::int8 + 1 AS n",
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("pg_prepared_statements from_sql after the move: %q, want %q", got, want)
		}
	}

	// A NOTIFY on every new shard reaches the session once: it
	// listens on one server, as LISTEN runs on one shard of a
	// sharded database.
	for _, d := range newDBs {
		mustExec(t, reshardConnect(t, ctx, c.DSN(d)), `SELECT pg_notify('Jobs', 'after'), pg_notify('ext', 'after')`)
	}
	n := waitNotification(t, ctx, s)
	if n.Channel != "Jobs" || n.Payload != "after" {
		t.Errorf("notification after the cutover: %+v, want Jobs after", n)
	}
	if extra := pollNotification(ctx, s, 3); extra != nil {
		t.Errorf("a second notification after the cutover: %+v (the session listens on more than one shard)", extra)
	}

	if n := waitNotification(t, ctx, e); n.Channel != "ext" || n.Payload != "after" {
		t.Errorf("notification after the cutover, extended-protocol session: %+v, want ext after", n)
	}
	if extra := pollNotification(ctx, e, 3); extra != nil {
		t.Errorf("a second notification after the cutover, extended-protocol session: %+v", extra)
	}

	mustExec(t, s, "DEALLOCATE byid", pgx.QueryExecModeSimpleProtocol)
	_, err = s.Exec(ctx, "EXECUTE byid(5)", pgx.QueryExecModeSimpleProtocol)
	if pe := pgErr(err); pe == nil || pe.Code != "26000" {
		t.Errorf("EXECUTE after DEALLOCATE: %v, want 26000", err)
	}
	mustExec(t, s, "UNLISTEN *", pgx.QueryExecModeSimpleProtocol)

	// lib/pq: its statement runs, and a notification sent on the
	// new shards after that arrives (with a statement's answer at
	// the latest).
	var bal int64
	if err := pqc.QueryRowContext(ctx, "EXECUTE pqid(7)").Scan(&bal); err != nil || bal != 0 {
		t.Errorf("lib/pq: EXECUTE pqid(7) after the cutover: %d, %v", bal, err)
	}
	for _, d := range newDBs {
		mustExec(t, reshardConnect(t, ctx, c.DSN(d)), `SELECT pg_notify('pqjobs', 'pq after')`)
	}
	var pqn *pq.Notification
	eventually(t, 10*time.Second, "lib/pq's notification", func() bool {
		select {
		case pqn = <-pqNotes:
			return true
		default:
		}
		if _, err := pqc.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatalf("lib/pq: SELECT 1: %v", err)
		}
		return false
	})
	if pqn.Channel != "pqjobs" || pqn.Extra != "pq after" {
		t.Errorf("lib/pq: notification after the cutover: %+v, want pqjobs \"pq after\"", pqn)
	}
	for range 3 {
		if _, err := pqc.ExecContext(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case n := <-pqNotes:
		t.Errorf("lib/pq: a second notification after the cutover: %+v", n)
	default:
	}

	// The pinned session cannot move; the Detail says why.
	var x int
	err = pinned.QueryRow(ctx, "SELECT 1").Scan(&x)
	what := "temporary objects"
	if sharded {
		what = "session advisory locks"
	}
	wantDetail := fmt.Sprintf("database \"app\" was resharded and this session holds %s, which cannot move to the new shards; reconnect", what)
	if pe := pgErr(err); pe == nil || pe.Code != "57P01" || pe.Severity != "FATAL" || pe.Detail != wantDetail {
		t.Errorf("the pinned session after the cutover: %v (detail %q), want FATAL 57P01 with detail %q", err, detailOf(err), wantDetail)
	}
}

// startSessionObjectsEnv starts a cluster and a session-pooled proxy for
// TestReshardSessionObjectsMove's kind of cutover of database app to
// app_new (accounts 1–2000 with balance 0): it returns the cluster, the
// proxy, the new database's shard databases, and whether app is sharded
// before the cutover.
func startSessionObjectsEnv(t *testing.T, ctx context.Context, mode, kind string) (*pgtest.Cluster, *operated, []string, bool) {
	switch kind {
	case "becomes sharded":
		c, o, _ := startCutoverEnvMode(t, ctx, mode)
		return c, o, []string{"app_new_0", "app_new_1"}, false
	case "sharded to new shards":
		c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
			"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10", "max_prepared_transactions": "20",
		}})
		shards := func(name string, n int) string { return createShardDBs(t, ctx, c, name, n) }
		const rules = "\n    sharded_tables: [{ table: accounts, column: id, type: bigint }]"
		yml := reshardYAML(fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: 10, checkout_timeout: 5s }
limits: { client_login_timeout: 5s }`, mode), c, rules, []string{shards("app", 2)}, []string{shards("app_new", 3)})
		for s := range 2 {
			reshardExec(t, ctx, reshardConnect(t, ctx, c.DSN(fmt.Sprintf("app_%d", s))), fmt.Sprintf(`
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO accounts SELECT i, 0 FROM generate_series(1, 2000) i WHERE i = ANY (%s)`, ownedIDs(1, 2000, 2, s)))
		}
		return c, startOperated(t, yml), []string{"app_new_0", "app_new_1", "app_new_2"}, true
	}
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
pool: { mode: %s, size: 10, checkout_timeout: 5s }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - { name: app, shards: [{ host: %s, port: %d, database: app_0 }] }
  - { name: app_new, shards: [{ host: %s, port: %d, database: app_new_0 }] }
`, mode, appPassword, c.User, c.Password, c.Host, c.Port, c.Host, c.Port))
	return c, o, []string{"app_new_0"}, false
}

// waitNotification returns the next notification of conn, running a
// statement between waits: a sharded session's notifications arrive with
// its next statement's answer.
func waitNotification(t *testing.T, ctx context.Context, conn *pgx.Conn) *pgconn.Notification {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := pollNotification(ctx, conn, 1); n != nil {
			return n
		}
	}
	t.Fatal("no notification within 10s")
	return nil
}

// pollNotification runs SELECT 1 on conn and waits a little for a
// notification, rounds times; nil when none came.
func pollNotification(ctx context.Context, conn *pgx.Conn, rounds int) *pgconn.Notification {
	for range rounds {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err == nil {
			return n
		}
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			return &pgconn.Notification{Channel: "error", Payload: err.Error()}
		}
	}
	return nil
}

// detailOf is the Detail of err's PostgreSQL error, if it is one.
func detailOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Detail
	}
	return ""
}
