package integration

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/frontend"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// Tests of clients served on the event loop (limits.event_loop,
// frontend/hot.go). The rest of the tests run over it too, as it is on by
// default; make test runs the pooler, isolation, retry and park tests once
// more with SHARDGATE_TEST_EVENT_LOOP=0, over goroutines (make
// goroutine-slice).

// hotConfig is a transaction-mode config with the event loop on, whatever
// SHARDGATE_TEST_EVENT_LOOP says.
func hotConfig(t testing.TB, size int) string {
	t.Helper()
	return hotConfigFor(t, cluster(t, "app"), size)
}

// hotConfigFor is hotConfig in front of cl's database app.
func hotConfigFor(t testing.TB, cl *pgtest.Cluster, size int) string {
	t.Helper()
	t.Setenv("SHARDGATE_TEST_EVENT_LOOP", "1")
	c := poolConfig(cl, "transaction", size, "app")
	old := "limits: { client_login_timeout: 5s }"
	if !strings.Contains(c, old) {
		panic("poolConfig changed: update hotConfig")
	}
	return strings.Replace(c, old, "limits: { client_login_timeout: 5s, event_loop: true }", 1)
}

// TestXEventLoop runs the paths that leave the loop for a goroutine and
// come back — a pool wait, COPY FROM STDIN, a batch over 256 KiB, a pinned
// session, a KILL — and checks that each client keeps its coroutine and
// that nothing leaks.
func TestXEventLoop(t *testing.T) {
	checkGoroutines(t)
	p := startProxy(t, hotConfig(t, 1))
	eventLoopPaths(t, p, p.AppURL("app"))
}

// TestXEventLoopTLS is TestXEventLoop with TLS clients, TLS servers and
// both: a client or server keeps its TLS session on the loop, and only
// the socket under crypto/tls moves to the loop's (internal/swapsock). A
// checkout of a TLS server does not take the client off the loop (the
// "many clients" step counts the hand-offs).
func TestXEventLoopTLS(t *testing.T) {
	for _, tc := range []struct {
		name             string
		clients, servers bool
	}{{"clients", true, false}, {"servers", false, true}, {"both", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			checkGoroutines(t)
			ctx := context.Background()
			var cl *pgtest.Cluster
			if tc.servers {
				cl = sslCluster(t, "app")
			} else {
				cl = cluster(t, "app")
			}
			fields := "server_sslmode: disable"
			if tc.servers {
				fields = "server_sslmode: require"
			}
			if tc.clients {
				cert, _ := clientCert(t)
				fields = cert + ", " + fields
			}
			p := startProxy(t, withTLS(t, hotConfigFor(t, cl, 1), fields))
			url := p.AppURL("app")
			if tc.clients {
				url = tlsURL(p, "sslmode=require")
			}
			eventLoopPaths(t, p, url)
			for _, ci := range p.Listener.Clients() {
				if ci.TLS != tc.clients {
					t.Errorf("client %d: TLS %v", ci.ID, ci.TLS)
				}
			}
			// What the servers say of their connections from the proxy.
			c := connect(t, url)
			var ssl bool
			if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || ssl != tc.servers {
				t.Fatalf("the server's connection: ssl %v, %v; want %v", ssl, err, tc.servers)
			}
			if n := p.Listener.HotClients(); n != 2 {
				t.Fatalf("%d clients on the event loop, want 2", n)
			}
		})
	}
}

// eventLoopPaths is TestXEventLoop's body, for clients that connect to
// p with url.
func eventLoopPaths(t *testing.T, p *proxy, url string) {
	ctx := context.Background()
	a := connect(t, url)
	b := connect(t, url)
	mustExec(t, a, "CREATE TABLE t (id int, v text)")
	// A client moves to the loop just after its login's ReadyForQuery
	// went out (client.run): b, which has sent nothing since, may not
	// be counted yet when connect returns.
	eventually(t, 5*time.Second, "both clients on the event loop", func() bool { return p.Listener.HotClients() == 2 })

	t.Run("pool wait", func(t *testing.T) {
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		offs := p.Listener.HotHandoffs()
		done := make(chan error, 1)
		go func() {
			var n int
			done <- b.QueryRow(ctx, "SELECT 41 + 1").Scan(&n)
		}()
		waitingClient(t, p, done)
		if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1, 'x')"); err != nil {
			t.Fatal(err)
		}
		releaseWaiter(t, p, tx, done, offs)
	})

	t.Run("copy", func(t *testing.T) {
		rows := make([][]any, 5000)
		for i := range rows {
			rows[i] = []any{i, strings.Repeat("y", 100)}
		}
		n, err := a.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"id", "v"}, pgx.CopyFromRows(rows))
		if err != nil || n != int64(len(rows)) {
			t.Fatalf("copy: %d rows, %v", n, err)
		}
		var count int
		if err := b.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&count); err != nil || count != len(rows)+1 {
			t.Fatalf("count = %d, %v", count, err)
		}
	})

	t.Run("large batch and result", func(t *testing.T) {
		big := strings.Repeat("z", 600<<10)
		var n int
		if err := a.QueryRow(ctx, "SELECT length($1::text)", big).Scan(&n); err != nil || n != len(big) {
			t.Fatalf("length = %d, %v", n, err)
		}
		var s string
		if err := b.QueryRow(ctx, "SELECT repeat('w', 2000000)").Scan(&s); err != nil || len(s) != 2000000 {
			t.Fatalf("len = %d, %v", len(s), err)
		}
	})

	t.Run("pinned", func(t *testing.T) {
		mustExec(t, a, "CREATE TEMP TABLE tmp (x int)") // pins a to its server
		mustExec(t, a, "INSERT INTO tmp VALUES (7)")
		var x int
		if err := a.QueryRow(ctx, "SELECT x FROM tmp").Scan(&x); err != nil || x != 7 {
			t.Fatalf("x = %d, %v", x, err)
		}
		mustExec(t, a, "DROP TABLE tmp")
		// Unpinned again; b can have the pool's one server.
		if err := b.QueryRow(ctx, "SELECT 1").Scan(&x); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("many clients", func(t *testing.T) {
		offs := p.Listener.HotHandoffs()
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Go(func() {
				c, err := pgx.Connect(ctx, url)
				if err != nil {
					errs <- err
					return
				}
				defer c.Close(ctx)
				for j := range 20 {
					var got string
					want := fmt.Sprintf("%d-%d", i, j)
					if err := c.QueryRow(ctx, "SELECT $1::text", want).Scan(&got); err != nil || got != want {
						errs <- fmt.Errorf("client %d: got %q, %v", i, got, err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// 16 clients took turns on one server without leaving the loop.
		if n := p.Listener.HotHandoffs(); n != offs {
			t.Errorf("%d hand-offs to a goroutine among clients waiting for the pool", n-offs)
		}
	})

	t.Run("kill", func(t *testing.T) {
		eventually(t, 5*time.Second, "the 16 clients to go", func() bool { return len(p.Listener.Clients()) == 2 })
		var id uint64
		for _, ci := range p.Listener.Clients() {
			id = max(id, ci.ID) // b or a: either is idle
		}
		if !p.Listener.Kill(id) {
			t.Fatal("no client to kill")
		}
		eventually(t, 5*time.Second, "the killed client to go", func() bool { return p.Listener.HotClients() == 1 })
	})
}

// waitingClient waits until a client of p waits for a server; done is the
// waiting client's result, which must not come first.
func waitingClient[T any](t *testing.T, p *proxy, done <-chan T) {
	t.Helper()
	eventually(t, 5*time.Second, "a client to wait for the pool", func() bool {
		select {
		case res := <-done:
			t.Fatalf("the client ran while the pool's only server was held: %v", res)
		default:
		}
		for _, ci := range p.Listener.Clients() {
			if ci.State == frontend.ClientWaiting {
				return true
			}
		}
		return false
	})
}

// TestXEventLoopPoolTimeout: a client of the event loop that waits for the
// pool longer than checkout_timeout gets PostgreSQL's 53300 and goes on
// working; one whose server is handed over before then keeps waiting on
// the loop.
func TestXEventLoopPoolTimeout(t *testing.T) {
	checkGoroutines(t)
	cfg := strings.Replace(hotConfig(t, 1), "checkout_timeout: 2s", "checkout_timeout: 300ms", 1)
	p := startProxy(t, cfg)
	ctx := context.Background()
	a := connect(t, p.AppURL("app"))
	b := connect(t, p.AppURL("app"))
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx.Conn(), "SELECT 1")
	start := time.Now()
	var n int
	err = b.QueryRow(ctx, "SELECT 1").Scan(&n)
	if got := sqlstate(err); got != "53300" {
		t.Fatalf("b waiting past checkout_timeout: %v (SQLSTATE %q), want 53300", err, got)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("b gave up after %s, before checkout_timeout", took)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.QueryRow(ctx, "SELECT 7").Scan(&n); err != nil || n != 7 {
		t.Fatalf("b after its timeout: %d, %v", n, err)
	}
	if c := p.Listener.HotClients(); c != 2 {
		t.Fatalf("%d clients on the event loop, want 2", c)
	}
}

// TestEventLoopFile: SHARDGATE_TEST_EVENT_LOOP=1 and =0 reach proxies
// started from a config file — with or without a limits section, flow or
// block style, event_loop set the other way before — and keep the file's
// other settings.
func TestEventLoopFile(t *testing.T) {
	const head = "listen: 127.0.0.1:0\nusers:\n  - { name: app, password: pw }\ndatabases:\n  - name: app\n    shards: [{ host: 127.0.0.1, port: 5432, database: app }]\n"
	for _, tc := range []struct {
		name, env, limits string
		want              bool
	}{
		{"on, none", "1", "", true},
		{"on, flow", "1", "limits: { in_doubt_timeout: 7s }\n", true},
		{"on, block, off", "1", "limits:\n  in_doubt_timeout: 7s\n  event_loop: false\n", true},
		{"off, none", "0", "", false},
		{"off, flow, on", "0", "limits: { in_doubt_timeout: 7s, event_loop: true }\n", false},
		{"unset, off", "", "limits:\n  in_doubt_timeout: 7s\n  event_loop: false\n", false},
		{"unset, default", "", "limits: { in_doubt_timeout: 7s }\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SHARDGATE_TEST_EVENT_LOOP", tc.env)
			path := filepath.Join(t.TempDir(), "shardgate.yaml")
			if err := os.WriteFile(path, []byte(head+tc.limits), 0o600); err != nil {
				t.Fatal(err)
			}
			eventLoopFile(t, path)
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Limits.EventLoop != tc.want || cfg.Database("app") == nil {
				t.Fatalf("event_loop %v, database app %v", cfg.Limits.EventLoop, cfg.Database("app"))
			}
			if tc.limits != "" && cfg.Limits.InDoubtTimeout != 7*time.Second {
				t.Fatalf("in_doubt_timeout %s, want 7s", cfg.Limits.InDoubtTimeout)
			}
		})
	}
}

// TestXEventLoopPoolWaitPaths: a client of the event loop whose messages
// arrive while the pool's only server is held waits on the loop, in every
// protocol path a driver takes — simple and multi-statement Query, extended
// with the unnamed and a named statement, describe-only, a pipeline of
// several statements with one Sync, row-limited Execute, an error inside a
// pipeline — and then gets, message for message, what PostgreSQL answers
// the same messages directly; without a hand-off to a goroutine.
func TestXEventLoopPoolWaitPaths(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, hotConfigFor(t, cl, 1))
	ctx := context.Background()
	holder := connect(t, p.AppURL("app"))
	mustExec(t, holder, "CREATE TABLE w (id int PRIMARY KEY, v text)")
	mustExec(t, holder, "INSERT INTO w SELECT g, 'v' || g FROM generate_series(1, 5) g")
	for _, tc := range []struct {
		name  string
		msgs  []pgproto3.FrontendMessage
		syncs int // ReadyForQuery messages to read
	}{
		{"simple", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT id, v FROM w WHERE id = 2"}}, 1},
		{"multi-statement", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SELECT 1 AS a; SELECT v FROM w ORDER BY id LIMIT 2; SHOW TimeZone"}}, 1},
		{"unnamed", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT v FROM w WHERE id = $1", ParameterOIDs: []uint32{23}},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("3")}}, &pgproto3.Describe{ObjectType: 'P'},
			&pgproto3.Execute{}, &pgproto3.Sync{}}, 1},
		{"named", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s1", Query: "SELECT v, id FROM w WHERE id > $1 ORDER BY id"}, &pgproto3.Describe{ObjectType: 'S', Name: "s1"}, &pgproto3.Sync{},
			&pgproto3.Bind{PreparedStatement: "s1", Parameters: [][]byte{[]byte("3")}}, &pgproto3.Execute{}, &pgproto3.Sync{}}, 2},
		{"describe-only", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT $1::text AS t, id FROM w"}, &pgproto3.Describe{ObjectType: 'S'}, &pgproto3.Sync{}}, 1},
		{"pipeline", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "INSERT INTO w VALUES ($1, 'p') RETURNING id"}, &pgproto3.Bind{Parameters: [][]byte{[]byte("10")}}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT count(*) FROM w"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "DELETE FROM w WHERE id = 10"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}, 1},
		{"row-limited", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT id FROM w ORDER BY id"}, &pgproto3.Bind{},
			&pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{}, &pgproto3.Sync{}}, 1},
		{"pipeline error", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT nosuchcolumn FROM w"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "SELECT 2"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
			&pgproto3.Query{String: "SELECT 3"}}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := hijacked(t, cl.DSN("app"))
			want := exchange(t, direct, tc.msgs, tc.syncs)
			if last := want[len(want)-1]; !strings.Contains(last, `"ReadyForQuery"`) {
				t.Fatalf("directly: %s", strings.Join(want, "\n"))
			}

			b := hijacked(t, p.AppURL("app"))
			tx, err := holder.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1"); err != nil { // holds the pool's server
				t.Fatal(err)
			}
			offs := p.Listener.HotHandoffs()
			if _, err := b.Conn.Write(encode(t, tc.msgs...)); err != nil {
				t.Fatal(err)
			}
			got := make(chan []string, 1)
			go func() { got <- receiveAll(t, b, tc.syncs) }()
			waitingClient(t, p, got)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if g := <-got; strings.Join(g, "\n") != strings.Join(want, "\n") {
				t.Fatalf("through the proxy, after a pool wait:\n%s\ndirectly:\n%s", strings.Join(g, "\n"), strings.Join(want, "\n"))
			}
			if n := p.Listener.HotHandoffs(); n != offs {
				t.Fatalf("%d hand-offs to a goroutine during the pool wait", n-offs)
			}
		})
	}
}

// exchange sends msgs on hc and returns what comes back up to the syncs-th
// ReadyForQuery, each message rendered as in wire scripts.
func exchange(t *testing.T, hc *pgconn.HijackedConn, msgs []pgproto3.FrontendMessage, syncs int) []string {
	t.Helper()
	if _, err := hc.Conn.Write(encode(t, msgs...)); err != nil {
		t.Fatal(err)
	}
	return receiveAll(t, hc, syncs)
}

// receiveAll reads hc's messages up to the syncs-th ReadyForQuery, rendered
// as in wire scripts. It may run on another goroutine than the test's: it
// reports a failure as a line of its result.
func receiveAll(t *testing.T, hc *pgconn.HijackedConn, syncs int) []string {
	hc.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got []string
	for syncs > 0 {
		msg, err := hc.Frontend.Receive()
		if err != nil {
			return append(got, "receive: "+err.Error())
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			syncs--
		}
		got = append(got, wsRender(msg))
	}
	return got
}

// TestXEventLoopSharded: a sharded database's clients are served on the
// event loop too. A statement routed to one shard runs there in every
// protocol path without a hand-off to a goroutine, a pool wait for a
// shard's server waits there, and the steps that wait on something else
// (an ORDER BY over text, whose merge reads the shards' catalog over
// connections of its own) leave for a goroutine and come back. Answers
// are compared with the same statements on one plain database, and the
// next client sees nothing of the first's session.
func TestXEventLoopSharded(t *testing.T) {
	t.Setenv("SHARDGATE_TEST_EVENT_LOOP", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, p, plainURL := twoShardsBesidePlain(t, ctx)
	plain := connect(t, plainURL)
	a := connect(t, p.AppURL("app"))
	b := connect(t, p.AppURL("app"))
	// Each moves to the loop just after its login's ReadyForQuery went
	// out (client.run), which connect may return before.
	eventually(t, 5*time.Second, "both clients on the event loop", func() bool { return p.Listener.HotClients() == 2 })
	k0, k1 := twoShardKeys(t)
	for _, c := range []*pgx.Conn{plain, a} {
		if _, err := c.Exec(ctx, "INSERT INTO accounts VALUES ($1, 'x@a'), ($2, 'y@b')", k0, k1); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("routed paths", func(t *testing.T) {
		// Warm up: the first use of a statement may open the shard's
		// server, which is done on a goroutine.
		for _, k := range []int64{k0, k1} {
			var s string
			if err := a.QueryRow(ctx, "SELECT email FROM accounts WHERE id = $1", k).Scan(&s); err != nil {
				t.Fatal(err)
			}
		}
		offs := p.Listener.HotHandoffs()
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			for _, k := range []int64{k0, k1} {
				var got, want string
				q := "SELECT email || '/' || id FROM accounts WHERE id = $1"
				if err := a.QueryRow(ctx, q, mode, k).Scan(&got); err != nil {
					t.Fatalf("mode %v, key %d: %v", mode, k, err)
				}
				if err := plain.QueryRow(ctx, q, mode, k).Scan(&want); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("mode %v, key %d: %q, plain PostgreSQL %q", mode, k, got, want)
				}
			}
		}
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET email = 'z@a' WHERE id = $1", k0); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if n := p.Listener.HotHandoffs(); n != offs {
			t.Fatalf("%d hand-offs to a goroutine for statements routed to one shard", n-offs)
		}
		if _, err := plain.Exec(ctx, "UPDATE accounts SET email = 'z@a' WHERE id = $1", k0); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("fan-out and two-phase commit", func(t *testing.T) {
		q := "SELECT id, email FROM accounts ORDER BY email DESC"
		got, want := rowsText(t, a, q), rowsText(t, plain, q)
		if got != want {
			t.Fatalf("%s: %q, plain PostgreSQL %q", q, got, want)
		}
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []int64{k0, k1} {
			if _, err := tx.Exec(ctx, "UPDATE accounts SET email = email || '!' WHERE id = $1", k); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Exec(ctx, "UPDATE accounts SET email = email || '!'"); err != nil {
			t.Fatal(err)
		}
		q = "SELECT id, email FROM accounts ORDER BY id"
		if got, want := rowsText(t, b, q), rowsText(t, plain, q); got != want {
			t.Fatalf("the next client: %q, plain PostgreSQL %q", got, want)
		}
		if n := p.Listener.HotClients(); n != 2 {
			t.Fatalf("%d clients on the event loop after the fan-out, want 2", n)
		}
	})

	t.Run("pool wait", func(t *testing.T) {
		var s string
		if err := b.QueryRow(ctx, "SELECT email FROM accounts WHERE id = $1", k0).Scan(&s); err != nil {
			t.Fatal(err)
		}
		tx, err := a.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "SET LOCAL application_name = 'a-only'"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET email = 'w@a' WHERE id = $1", k0); err != nil {
			t.Fatal(err)
		}
		offs := p.Listener.HotHandoffs()
		done := make(chan error, 1)
		go func() {
			var name string
			err := b.QueryRow(ctx, "SELECT email || current_setting('application_name') FROM accounts WHERE id = $1", k0).Scan(&name)
			if err == nil && name != "w@a" {
				err = fmt.Errorf("b read %q, want w@a with its own application_name (empty)", name)
			}
			done <- err
		}()
		waitingClient(t, p, done)
		releaseWaiter(t, p, tx, done, offs)
	})
}

// releaseWaiter commits tx, whose server the client behind done waits
// for, and checks the waiter's result, and that it waited on the loop:
// the checkin woke its coroutine, with no hand-off to a goroutine since
// offs.
func releaseWaiter(t *testing.T, p *proxy, tx pgx.Tx, done <-chan error, offs uint64) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := p.Listener.HotHandoffs(); n != offs {
		t.Fatalf("%d hand-offs to a goroutine during the pool wait", n-offs)
	}
}

// rowsText runs q through the simple protocol and returns its rows as
// text, one line each.
func rowsText(t *testing.T, c *pgx.Conn, q string) string {
	t.Helper()
	rows, err := c.Query(context.Background(), q, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(&out, vals...)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out.String()
}

// TestXEventLoopTLSReadAhead: a TLS client whose first Query comes in the
// same TCP segment as its StartupMessage, in a TLS record of its own. The
// proxy's crypto/tls reads one record per Read, so the Query's record is
// already in the TLS session, not in the socket, when the client moves
// to the event loop after its login; the client's first read on the loop
// must find it there, though epoll has nothing more to report.
func TestXEventLoopTLSReadAhead(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	fields, _ := clientCert(t)
	p := startProxy(t, withTLS(t, trustUser(hotConfigFor(t, cl, 1), cl), fields))

	tc, held := dialTLSHeld(t, p.Addr, 10*time.Second)
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	held.hold = true
	startup := startupPacket(3, 0, "user", "trusty", "database", "app")
	query, _ := (&pgproto3.Query{String: "SELECT 'read ahead'"}).Encode(nil)
	for _, m := range [][]byte{startup, query} {
		if _, err := tc.Write(m); err != nil { // a record each
			t.Fatal(err)
		}
	}
	if err := held.flush(); err != nil { // both records in one write
		t.Fatal(err)
	}
	c := &rawConn{t: t, conn: tc, r: bufio.NewReader(tc)}
	c.login()
	// The client moves to the loop just after its login's ReadyForQuery
	// went out (client.run), which login may return before.
	eventually(t, 5*time.Second, "the client on the event loop", func() bool { return p.Listener.HotClients() == 1 })
	var got []string
	for {
		typ, body, err := c.next()
		if err != nil {
			t.Fatalf("the Query sent ahead was not answered: after %q: %v", got, err)
		}
		got = append(got, string(typ))
		if typ == 'D' {
			got[len(got)-1] += "[" + string(body[6:]) + "]"
		}
		if typ == 'Z' {
			break
		}
	}
	if s := strings.Join(got, " "); s != "T D[read ahead] C Z" {
		t.Fatalf("the Query sent ahead was answered %q", s)
	}
	c.write([]byte{'X', 0, 0, 0, 4})
}

// dialTLSHeld connects to addr, asks for TLS (SSLRequest) and returns a
// TLS client session, not yet handshaken, over a heldWrites of the socket;
// the socket's deadline is in timeout, and it is closed when the test
// ends.
func dialTLSHeld(t *testing.T, addr string, timeout time.Duration) (*tls.Conn, *heldWrites) {
	t.Helper()
	tcp, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcp.Close() })
	tcp.SetDeadline(time.Now().Add(timeout))
	if _, err := tcp.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f}); err != nil { // SSLRequest
		t.Fatal(err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(tcp, answer[:]); err != nil || answer[0] != 'S' {
		t.Fatalf("SSLRequest answered %q, %v", answer[0], err)
	}
	held := &heldWrites{Conn: tcp}
	return tls.Client(held, &tls.Config{InsecureSkipVerify: true}), held
}

// heldWrites holds what is written to its conn while hold is set, until
// flush writes it all at once.
type heldWrites struct {
	net.Conn
	hold bool
	buf  []byte
}

func (h *heldWrites) Write(p []byte) (int, error) {
	if h.hold {
		h.buf = append(h.buf, p...)
		return len(p), nil
	}
	return h.Conn.Write(p)
}

func (h *heldWrites) flush() error {
	_, err := h.Conn.Write(h.buf)
	h.buf = nil
	return err
}
