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

// TestRetryDeadIdleServer: a pooled backend terminated while idle in the
// pool (pg_terminate_backend) is lent to the next statement without a
// probe when it was used less than a second ago (pool.aliveCheckAfter);
// that statement's batch still succeeds, run again on another server, in
// every protocol mode, with the client's settings and prepared statements
// on the new server. The pool's checkout count shows the retry happened:
// one checkout more than the statement's round trips, the dead server's. With every
// idle server terminated, the first dead one makes the pool drop the
// others, so one retry is enough. The same holds for servers reached over
// TLS, whose probe looks at the socket under the session: with every
// server terminated, three servers in the pool and one probe that could
// not see them, the retries ran out.
func TestRetryDeadIdleServer(t *testing.T) {
	checkGoroutines(t)
	t.Run("plain", func(t *testing.T) { testRetryDeadIdleServer(t, isoCluster(t), "") })
	t.Run("tls servers", func(t *testing.T) {
		testRetryDeadIdleServer(t, sslCluster(t, "app"), "server_sslmode: require")
	})
}

// testRetryDeadIdleServer is TestRetryDeadIdleServer on cl, with the
// proxy's tls section fields if not empty (and then checking that the
// servers took TLS).
func testRetryDeadIdleServer(t *testing.T, cl *pgtest.Cluster, tlsFields string) {
	admin := simpleConn(t, cl.DSN("app"))
	modes := []struct {
		name  string
		mode  pgx.QueryExecMode
		trips uint64 // round trips (checkouts) of one statement
	}{
		{"simple", pgx.QueryExecModeSimpleProtocol, 1},
		{"exec", pgx.QueryExecModeExec, 1},
		{"describe", pgx.QueryExecModeDescribeExec, 2}, // Parse+Describe, then Bind+Execute
		{"prepared", pgx.QueryExecModeCacheStatement, 1},
	}
	for _, all := range []bool{false, true} {
		for _, m := range modes {
			name := fmt.Sprintf("%s/one idle server", m.name)
			if all {
				name = fmt.Sprintf("%s/every idle server", m.name)
			}
			t.Run(name, func(t *testing.T) {
				size := 1
				if all {
					size = 5 // more dead servers than retries (frontend.retryTries)
				}
				cfg := poolConfig(cl, "transaction", size, "app")
				if tlsFields != "" {
					cfg = withTLS(t, cfg, tlsFields)
				}
				p := startProxy(t, cfg)
				pl := p.Listener.State().Pools.Get(p.Config.Database("app"), p.Config.User("app"), 0)
				c := connectConfig(t, p.AppURL("app"), m.mode, nil)
				if all {
					fillPool(t, p.AppURL("app"), size)
				}
				mustExec(t, c, "SET statement_timeout = '7s'")
				const stmt = "SELECT $1::int + 1, current_setting('statement_timeout'), pg_backend_pid()::text"
				first := row(t, c, m.mode, stmt, 1)
				checkRow(t, "before", first[:2], "2", "7s")
				if want := fmt.Sprint(tlsFields != ""); value(t, admin, simple, "SELECT ssl::text FROM pg_stat_ssl WHERE pid = $1::int", first[2]) != want {
					t.Fatalf("the server's TLS is not %s", want)
				}
				terminateApp(t, admin, all, first[2])
				before := pl.Stats.Checkouts.Load()
				got, err := queryRow(c, m.mode, stmt, 2)
				if err != nil {
					t.Fatalf("the statement after its idle server was terminated: %s", errText(err))
				}
				checkRow(t, "after", got[:2], "3", "7s")
				if got[2] == first[2] {
					t.Fatalf("still on the terminated backend %s", got[2])
				}
				if n := pl.Stats.Checkouts.Load() - before; n != m.trips+1 {
					t.Fatalf("%d checkouts for the statement, want %d: the dead server once more", n, m.trips+1)
				}
				checkRow(t, "next", row(t, c, m.mode, stmt, 3)[:2], "4", "7s")
			})
		}
	}
}

// fillPool makes the pool open n servers: n clients hold a transaction at
// once, then end it.
func fillPool(t *testing.T, url string, n int) {
	t.Helper()
	ctx := context.Background()
	var txs []pgx.Tx
	for range n {
		tx, err := connect(t, url).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// terminateApp terminates the backend pid, or with all every backend of
// database app but admin's own, and waits until they are gone. It must
// take well under a second (the pool probes servers idle longer).
func terminateApp(t *testing.T, admin *pgx.Conn, all bool, pid string) {
	t.Helper()
	start := time.Now()
	where := "pid = $1::int"
	if all {
		where = "datname = 'app' AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND $1::text IS NOT NULL"
	}
	n := value(t, admin, simple, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "+where, pid)
	if n == "0" {
		t.Fatalf("no backend terminated")
	}
	eventually(t, 5*time.Second, "the terminated backends to exit", func() bool {
		return value(t, admin, simple, "SELECT count(*) FROM pg_stat_activity WHERE "+where, pid) == "0"
	})
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("terminating took %s: the pool may have probed the server instead of lending it", d)
	}
}

// TestRetryRestoreOnDeadServer: a client whose settings differ from those
// of the pooled server it gets has them restored first (SETs of the
// proxy's own); when that server died idle in the pool, the settings and
// then the statement go to another server, and the client sees nothing.
func TestRetryRestoreOnDeadServer(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	admin := simpleConn(t, cl.DSN("app"))
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	c := simpleConn(t, p.AppURL("app"))
	d := simpleConn(t, p.AppURL("app"))
	mustExec(t, c, "SET statement_timeout = '7s'")
	mustExec(t, d, "SET statement_timeout = '9s'") // the one server now carries d's setting
	pid := value(t, d, simple, "SELECT pg_backend_pid()::text")
	terminateApp(t, admin, false, pid)
	got, err := queryRow(c, simple, "SELECT current_setting('statement_timeout'), pg_backend_pid()::text")
	if err != nil {
		t.Fatalf("the statement after its idle server was terminated: %s", errText(err))
	}
	if got[0] != "7s" || got[1] == pid {
		t.Fatalf("got %q, want 7s on a backend other than %s", got, pid)
	}
	checkRow(t, "the other client", row(t, d, simple, "SHOW statement_timeout"), "9s")
}

// TestRetryNotForATerminatedStatement: a statement whose backend an
// operator terminates while it runs is not run again on another server:
// the client gets PostgreSQL's 57P01 (as an ERROR: it held no session) and
// the statement's non-transactional effect (a nextval) happened once. The
// statement is a simple Query that sends nothing before it ends (a DO
// block: no RowDescription), so that the FATAL is the server's first
// answer, as from a server that died idle.
func TestRetryNotForATerminatedStatement(t *testing.T) {
	cl := isoCluster(t)
	admin := simpleConn(t, cl.DSN("app"))
	mustExec(t, admin, "CREATE SEQUENCE IF NOT EXISTS retry_once")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	for _, m := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol} {
		mustExec(t, admin, "ALTER SEQUENCE retry_once RESTART")
		c := connectConfig(t, p.AppURL("app"), m, nil)
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), "DO $$BEGIN PERFORM nextval('retry_once'); PERFORM pg_sleep(5); END$$", m)
			done <- err
		}()
		eventually(t, 5*time.Second, "the statement to run", func() bool {
			return value(t, admin, simple, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'DO $$BEGIN PERFORM nextval(''retry_once'')%' AND state = 'active'") == "1"
		})
		time.Sleep(200 * time.Millisecond) // past deadServerWindow: the statement has run for a while, as an operator sees it
		value(t, admin, simple, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query LIKE 'DO $$BEGIN PERFORM nextval(''retry_once'')%' AND state = 'active'")
		err := <-done
		if err == nil || !strings.Contains(errText(err), "57P01") {
			t.Fatalf("%v: the terminated statement answered %v, want 57P01", m, err)
		}
		if got := value(t, admin, simple, "SELECT last_value FROM retry_once"); got != "1" {
			t.Fatalf("%v: the sequence is at %s after the terminated statement: it ran again", m, got)
		}
	}
}

// TestIdleTLSServerStaysInPool: the probe of a server idle for longer than
// pool.aliveCheckAfter looks at the socket under its TLS session, where a
// live server has sent nothing: the server is lent again, not closed and
// replaced (the same backend answers), and a terminated one is replaced
// without the client seeing it.
func TestIdleTLSServerStaysInPool(t *testing.T) {
	checkGoroutines(t)
	cl := sslCluster(t, "app")
	admin := simpleConn(t, cl.DSN("app"))
	p := startProxy(t, withTLS(t, poolConfig(cl, "transaction", 1, "app"), "server_sslmode: require"))
	c := connect(t, p.AppURL("app"))
	const stmt = "SELECT pg_backend_pid()::text, ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
	first := row(t, c, simple, stmt)
	if first[1] != "true" {
		t.Fatal("the server connection is not TLS")
	}
	time.Sleep(1200 * time.Millisecond) // longer than pool.aliveCheckAfter: the checkout probes the server
	if got := row(t, c, simple, stmt); got[0] != first[0] {
		t.Fatalf("backend %s after an idle second, want %s again: the probe took a live TLS server for dead", got[0], first[0])
	}
	terminateApp(t, admin, false, first[0])
	time.Sleep(1200 * time.Millisecond) // the probe, not the retry, finds it dead
	pl := p.Listener.State().Pools.Get(p.Config.Database("app"), p.Config.User("app"), 0)
	before := pl.Stats.Checkouts.Load()
	if got := row(t, c, simple, stmt); got[0] == first[0] {
		t.Fatalf("still on the terminated backend %s", got[0])
	}
	if n := pl.Stats.Checkouts.Load() - before; n != 1 {
		t.Fatalf("%d checkouts for the statement, want 1: the probe should have closed the dead server", n)
	}
}
