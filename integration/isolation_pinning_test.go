package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/shardgate/shardgate/wire"
)

// column returns the first column of every row sql returns, as text.
func column(t testing.TB, conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
	if err != nil {
		t.Fatalf("%s [%v]: %v", sql, mode, err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatalf("%s [%v]: %v", sql, mode, err)
		}
		out = append(out, fmt.Sprint(vals[0]))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s [%v]: %v", sql, mode, err)
	}
	return out
}

// runOthers runs check n times on each of two other clients at once, while
// the test goes on, and returns a function that waits for them and fails
// the test with the first error one of them saw.
func runOthers(t testing.TB, others []*pgx.Conn, n int, check func(c *pgx.Conn, i int) error) (wait func()) {
	var wg sync.WaitGroup
	errs := make(chan error, len(others))
	for k, c := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				if err := check(c, i); err != nil {
					errs <- fmt.Errorf("client %d, query %d: %w", k, i, err)
					return
				}
			}
		}()
	}
	return func() {
		t.Helper()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}

// expectRow runs sql on c with the simple protocol and returns an error
// unless its first row is want.
func expectRow(c *pgx.Conn, sql string, want ...string) error {
	got, err := queryRow(c, simple, sql)
	if err != nil {
		return err
	}
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		return fmt.Errorf("%s: got %q, want %q", sql, got, want)
	}
	return nil
}

// pinned fails unless a's next transaction runs on backend pid.
func pinned(t testing.TB, a *pgx.Conn, pid string) {
	t.Helper()
	if got := value(t, a, simple, "SELECT pg_backend_pid()::text"); got != pid {
		t.Fatalf("a moved from backend %s to %s while it holds session state there", pid, got)
	}
}

// TestIsoPinning: in transaction mode a client holding session state that
// lives in its backend (a temp table, a session advisory lock, a cursor
// WITH HOLD, LISTEN) keeps its server until the state is gone, and no other
// client ever sees that state; once it is gone the server serves others.
func TestIsoPinning(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	ctx := context.Background()
	direct := simpleConn(t, cl.DSN("app"))
	start := func(t *testing.T) (*proxy, *pgx.Conn, []*pgx.Conn) {
		p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
		return p, simpleConn(t, p.AppURL("app")), []*pgx.Conn{simpleConn(t, p.AppURL("app")), simpleConn(t, p.AppURL("app"))}
	}

	t.Run("temp table", func(t *testing.T) {
		p, a, others := start(t)
		execIn(t, a, simple, "CREATE TEMP TABLE a_tmp (x int)")
		execIn(t, a, simple, "INSERT INTO a_tmp VALUES (1)")
		schema := value(t, a, simple, "SELECT pg_my_temp_schema()::text")
		pid := value(t, a, simple, "SELECT pg_backend_pid()::text")
		wait := runOthers(t, others, 20, func(c *pgx.Conn, i int) error {
			got, err := queryRow(c, simple, "SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())::text, pg_my_temp_schema()::text, (to_regclass('pg_temp.a_tmp') IS NULL)::text")
			if err != nil {
				return err
			}
			if got[0] != "0" || got[1] == schema || got[2] != "true" {
				return fmt.Errorf("temp objects %s, temp schema %s (a's is %s), to_regclass('pg_temp.a_tmp') IS NULL: %s; want 0, not a's, true", got[0], got[1], schema, got[2])
			}
			return nil
		})
		for i := 2; i <= 6; i++ {
			execIn(t, a, simple, fmt.Sprintf("INSERT INTO a_tmp VALUES (%d)", i))
			checkRow(t, "a's temp table", row(t, a, simple, "SELECT count(*) FROM a_tmp"), fmt.Sprint(i))
			pinned(t, a, pid)
		}
		wait()
		execIn(t, a, simple, "DROP TABLE a_tmp")
		holdBoth(t, p)
	})

	t.Run("advisory lock", func(t *testing.T) {
		p, a, others := start(t)
		execIn(t, a, simple, "SELECT pg_advisory_lock(42)")
		pid := value(t, a, simple, "SELECT pg_backend_pid()::text")
		checkRow(t, "owner of advisory lock 42 seen directly", column(t, direct, simple, "SELECT pid::text FROM pg_locks WHERE locktype = 'advisory' AND objid = 42 AND granted"), pid)
		wait := runOthers(t, others, 20, func(c *pgx.Conn, i int) error {
			return expectRow(c, "SELECT pg_try_advisory_lock(42)::text, (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())::text", "false", "0")
		})
		for range 5 {
			checkRow(t, "a's advisory locks", row(t, a, simple, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"), "1")
			pinned(t, a, pid)
		}
		wait()
		checkRow(t, "a unlocks", row(t, a, simple, "SELECT pg_advisory_unlock(42)"), "true")
		holdBoth(t, p)

		execIn(t, a, simple, "SELECT pg_advisory_lock(42)")
		a.Close(ctx)
		eventually(t, 5*time.Second, "a direct connection to get advisory lock 42 after a left", func() bool {
			if value(t, direct, simple, "SELECT pg_try_advisory_lock(42)") != "true" {
				return false
			}
			execIn(t, direct, simple, "SELECT pg_advisory_unlock(42)")
			return true
		})
	})

	t.Run("cursor WITH HOLD", func(t *testing.T) {
		p, a, others := start(t)
		execIn(t, a, simple, "DECLARE c CURSOR WITH HOLD FOR SELECT g FROM generate_series(1, 10) g")
		pid := value(t, a, simple, "SELECT pg_backend_pid()::text")
		wait := runOthers(t, others, 20, func(c *pgx.Conn, i int) error {
			return expectRow(c, "SELECT count(*)::text FROM pg_cursors WHERE name = 'c'", "0")
		})
		checkRow(t, "FETCH 3", column(t, a, simple, "FETCH 3 FROM c"), "1", "2", "3")
		pinned(t, a, pid)
		checkRow(t, "FETCH 3 again", column(t, a, simple, "FETCH 3 FROM c"), "4", "5", "6")
		wait()
		execIn(t, a, simple, "CLOSE c")
		holdBoth(t, p)
	})

	t.Run("LISTEN", func(t *testing.T) {
		p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
		a := simpleConn(t, p.AppURL("app"))
		var heard atomic.Int32
		var others []*pgx.Conn
		for range 2 {
			cfg, err := pgx.ParseConfig(p.AppURL("app"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = simple
			cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) { heard.Add(1) }
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(ctx) })
			others = append(others, c)
		}
		execIn(t, a, simple, "LISTEN ch")
		pid := value(t, a, simple, "SELECT pg_backend_pid()::text")
		for _, payload := range []string{"hello", "again"} {
			var notify sync.Once
			wait := runOthers(t, others, 20, func(c *pgx.Conn, i int) error {
				var err error
				if i == 10 {
					notify.Do(func() { _, err = direct.Exec(ctx, "SELECT pg_notify('ch', $1)", payload) })
				}
				if err != nil {
					return err
				}
				return expectRow(c, "SELECT count(*)::text FROM pg_listening_channels()", "0")
			})
			wait()
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n, err := a.WaitForNotification(wctx)
			cancel()
			if err != nil {
				t.Fatalf("a waiting for notification %q: %v", payload, err)
			}
			if n.Channel != "ch" || n.Payload != payload {
				t.Fatalf("a's notification: %s %q, want ch %q", n.Channel, n.Payload, payload)
			}
			checkRow(t, "a's channels", column(t, a, simple, "SELECT pg_listening_channels()"), "ch")
			pinned(t, a, pid)
		}
		if n := heard.Load(); n != 0 {
			t.Fatalf("other clients received %d notifications for a's channel", n)
		}
		execIn(t, a, simple, "UNLISTEN ch")
		holdBoth(t, p)
	})
}

// TestIsoSQLPrepare: SQL-level PREPARE, EXECUTE and DEALLOCATE in
// transaction mode work for the client that prepared, across transactions
// and servers, and no other client sees its statements.
func TestIsoSQLPrepare(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	// The client's own statements show under proxy-wide names in
	// transaction mode (see notProxyNamed): EXECUTE tells that they are
	// there, and no client name may ever show.
	const ownStatements = "SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_prepared_statements WHERE name NOT LIKE 'stmtcache%' AND " + notProxyNamed
	const allStatements = "SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_prepared_statements WHERE " + notProxyNamed
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
			a := connectConfig(t, p.AppURL("app"), mode, nil)
			b := simpleConn(t, p.AppURL("app"))
			c := simpleConn(t, p.AppURL("app"))
			execIn(t, a, mode, "PREPARE q(int) AS SELECT $1 + 1")
			for round := range 4 {
				// c holds a server in a transaction in the even rounds.
				if round%2 == 0 {
					execIn(t, c, simple, "BEGIN")
					value(t, c, simple, "SELECT 1")
				}
				checkRow(t, fmt.Sprintf("round %d: EXECUTE q(41)", round), row(t, a, mode, "EXECUTE q(41)"), "42")
				checkRow(t, fmt.Sprintf("round %d: b's prepared statements", round), row(t, b, simple, allStatements), "")
				if round%2 == 0 {
					checkRow(t, fmt.Sprintf("round %d: c's prepared statements", round), row(t, c, simple, allStatements), "")
					execIn(t, c, simple, "COMMIT")
				}
			}
			checkRow(t, "a's prepared statements", row(t, a, mode, ownStatements), "")
			err := tryExec(a, mode, "PREPARE q AS SELECT 2")
			if pe := pgErr(err); pe == nil || pe.Code != wire.DuplicatePreparedStatement || pe.Message != `prepared statement "q" already exists` {
				t.Fatalf("PREPARE of an existing name: %s, want 42P05 prepared statement \"q\" already exists", errText(err))
			}
			execIn(t, a, mode, "DEALLOCATE q")
			if err := tryExec(a, mode, "EXECUTE q(1)"); sqlstate(err) != wire.InvalidSQLStatementName {
				t.Fatalf("EXECUTE after DEALLOCATE: %s, want 26000", errText(err))
			}
			checkRow(t, "a's prepared statements after DEALLOCATE", row(t, a, mode, ownStatements), "")
			execIn(t, a, mode, "PREPARE q AS SELECT 'again'::text")
			checkRow(t, "EXECUTE of the new q", row(t, a, mode, "EXECUTE q"), "again")
			checkRow(t, "b's prepared statements", row(t, b, simple, allStatements), "")
			a.Close(context.Background())
			if err := tryExec(b, simple, "EXECUTE q"); sqlstate(err) != wire.InvalidSQLStatementName {
				t.Fatalf("b's EXECUTE of a's statement after a left: %s, want 26000", errText(err))
			}
			checkRow(t, "b's prepared statements after a left", row(t, b, simple, allStatements), "")
		})
	}
}

// TestIsoSQLPrepareSharded: on a database of two shards, EXECUTE of a
// statement PREPAREd in SQL is routed by its sharding key argument.
func TestIsoSQLPrepareSharded(t *testing.T) {
	checkGoroutines(t)
	e := newShardedEnv(t, 2)
	for mi, mode := range []pgx.QueryExecMode{simple, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			a := connectConfig(t, e.p.AppURL("app"), mode, nil)
			b := connectConfig(t, e.p.AppURL("app"), simple, nil)
			execIn(t, a, mode, "PREPARE ins(bigint, text) AS INSERT INTO accounts (id, email) VALUES ($1, $2)")
			execIn(t, a, mode, "PREPARE sel(bigint) AS SELECT email FROM accounts WHERE id = $1")
			for k := int64(1); k <= 6; k++ {
				id := int64(mi*100) + k
				email := fmt.Sprintf("e%d", id)
				tag, err := execTag(a, mode, fmt.Sprintf("EXECUTE ins(%d, '%s')", id, email))
				if err != nil || tag != "INSERT 0 1" {
					t.Fatalf("EXECUTE ins(%d): %q %s", id, tag, errText(err))
				}
				checkRow(t, fmt.Sprintf("EXECUTE sel(%d)", id), row(t, a, mode, fmt.Sprintf("EXECUTE sel(%d)", id)), email)
				checkRow(t, fmt.Sprintf("b reads %d", id), row(t, b, simple, "SELECT email FROM accounts WHERE id = $1", id), email)
				for s, conn := range e.direct {
					want := "0"
					if s == hashShard(id, 2) {
						want = "1"
					}
					checkRow(t, fmt.Sprintf("rows of id %d on shard %d", id, s), row(t, conn, simple, "SELECT count(*) FROM accounts WHERE id = $1", id), want)
				}
			}
			if err := tryExec(b, simple, "EXECUTE sel(1)"); sqlstate(err) != wire.InvalidSQLStatementName {
				t.Fatalf("b's EXECUTE of a's statement: %s, want 26000", errText(err))
			}
			execIn(t, a, mode, "DEALLOCATE ins")
			execIn(t, a, mode, "DEALLOCATE sel")
			if err := tryExec(a, mode, "EXECUTE sel(1)"); sqlstate(err) != wire.InvalidSQLStatementName {
				t.Fatalf("EXECUTE after DEALLOCATE: %s, want 26000", errText(err))
			}
		})
	}
}
