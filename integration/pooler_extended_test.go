package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/frontend"
)

// rawClient is a client speaking the extended protocol message by message.
type rawClient struct {
	t  testing.TB
	fe *pgproto3.Frontend
}

func newRawClient(t testing.TB, p *proxy) *rawClient {
	return &rawClient{t: t, fe: hijack(t, p.AppURL("app")).Frontend}
}

func (c *rawClient) parse(name, sql string, types ...uint32) {
	c.fe.SendParse(&pgproto3.Parse{Name: name, Query: sql, ParameterOIDs: types})
}

// bindExec binds statement stmt to the unnamed portal with text
// parameters and executes it.
func (c *rawClient) bindExec(stmt string, params ...string) {
	var vals [][]byte
	for _, p := range params {
		vals = append(vals, []byte(p))
	}
	c.fe.SendBind(&pgproto3.Bind{PreparedStatement: stmt, Parameters: vals})
	c.fe.SendExecute(&pgproto3.Execute{})
}

func (c *rawClient) sync() { c.fe.SendSync(&pgproto3.Sync{}) }

func (c *rawClient) flush() {
	c.t.Helper()
	if err := c.fe.Flush(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) query(sql string) {
	c.fe.SendQuery(&pgproto3.Query{String: sql})
}

// readUntilReady reads messages up to and including ReadyForQuery and
// returns them as a compact string, e.g. "1 2 D[7] C(SELECT 1) Z(I)".
func (c *rawClient) readUntilReady() string {
	c.t.Helper()
	var parts []string
	for {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("receive after %v: %v", parts, err)
		}
		parts = append(parts, shortMsg(msg))
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			return strings.Join(parts, " ")
		}
	}
}

// read reads n messages and returns them as readUntilReady does.
func (c *rawClient) read(n int) string {
	c.t.Helper()
	var parts []string
	for range n {
		msg, err := c.fe.Receive()
		if err != nil {
			c.t.Fatalf("receive after %v: %v", parts, err)
		}
		parts = append(parts, shortMsg(msg))
	}
	return strings.Join(parts, " ")
}

// shortMsg renders a backend message compactly for comparisons.
func shortMsg(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.ParseComplete:
		return "1"
	case *pgproto3.BindComplete:
		return "2"
	case *pgproto3.CloseComplete:
		return "3"
	case *pgproto3.NoData:
		return "n"
	case *pgproto3.ParameterDescription:
		return fmt.Sprintf("t%v", m.ParameterOIDs)
	case *pgproto3.RowDescription:
		return "T"
	case *pgproto3.DataRow:
		var vals []string
		for _, v := range m.Values {
			if v == nil {
				vals = append(vals, "NULL")
			} else {
				vals = append(vals, string(v))
			}
		}
		return "D[" + strings.Join(vals, ",") + "]"
	case *pgproto3.CommandComplete:
		return "C(" + string(m.CommandTag) + ")"
	case *pgproto3.EmptyQueryResponse:
		return "I"
	case *pgproto3.ErrorResponse:
		return "E(" + m.Code + ")"
	case *pgproto3.ReadyForQuery:
		return "Z(" + string(m.TxStatus) + ")"
	case *pgproto3.PortalSuspended:
		return "s"
	}
	return msgName(m)
}

func checkMsgs(t testing.TB, what, got, want string) {
	t.Helper()
	if got != want {
		t.Fatalf("%s:\n got  %s\n want %s", what, got, want)
	}
}

// TestPipelining sends several Parse/Bind/Execute/Sync batches before
// reading any answer, with named and unnamed statements, on a pool of one
// shared with another client.
func TestPipelining(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	c := newRawClient(t, p)
	other := connect(t, p.AppURL("app"))

	c.parse("", "SELECT 1")
	c.bindExec("")
	c.sync()
	c.parse("s", "SELECT $1::int * 2")
	c.bindExec("s", "21")
	c.sync()
	c.bindExec("s", "50")
	c.sync()
	c.query("SELECT 'simple'")
	c.parse("", "SELECT $1::text || '!'")
	c.bindExec("", "unnamed")
	c.bindExec("s", "4")
	c.sync()
	c.flush()
	checkMsgs(t, "batch 1", c.readUntilReady(), "1 2 D[1] C(SELECT 1) Z(I)")
	checkMsgs(t, "batch 2", c.readUntilReady(), "1 2 D[42] C(SELECT 1) Z(I)")
	checkMsgs(t, "batch 3", c.readUntilReady(), "2 D[100] C(SELECT 1) Z(I)")
	checkMsgs(t, "simple query", c.readUntilReady(), "T D[simple] C(SELECT 1) Z(I)")
	checkMsgs(t, "batch 4", c.readUntilReady(), "1 2 D[unnamed!] C(SELECT 1) 2 D[8] C(SELECT 1) Z(I)")

	// Many batches in one write, interleaved with another client that
	// uses the only server connection between them.
	for round := range 3 {
		for i := range 50 {
			c.bindExec("s", fmt.Sprint(i))
			c.sync()
		}
		c.flush()
		for i := range 50 {
			checkMsgs(t, fmt.Sprintf("round %d batch %d", round, i), c.readUntilReady(), fmt.Sprintf("2 D[%d] C(SELECT 1) Z(I)", 2*i))
		}
		var n int
		if err := other.QueryRow(context.Background(), "SELECT $1::int", round).Scan(&n); err != nil || n != round {
			t.Fatalf("other client: %d %v", n, err)
		}
	}
}

// TestFlushWithoutSync: Flush makes the server answer what it has, but the
// extended-protocol transaction lasts until Sync, so the client keeps its
// server until then.
func TestFlushWithoutSync(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (x int)")
	setup.Close(ctx)

	c := newRawClient(t, p)
	t.Run("describe then execute", func(t *testing.T) {
		c.parse("", "SELECT $1::int + 1")
		c.fe.SendDescribe(&pgproto3.Describe{ObjectType: 'S'})
		c.fe.Send(&pgproto3.Flush{})
		c.flush()
		checkMsgs(t, "after Flush", c.read(3), "1 t[23] T")
		c.bindExec("", "41")
		c.sync()
		c.flush()
		checkMsgs(t, "after Sync", c.readUntilReady(), "2 D[42] C(SELECT 1) Z(I)")
	})

	t.Run("other clients wait for Sync", func(t *testing.T) {
		c.parse("", "INSERT INTO t VALUES ($1)")
		c.bindExec("", "1")
		c.fe.Send(&pgproto3.Flush{})
		c.flush()
		checkMsgs(t, "after Flush", c.read(3), "1 2 C(INSERT 0 1)")

		// The INSERT is not committed before Sync: another client must
		// neither see it nor run inside that implicit transaction.
		other := connect(t, p.AppURL("app"))
		type result struct {
			n     int
			clean bool
			err   error
		}
		done := make(chan result, 1)
		go func() {
			var r result
			r.err = other.QueryRow(ctx, "SELECT count(*), txid_current_if_assigned() IS NULL FROM t").Scan(&r.n, &r.clean)
			done <- r
		}()
		eventually(t, 5*time.Second, "the other client to wait for the server", func() bool {
			for _, ci := range p.Listener.Clients() {
				if ci.State == frontend.ClientWaiting {
					return true
				}
			}
			select {
			case r := <-done:
				t.Fatalf("other client ran while a batch was open: %+v", r)
			default:
			}
			return false
		})
		c.sync()
		c.flush()
		checkMsgs(t, "after Sync", c.readUntilReady(), "Z(I)")
		r := <-done
		if r.err != nil || r.n != 1 || !r.clean {
			t.Fatalf("other client: %+v, want 1 row in its own transaction", r)
		}
	})
}

// TestPipelineError: after an error the server skips to Sync; the batches
// after it work, and statements parsed in the skipped part do not exist.
func TestPipelineError(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	c := newRawClient(t, p)

	c.parse("a", "SELECT 'a'")
	c.bindExec("a")
	c.sync()
	c.parse("", "SELECT 1/0") // fails at Bind, when the planner folds it
	c.bindExec("")
	c.parse("skipped", "SELECT 'skipped'")
	c.bindExec("a")
	c.sync()
	c.bindExec("a")
	c.sync()
	c.flush()
	checkMsgs(t, "before the error", c.readUntilReady(), "1 2 D[a] C(SELECT 1) Z(I)")
	checkMsgs(t, "the error", c.readUntilReady(), "1 E(22012) Z(I)")
	checkMsgs(t, "after the error", c.readUntilReady(), "2 D[a] C(SELECT 1) Z(I)")

	// A statement whose Parse the server skipped does not exist.
	c.bindExec("skipped")
	c.sync()
	c.flush()
	checkMsgs(t, "skipped statement", c.readUntilReady(), "E(26000) Z(I)")

	// Errors inside an explicit transaction leave it failed until
	// ROLLBACK, across batches.
	c.query("BEGIN")
	c.bindExec("a")
	c.sync()
	c.parse("", "SELECT nope")
	c.bindExec("")
	c.sync()
	c.bindExec("a")
	c.sync()
	c.query("ROLLBACK")
	c.bindExec("a")
	c.sync()
	c.flush()
	checkMsgs(t, "BEGIN", c.readUntilReady(), "C(BEGIN) Z(T)")
	checkMsgs(t, "in transaction", c.readUntilReady(), "2 D[a] C(SELECT 1) Z(T)")
	checkMsgs(t, "error in transaction", c.readUntilReady(), "E(42703) Z(E)")
	checkMsgs(t, "failed transaction", c.readUntilReady(), "E(25P02) Z(E)")
	checkMsgs(t, "ROLLBACK", c.readUntilReady(), "C(ROLLBACK) Z(I)")
	checkMsgs(t, "after ROLLBACK", c.readUntilReady(), "2 D[a] C(SELECT 1) Z(I)")
}

// TestSharedStatements: two clients prepare statements with the same name
// and text on a pool of one; both work, and one client's Close or
// re-Parse does not affect the other.
func TestSharedStatements(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	a := newRawClient(t, p)
	b := newRawClient(t, p)

	for _, c := range []*rawClient{a, b} {
		c.parse("s", "SELECT $1::int + 1")
		c.sync()
		c.flush()
		checkMsgs(t, "parse", c.readUntilReady(), "1 Z(I)")
	}
	a.bindExec("s", "1")
	a.sync()
	a.flush()
	checkMsgs(t, "a", a.readUntilReady(), "2 D[2] C(SELECT 1) Z(I)")
	b.bindExec("s", "10")
	b.sync()
	b.flush()
	checkMsgs(t, "b", b.readUntilReady(), "2 D[11] C(SELECT 1) Z(I)")

	a.fe.SendClose(&pgproto3.Close{ObjectType: 'S', Name: "s"})
	a.sync()
	a.flush()
	checkMsgs(t, "a closes s", a.readUntilReady(), "3 Z(I)")
	a.bindExec("s", "1")
	a.sync()
	a.flush()
	checkMsgs(t, "a after Close", a.readUntilReady(), "E(26000) Z(I)")
	b.bindExec("s", "20")
	b.sync()
	b.flush()
	checkMsgs(t, "b after a's Close", b.readUntilReady(), "2 D[21] C(SELECT 1) Z(I)")

	// a reuses the name for another statement; b's is unchanged.
	a.parse("s", "SELECT $1::text || 'x'")
	a.bindExec("s", "a")
	a.sync()
	a.flush()
	checkMsgs(t, "a's new s", a.readUntilReady(), "1 2 D[ax] C(SELECT 1) Z(I)")
	b.bindExec("s", "30")
	b.sync()
	b.flush()
	checkMsgs(t, "b's s", b.readUntilReady(), "2 D[31] C(SELECT 1) Z(I)")

	// Describe of a shared statement works for both.
	for _, c := range []*rawClient{a, b} {
		c.fe.SendDescribe(&pgproto3.Describe{ObjectType: 'S', Name: "s"})
		c.sync()
		c.flush()
	}
	checkMsgs(t, "a describes s", a.readUntilReady(), "t[25] T Z(I)")
	checkMsgs(t, "b describes s", b.readUntilReady(), "t[23] T Z(I)")
}

// TestUnnamedStatementAcrossClients: the unnamed statement, parsed in one
// batch, is still there in the next batch even though another client used
// the only server connection in between (with a simple query, which drops
// the server's unnamed statement, or with its own unnamed statement).
func TestUnnamedStatementAcrossClients(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	a := newRawClient(t, p)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			cfg, err := pgx.ParseConfig(p.AppURL("app"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			other, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close(ctx)

			a.parse("", "SELECT $1::int * 10")
			a.sync()
			a.flush()
			checkMsgs(t, "parse", a.readUntilReady(), "1 Z(I)")

			var s string
			if err := other.QueryRow(ctx, "SELECT $1::text", "other").Scan(&s); err != nil || s != "other" {
				t.Fatalf("other client: %q %v", s, err)
			}

			a.bindExec("", "7")
			a.sync()
			a.flush()
			checkMsgs(t, "bind unnamed", a.readUntilReady(), "2 D[70] C(SELECT 1) Z(I)")
		})
	}

	// As on PostgreSQL, the client's own simple query drops its unnamed
	// statement.
	a.parse("", "SELECT 1")
	a.sync()
	a.query("SELECT 2")
	a.bindExec("")
	a.sync()
	a.flush()
	checkMsgs(t, "parse", a.readUntilReady(), "1 Z(I)")
	checkMsgs(t, "simple query", a.readUntilReady(), "T D[2] C(SELECT 1) Z(I)")
	checkMsgs(t, "bind after simple query", a.readUntilReady(), "E(26000) Z(I)")
}

// TestDeallocate: DEALLOCATE ALL and DISCARD ALL sent as simple queries
// drop the client's statements (and the server's), after which names can
// be reused; other clients' statements on the same server are re-prepared.
func TestDeallocate(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	a := newRawClient(t, p)
	b := newRawClient(t, p)
	b.parse("q", "SELECT 'b'")
	b.sync()
	b.flush()
	checkMsgs(t, "b parses q", b.readUntilReady(), "1 Z(I)")

	for i, sql := range []string{"DEALLOCATE ALL", "DISCARD ALL", "BEGIN; DEALLOCATE ALL; ROLLBACK", "DEALLOCATE ALL; SELECT 1/0"} {
		t.Run(sql, func(t *testing.T) {
			a.parse("s", "SELECT 'old'")
			a.parse("q", "SELECT 'b'") // the same statement as b's
			a.bindExec("s")
			a.sync()
			a.flush()
			checkMsgs(t, "before", a.readUntilReady(), "1 1 2 D[old] C(SELECT 1) Z(I)")

			a.query(sql)
			a.flush()
			a.readUntilReady()

			a.bindExec("s")
			a.sync()
			a.flush()
			checkMsgs(t, "old name after "+sql, a.readUntilReady(), "E(26000) Z(I)")

			text := fmt.Sprintf("SELECT 'new %d'", i)
			a.parse("s", text)
			a.bindExec("s")
			a.sync()
			a.flush()
			checkMsgs(t, "reused name", a.readUntilReady(), fmt.Sprintf("1 2 D[new %d] C(SELECT 1) Z(I)", i))
			a.fe.SendClose(&pgproto3.Close{ObjectType: 'S', Name: "s"})
			a.fe.SendClose(&pgproto3.Close{ObjectType: 'S', Name: "q"})
			a.sync()
			a.flush()
			checkMsgs(t, "close", a.readUntilReady(), "3 3 Z(I)")

			// b's statement lived on the same server.
			b.bindExec("q")
			b.sync()
			b.flush()
			checkMsgs(t, "b after "+sql, b.readUntilReady(), "2 D[b] C(SELECT 1) Z(I)")
		})
	}
}
