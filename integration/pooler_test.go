package integration

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/lib/pq"

	"github.com/shardgate/shardgate/wire"
)

var execModes = []pgx.QueryExecMode{
	pgx.QueryExecModeSimpleProtocol,
	pgx.QueryExecModeExec,
	pgx.QueryExecModeDescribeExec,
	pgx.QueryExecModeCacheDescribe,
	pgx.QueryExecModeCacheStatement,
}

// TestQueryModes runs the same statements in every pgx execution mode,
// from many goroutines over a pool smaller than the client count, so that
// statements keep moving between server connections.
func TestQueryModes(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	setup := connect(t, p.AppURL("app"))
	ctx := context.Background()
	if _, err := setup.Exec(ctx, "CREATE TABLE kv (k int PRIMARY KEY, v text, at timestamptz DEFAULT now())"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			if _, err := setup.Exec(ctx, "TRUNCATE kv"); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					cfg, _ := pgx.ParseConfig(p.AppURL("app"))
					cfg.DefaultQueryExecMode = mode
					conn, err := pgx.ConnectConfig(ctx, cfg)
					if err != nil {
						errs <- err
						return
					}
					defer conn.Close(ctx)
					for i := 0; i < 25; i++ {
						k := w*1000 + i
						if _, err := conn.Exec(ctx, "INSERT INTO kv (k, v) VALUES ($1, $2)", k, fmt.Sprint("v", k)); err != nil {
							errs <- fmt.Errorf("insert: %w", err)
							return
						}
						var v string
						if err := conn.QueryRow(ctx, "SELECT v FROM kv WHERE k = $1", k).Scan(&v); err != nil {
							errs <- fmt.Errorf("select: %w", err)
							return
						}
						if v != fmt.Sprint("v", k) {
							errs <- fmt.Errorf("got %q for %d", v, k)
							return
						}
					}
				}(w)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var n int
			if err := setup.QueryRow(ctx, "SELECT count(*) FROM kv").Scan(&n); err != nil || n != 200 {
				t.Fatalf("count %d err %v", n, err)
			}
		})
	}
}

func TestLibPQ(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	db, err := sql.Open("postgres", p.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(6)
	if _, err := db.Exec("CREATE TABLE t (id serial PRIMARY KEY, name text)"); err != nil {
		t.Fatal(err)
	}
	stmt, err := db.Prepare("INSERT INTO t (name) VALUES ($1) RETURNING id")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				var id int
				if err := stmt.QueryRow(fmt.Sprint("n", i)).Scan(&id); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM t WHERE name LIKE $1", "n%").Scan(&n); err != nil || n != 120 {
		t.Fatalf("count %d err %v", n, err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DELETE FROM t"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT count(*) FROM t").Scan(&n); err != nil || n != 120 {
		t.Fatalf("after rollback count %d err %v", n, err)
	}
}

func TestAuthErrors(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	tests := []struct {
		name, url, code string
	}{
		{"wrong password", p.URL("app", "nope", "app"), wire.InvalidPassword},
		{"unknown user", p.URL("mallory", "x", "app"), wire.InvalidPassword},
		{"unknown database", p.AppURL("nosuchdb"), wire.InvalidCatalogName},
		{"admin with app password", p.URL("admin", appPassword, "admin"), wire.InvalidPassword},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := pgx.Connect(ctx, tc.url)
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connected")
			}
			if got := sqlstate(err); got != tc.code {
				t.Fatalf("SQLSTATE %q, want %s (%v)", got, tc.code, err)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	conn := connect(t, p.AppURL("app"))
	ctx := context.Background()
	go func() {
		// Cancel once the query runs on the server.
		probe := connect(t, cl.DSN("app"))
		eventually(t, 10*time.Second, "pg_sleep to start", func() bool {
			var n int
			probe.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&n)
			return n == 1
		})
		if err := conn.PgConn().CancelRequest(ctx); err != nil {
			t.Errorf("cancel request: %v", err)
		}
	}()
	start := time.Now()
	_, err := conn.Exec(ctx, "SELECT pg_sleep(30)")
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("cancel took %s", took)
	}
	if got := sqlstate(err); got != wire.QueryCanceled {
		t.Fatalf("SQLSTATE %q, want 57014 (%v)", got, err)
	}
	// The connection is usable afterwards.
	var one int
	if err := conn.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after cancel: %v", err)
	}
}

// TestSessionIsolation: two clients share one server connection (pool size
// 1); settings of one never leak to the other, and survive server changes.
func TestSessionIsolation(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	// The same startup parameters: servers are opened with a client's
	// startup parameters, so only such clients share one.
	a := connect(t, p.AppURL("app")+"&application_name=alice")
	b := connect(t, p.AppURL("app")+"&application_name=alice")
	show := func(c *pgx.Conn, name string) string {
		t.Helper()
		var v string
		if err := c.QueryRow(ctx, "SELECT current_setting('"+name+"')").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	pid := func(c *pgx.Conn) int {
		var p int
		c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p)
		return p
	}
	if pid(a) != pid(b) {
		t.Fatal("pool of 1 should share one server connection")
	}
	mustExec(t, a, "SET search_path TO alice_schema, public")
	mustExec(t, a, "SET statement_timeout = '7s'")
	if got := show(b, "search_path"); got != `"$user", public` {
		t.Fatalf("b sees search_path %q", got)
	}
	if got := show(b, "application_name"); got != "alice" {
		t.Fatalf("b sees application_name %q", got)
	}
	if got := show(a, "search_path"); got != "alice_schema, public" {
		t.Fatalf("a lost search_path: %q", got)
	}
	if got := show(a, "statement_timeout"); got != "7s" {
		t.Fatalf("a lost statement_timeout: %q", got)
	}
	if got := show(a, "application_name"); got != "alice" {
		t.Fatalf("a lost application_name: %q", got)
	}
	// SET inside a rolled-back transaction is undone; SET LOCAL lasts for
	// its transaction only.
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SET statement_timeout = '9s'")
	mustExec(t, a, "ROLLBACK")
	if got := show(a, "statement_timeout"); got != "7s" {
		t.Fatalf("rolled-back SET kept: %q", got)
	}
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "SET LOCAL statement_timeout = '3s'")
	if got := show(a, "statement_timeout"); got != "3s" {
		t.Fatalf("SET LOCAL not in effect: %q", got)
	}
	mustExec(t, a, "COMMIT")
	if got := show(a, "statement_timeout"); got != "7s" {
		t.Fatalf("SET LOCAL leaked: %q", got)
	}
	// A committed SET in a transaction stays.
	mustExec(t, a, "BEGIN; SET statement_timeout = '8s'; COMMIT")
	if got := show(a, "statement_timeout"); got != "8s" {
		t.Fatalf("committed SET lost: %q", got)
	}
	mustExec(t, a, "RESET statement_timeout")
	if got := show(a, "statement_timeout"); got != "0" {
		t.Fatalf("RESET: %q", got)
	}
	if got := show(b, "statement_timeout"); got != "0" {
		t.Fatalf("b sees statement_timeout %q", got)
	}
	mustExec(t, a, "RESET ALL")
	if got := show(a, "search_path"); got != `"$user", public` {
		t.Fatalf("RESET ALL left search_path %q", got)
	}
}

func mustExec(t testing.TB, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestDisconnectMidTransaction: a client that vanishes inside a transaction
// leaves a clean server for the next client.
func TestDisconnectMidTransaction(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (x int)")
	setup.Close(ctx)

	a, err := pgx.Connect(ctx, p.AppURL("app"))
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, a, "SET work_mem = '7MB'")
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "INSERT INTO t VALUES (1)")
	mustExec(t, a, "SET search_path TO nowhere")
	a.PgConn().Conn().Close() // vanish without Terminate

	b := connect(t, p.AppURL("app"))
	var status string
	var n int
	var wm, sp string
	err = b.QueryRow(ctx, "SELECT (SELECT count(*) FROM t), current_setting('work_mem'), current_setting('search_path')").Scan(&n, &wm, &sp)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 || wm != "4MB" || sp != `"$user", public` {
		t.Fatalf("dirty server: rows %d work_mem %s search_path %s", n, wm, sp)
	}
	direct := connect(t, cl.DSN("app"))
	if err := direct.QueryRow(ctx, "SELECT count(*)::text FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'").Scan(&status); err != nil || status != "0" {
		t.Fatalf("%s servers still in a transaction (%v)", status, err)
	}
}

func TestSessionMode(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "session", 2, "app"))
	ctx := context.Background()
	a := connect(t, p.AppURL("app"))
	var pid1, pid2 int
	a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid1)
	mustExec(t, a, "PREPARE q AS SELECT 42")
	mustExec(t, a, "CREATE TEMP TABLE tmp (x int)")
	a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2)
	if pid1 != pid2 {
		t.Fatal("session mode changed server connection")
	}
	var v int
	if err := a.QueryRow(ctx, "EXECUTE q").Scan(&v); err != nil || v != 42 {
		t.Fatalf("EXECUTE q: %v", err)
	}
	a.Close(ctx)
	// The next client gets the same (now clean) server: no temp table, no
	// prepared statement.
	b := connect(t, p.AppURL("app"))
	var pid3 int
	b.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid3)
	if pid3 != pid1 {
		t.Logf("next client got another server (%d, first was %d)", pid3, pid1)
	}
	if _, err := b.Exec(ctx, "EXECUTE q"); sqlstate(err) != wire.InvalidSQLStatementName {
		t.Fatalf("prepared statement leaked across sessions: %v", err)
	}
	if _, err := b.Exec(ctx, "SELECT * FROM tmp"); sqlstate(err) != wire.UndefinedTable {
		t.Fatalf("temp table leaked across sessions: %v", err)
	}
}

func TestCheckoutTimeout(t *testing.T) {
	cl := cluster(t, "app")
	cfg := strings.Replace(poolConfig(cl, "transaction", 1, "app"), "checkout_timeout: 2s", "checkout_timeout: 200ms", 1)
	p := startProxy(t, cfg)
	ctx := context.Background()
	holder := connect(t, p.AppURL("app"))
	mustExec(t, holder, "BEGIN")
	waiter := connect(t, p.AppURL("app"))
	_, err := waiter.Exec(ctx, "SELECT 1")
	if got := sqlstate(err); got != wire.TooManyConnections {
		t.Fatalf("SQLSTATE %q, want 53300 (%v)", got, err)
	}
	mustExec(t, holder, "COMMIT")
	// The waiting client stayed connected and works now.
	var one int
	if err := waiter.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("after timeout: %v", err)
	}
}

func TestMaxClientConn(t *testing.T) {
	cl := cluster(t, "app")
	cfg := strings.Replace(poolConfig(cl, "transaction", 2, "app"), "limits: {", "limits: { max_client_conn: 2,", 1)
	p := startProxy(t, cfg)
	ctx := context.Background()
	connect(t, p.AppURL("app"))
	connect(t, p.AppURL("app"))
	_, err := pgx.Connect(ctx, p.AppURL("app"))
	if got := sqlstate(err); got != wire.TooManyConnections {
		t.Fatalf("SQLSTATE %q, want 53300 (%v)", got, err)
	}
}

func TestServerTerminated(t *testing.T) {
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	c := connect(t, p.AppURL("app"))
	var pid int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	direct := connect(t, cl.DSN("app"))
	mustExec(t, direct, "SELECT pg_terminate_backend($1)", pid)
	// The dead idle server is noticed and replaced: the client never sees
	// an error outside a transaction (at most one, see below).
	var pid2 int
	err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2)
	if err != nil {
		// Acceptable only as a clean error, after which the client works.
		if sqlstate(err) == "" {
			t.Fatalf("unclean error: %v", err)
		}
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid2); err != nil {
			t.Fatal(err)
		}
	}
	if pid2 == pid {
		t.Fatal("still on the terminated server")
	}
}
