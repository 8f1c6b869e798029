package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
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
// database app but admin's own, and waits until they are gone
// (terminateBackends).
func terminateApp(t *testing.T, admin *pgx.Conn, all bool, pid string) {
	t.Helper()
	where := "pid = " + pid
	if all {
		where = "datname = 'app' AND backend_type = 'client backend'"
	}
	terminateBackends(t, admin, where)
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

// TestRetryDeadIdleShard is TestRetryDeadIdleServer on a sharded database:
// the server of the shard a statement is routed to was terminated while
// idle in its pool, less than a second after its last use, so the pool
// lends it without a probe. The statement still succeeds, on another
// server of that shard, in every protocol mode, with the client's
// settings; so does a statement fanned out to both shards after both
// shards' servers were terminated.
func TestRetryDeadIdleShard(t *testing.T) {
	checkGoroutines(t)
	cl, p := twoShardsFourRows(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := simpleConn(t, cl.DSN("postgres"))
	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{
		{"simple", pgx.QueryExecModeSimpleProtocol},
		{"exec", pgx.QueryExecModeExec},
		{"describe", pgx.QueryExecModeDescribeExec},
		{"prepared", pgx.QueryExecModeCacheStatement},
	}
	const routed = "SELECT email, current_setting('statement_timeout'), pg_backend_pid()::text, current_database()::text FROM accounts WHERE id = $1"
	const fanned = "SELECT count(*), sum(id)::text FROM accounts WHERE id > $1 AND id < 100"
	for k, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			c := connectConfig(t, p.AppURL("app"), m.mode, nil)
			mustExec(t, c, "SET statement_timeout = '7s'")
			first := row(t, c, m.mode, routed, 1)
			checkRow(t, "before", first[:2], "a", "7s")
			terminateBackends(t, admin, "pid = "+first[2])
			got, err := queryRow(c, m.mode, routed, 1)
			if err != nil {
				t.Fatalf("the routed statement after its shard's idle server was terminated: %s", errText(err))
			}
			checkRow(t, "after", got[:2], "a", "7s")
			if got[2] == first[2] {
				t.Fatalf("still on the terminated backend %s", got[2])
			}

			pl := p.Listener.State().Pools.Get(p.Config.Database("app"), p.Config.User("app"), shardOf(t, 1, 2))
			checkRow(t, "again", row(t, c, m.mode, routed, 1)[:2], "a", "7s")
			before := pl.Stats.Checkouts.Load()
			terminateBackends(t, admin, "pid = "+row(t, c, m.mode, routed, 1)[2])
			checkRow(t, "after another", row(t, c, m.mode, routed, 1)[:2], "a", "7s")
			if n := pl.Stats.Checkouts.Load() - before; n < 3 || n != 3 && m.name != "describe" {
				// describe: the Parse's Describe may take the shard's
				// server in a batch of its own.
				t.Fatalf("%d checkouts of the shard for two statements, want 3: the dead server once more", n)
			}

			checkRow(t, "fan-out before", row(t, c, m.mode, fanned, 0), "4", "10")
			terminateBackends(t, admin, "datname IN ('shard0', 'shard1') AND backend_type = 'client backend'")
			got, err = queryRow(c, m.mode, fanned, 0)
			if err != nil {
				t.Fatalf("the fanned-out statement after both shards' idle servers were terminated: %s", errText(err))
			}
			checkRow(t, "fan-out after", got, "4", "10")
			checkRow(t, "next", row(t, c, m.mode, routed, 2)[:2], "b", "7s")
		})
		t.Run(m.name+"/transaction", func(t *testing.T) {
			// A shard that joins an open transaction takes a server of
			// its pool, dead: the transaction goes on there on another.
			a := int64(100 + 10*k)
			b := a + 1
			for shardOf(t, b, 2) == shardOf(t, a, 2) {
				b++
			}
			c := connectConfig(t, p.AppURL("app"), m.mode, nil)
			// b's shard server is used just now: no probe at its checkout.
			if _, err := c.Exec(ctx, "SELECT id FROM accounts WHERE id = $1", m.mode, b); err != nil {
				t.Fatal(err)
			}
			mustExec(t, c, "BEGIN")
			// In the simple protocol: a Describe would take a server of a
			// random shard into the transaction (anyShard), which the
			// termination must not hit.
			if _, err := c.Exec(ctx, "INSERT INTO accounts (id, email) VALUES ($1, 'in tx')", pgx.QueryExecModeSimpleProtocol, a); err != nil {
				t.Fatal(err)
			}
			terminateBackends(t, admin, fmt.Sprintf("datname = 'shard%d' AND backend_type = 'client backend'", shardOf(t, b, 2)))
			if _, err := c.Exec(ctx, "INSERT INTO accounts (id, email) VALUES ($1, 'in tx')", m.mode, b); err != nil {
				t.Fatalf("the statement that joins the dead server's shard to the transaction: %s", errText(err))
			}
			mustExec(t, c, "COMMIT")
			checkRow(t, "committed", row(t, c, m.mode, "SELECT count(*) FROM accounts WHERE email = 'in tx' AND id IN ($1, $2)", a, b), "2")
		})
	}
}

// twoShardsFourRows is twoShards in transaction mode with accounts 1 to 4
// ('a' to 'd') written through the proxy.
func twoShardsFourRows(t *testing.T) (*pgtest.Cluster, *proxy) {
	cl, p := twoShards(t, "transaction")
	setup := connect(t, p.AppURL("app"))
	if _, err := setup.Exec(context.Background(), "INSERT INTO accounts (id, email) VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	setup.Close(context.Background())
	return cl, p
}

// TestRetryDeadIdleShardBatches is TestRetryDeadIdleShard on the paths a
// driver takes besides one statement per round trip, each sent just after
// both shards' idle servers were terminated, and answered exactly as the
// same round trip just before:
//
//   - a simple Query with a statement routed to each shard;
//   - a pipeline of two routed Parse/Bind/Execute and a fanned-out one
//     under one Sync;
//   - a row-limited Execute of a routed portal answered up to a Flush (the
//     portal then runs on, up to its Sync).
func TestRetryDeadIdleShardBatches(t *testing.T) {
	checkGoroutines(t)
	cl, p := twoShardsFourRows(t)
	var ids [2]int64 // a row on each shard
	for id := int64(1); id <= 4; id++ {
		ids[shardOf(t, id, 2)] = id
	}
	if ids[0] == 0 || ids[1] == 0 {
		t.Fatalf("rows 1 to 4 are all on one shard: %v", ids)
	}
	admin := simpleConn(t, cl.DSN("postgres"))
	c := newRawClient(t, p)
	routed := func(id int64) string { return fmt.Sprintf("SELECT email FROM accounts WHERE id = %d", id) }
	paths := []struct {
		name string
		run  func() string
	}{
		{"multi-statement query", func() string {
			c.query(routed(ids[0]) + "; " + routed(ids[1]))
			c.flush()
			return c.readUntilReady()
		}},
		{"pipeline with one sync", func() string {
			for _, id := range ids {
				c.parse("", "SELECT email FROM accounts WHERE id = $1")
				c.bindExec("", fmt.Sprint(id))
			}
			c.parse("", "SELECT count(*) FROM accounts WHERE id < $1")
			c.bindExec("", "100")
			c.sync()
			c.flush()
			return c.readUntilReady()
		}},
		{"row-limited execute", func() string {
			c.parse("", "SELECT email, g FROM accounts, generate_series(1, 3) g WHERE id = $1 ORDER BY g")
			c.fe.SendBind(&pgproto3.Bind{DestinationPortal: "c", Parameters: [][]byte{[]byte(fmt.Sprint(ids[1]))}})
			c.fe.SendExecute(&pgproto3.Execute{Portal: "c", MaxRows: 2})
			c.fe.Send(&pgproto3.Flush{})
			c.flush()
			first := c.read(4) // 1 2 D D s
			c.fe.SendExecute(&pgproto3.Execute{Portal: "c", MaxRows: 2})
			c.sync()
			c.flush()
			return first + " | " + c.readUntilReady()
		}},
	}
	for _, path := range paths {
		want := path.run()
		if strings.Contains(want, "E(") {
			t.Fatalf("%s before any termination: %s", path.name, want)
		}
		terminateBackends(t, admin, "datname IN ('shard0', 'shard1') AND backend_type = 'client backend'")
		if got := path.run(); got != want {
			t.Fatalf("%s after both shards' idle servers were terminated:\n got %s\nwant %s", path.name, got, want)
		}
	}
}

// TestRetryShardNotForATerminatedStatement is
// TestRetryNotForATerminatedStatement on a sharded database: a routed
// statement whose backend an operator terminated while it ran is not run
// again.
func TestRetryShardNotForATerminatedStatement(t *testing.T) {
	cl, p := twoShards(t, "transaction")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 2 {
		if err := cl.Exec(ctx, fmt.Sprintf("shard%d", i), "CREATE SEQUENCE retry_once"); err != nil {
			t.Fatal(err)
		}
	}
	setup := connect(t, p.AppURL("app"))
	if _, err := setup.Exec(ctx, "INSERT INTO accounts (id, email) VALUES (1, 'a')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	setup.Close(ctx)
	admin := simpleConn(t, cl.DSN("postgres"))
	shard := fmt.Sprintf("shard%d", shardOf(t, 1, 2))
	seq := simpleConn(t, cl.DSN(shard))
	const stmt = "SELECT nextval('retry_once'), pg_sleep(5) FROM accounts WHERE id = $1"
	for _, m := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		mustExec(t, seq, "ALTER SEQUENCE retry_once RESTART")
		c := connectConfig(t, p.AppURL("app"), m, nil)
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(context.Background(), stmt, m, 1)
			done <- err
		}()
		// Past deadServerWindow: the statement has run for a while, as an
		// operator sees it.
		const running = "datname = '" + "%s" + "' AND query LIKE 'SELECT nextval(''retry_once'')%%' AND state = 'active'"
		where := fmt.Sprintf(running, shard)
		eventually(t, 5*time.Second, "the statement to run for 200 ms", func() bool {
			return value(t, admin, simple, "SELECT count(*) FROM pg_stat_activity WHERE "+where+" AND clock_timestamp() - query_start > interval '200 ms'") == "1"
		})
		value(t, admin, simple, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "+where)
		err := <-done
		if err == nil || !strings.Contains(errText(err), "57P01") && !strings.Contains(errText(err), "08006") {
			t.Fatalf("%v: the terminated statement answered %v, want an error", m, err)
		}
		if got := value(t, seq, simple, "SELECT last_value FROM retry_once"); got != "1" {
			t.Fatalf("%v: the sequence is at %s after the terminated statement: it ran again", m, got)
		}
	}
}

// terminateBackends terminates the backends that where selects in
// pg_stat_activity and waits until they are gone, well under the second
// after which the pool probes an idle server.
func terminateBackends(t *testing.T, admin *pgx.Conn, where string) {
	t.Helper()
	start := time.Now()
	where += " AND pid <> pg_backend_pid()"
	if n := value(t, admin, simple, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "+where); n == "0" {
		t.Fatalf("no backend terminated")
	}
	eventually(t, 5*time.Second, "the terminated backends to exit", func() bool {
		return value(t, admin, simple, "SELECT count(*) FROM pg_stat_activity WHERE "+where) == "0"
	})
	if d := time.Since(start); d > 900*time.Millisecond {
		t.Fatalf("terminating took %s: the pool may have probed the server instead of lending it", d)
	}
}
