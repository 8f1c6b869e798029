package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestIsoPipelineFlushError: an error in a batch ended by Flush, then Sync
// and another batch in the same write: the answers equal PostgreSQL's
// message for message, the INSERT is committed as often as PostgreSQL
// commits it, and the next client gets only its own answers.
//
// In the first variant the INSERT and the failing statement share one
// implicit transaction (everything up to Sync), which the error rolls back:
// PostgreSQL commits the INSERT zero times. In the second a Sync commits the
// INSERT before the failing statement: exactly once.
func TestIsoPipelineFlushError(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	admin := simpleConn(t, cl.DSN("app"))
	variants := []struct {
		name    string
		first   []pgproto3.FrontendMessage
		commits string
	}{
		{"INSERT and error in one implicit transaction", []pgproto3.FrontendMessage{
			parseMsg("", "INSERT INTO t VALUES (1)"), bindMsg(""), execMsg(0),
			parseMsg("", "SELECT 1/0"), bindMsg(""), execMsg(0), flushMsg,
		}, "0"},
		{"INSERT synced before the error", []pgproto3.FrontendMessage{
			parseMsg("", "INSERT INTO t VALUES (1)"), bindMsg(""), execMsg(0), syncMsg,
			parseMsg("", "SELECT 1/0"), bindMsg(""), execMsg(0), flushMsg,
		}, "1"},
	}
	for _, mode := range []string{"session", "transaction"} {
		for _, v := range variants {
			t.Run(mode+"/"+v.name, func(t *testing.T) {
				steps := []wireStep{
					{send: v.first, toErr: true},
					{send: []pgproto3.FrontendMessage{syncMsg, parseMsg("", "select 5"), bindMsg(""), execMsg(0), syncMsg}, zs: 2},
				}
				execIn(t, admin, simple, "TRUNCATE t")
				d := dialWire(t, cl.DSN("app"))
				want := d.run(steps, nil)
				d.close()
				checkRow(t, "rows PostgreSQL committed", row(t, admin, simple, "SELECT count(*) FROM t"), v.commits)
				execIn(t, admin, simple, "TRUNCATE t")

				p := startProxy(t, poolConfig(cl, mode, 1, "app"))
				a := dialWire(t, p.AppURL("app"))
				next := []pgproto3.FrontendMessage{
					parseMsg("", "SELECT 'b'"), bindMsg(""), execMsg(0),
					parseMsg("", "SELECT count(*) FROM t"), bindMsg(""), execMsg(0), syncMsg,
				}
				var b *wireConn
				got := a.run(steps, func(i int) {
					// In transaction mode the next client sends its batch
					// while a's batch is open.
					if i == 0 && mode == "transaction" {
						b = dialWire(t, p.AppURL("app"))
						for _, m := range next {
							b.fe.Send(m)
						}
						if err := b.fe.Flush(); err != nil {
							t.Fatal(err)
						}
					}
				})
				sameWire(t, "a's answers", steps, got, want)
				a.close()
				var gotB [][]string
				if b == nil {
					b = dialWire(t, p.AppURL("app"))
					gotB = b.run([]wireStep{{send: next, zs: 1}}, nil)
				} else {
					gotB = b.run([]wireStep{{zs: 1}}, nil)
				}
				checkRow(t, "rows committed through the proxy", row(t, admin, simple, "SELECT count(*) FROM t"), v.commits)
				checkMsgs(t, "the next client's answers", strings.Join(gotB[0], " "),
					fmt.Sprintf("1 2 D[b] C(SELECT 1) 1 2 D[%s] C(SELECT 1) Z(I)", v.commits))
			})
		}
	}
}

// TestIsoPipelineParseExistingName: Parse of a statement name that exists
// fails with 42P05 as in PostgreSQL, whatever the text, and leaves the
// existing statement alone, while another client uses the server between
// the batches.
func TestIsoPipelineParseExistingName(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 1"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 2"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 1"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 3"), bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
	}
	want := wireDirect(t, cl, steps)
	if want[1][0] != `E(ERROR 42P05 "prepared statement \"x\" already exists" detail "")` {
		t.Fatalf("PostgreSQL answered %v", want[1])
	}
	wireBothModes(t, cl, steps, want, nil)
}

// TestIsoPipelinePrepareExistingName: SQL-level PREPARE of a name that
// exists fails with the statement's own error when the statement fails
// (PostgreSQL analyzes it before it stores it), else with 42P05, inside a
// transaction block too, and leaves the existing statement alone.
func TestIsoPipelinePrepareExistingName(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("PREPARE x AS SELECT 1")}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("PREPARE x AS SELECT nope")}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("PREPARE x AS SELECT 2")}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("PREPARE x(int) AS SELECT $1 / 0 FROM nowhere")}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("BEGIN"), queryMsg("PREPARE x AS SELECT nope"), queryMsg("SELECT 1"), queryMsg("ROLLBACK")}, zs: 4},
		{send: []pgproto3.FrontendMessage{queryMsg("EXECUTE x")}, zs: 1},
	}
	want := wireDirect(t, cl, steps)
	if !strings.Contains(want[1][0], "42703") || !strings.Contains(want[2][0], "42P05") {
		t.Fatalf("PostgreSQL answered %v and %v", want[1], want[2])
	}
	wireBothModes(t, cl, steps, want, nil)
}

// TestIsoPipelineDeallocate: SQL DEALLOCATE of a statement made with Parse
// drops it, simple or extended, and the name can be parsed again.
func TestIsoPipelineDeallocate(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 1"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("DEALLOCATE x")}, zs: 1},
		{send: []pgproto3.FrontendMessage{bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 2"), bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("", "DEALLOCATE x"), bindMsg(""), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 3"), parseMsg("y", "SELECT 4"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg("DEALLOCATE ALL")}, zs: 1},
		{send: []pgproto3.FrontendMessage{bindMsg("y"), execMsg(0), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 5"), bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
	}
	wireBothModes(t, cl, steps, wireDirect(t, cl, steps), nil)
}

// TestIsoPipelineCloseStatement: after Close of a named statement the
// client's pg_prepared_statements no longer lists it, and another client's
// never does.
func TestIsoPipelineCloseStatement(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	// Proxy-wide names are shared by nature in transaction mode (see
	// notProxyNamed); the client's own names must come and go exactly.
	const list = "SELECT name FROM pg_prepared_statements WHERE " + notProxyNamed + " ORDER BY name"
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{parseMsg("x", "SELECT 1"), syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.Close{ObjectType: 'S', Name: "x"}, syncMsg}, zs: 1},
		{send: []pgproto3.FrontendMessage{queryMsg(list)}, zs: 1},
		{send: []pgproto3.FrontendMessage{bindMsg("x"), execMsg(0), syncMsg}, zs: 1},
	}
	want := wireDirect(t, cl, steps)
	wireBothModes(t, cl, steps, want, func(t testing.TB, p *proxy) func(int) {
		b := simpleConn(t, p.AppURL("app"))
		return func(i int) {
			checkRow(t, fmt.Sprintf("the other client's pg_prepared_statements after step %d", i),
				row(t, b, simple, "SELECT coalesce(string_agg(name, ','), '') FROM pg_prepared_statements WHERE "+notProxyNamed), "")
		}
	})
}

// wireDirect runs steps on a direct connection and returns the answers.
func wireDirect(t testing.TB, cl *pgtest.Cluster, steps []wireStep) [][]string {
	t.Helper()
	d := dialWire(t, cl.DSN("app"))
	defer d.close()
	return d.run(steps, nil)
}

// wireBothModes runs steps through a proxy in each pool mode and requires
// the answers want. other, if set, makes a function called after each step
// (another client acting in between); without it, in transaction mode,
// another client runs a query after each step. In transaction mode the pool
// has one server, so that client uses the same one.
func wireBothModes(t *testing.T, cl *pgtest.Cluster, steps []wireStep, want [][]string, other func(testing.TB, *proxy) func(int)) {
	for _, pm := range []struct {
		mode string
		size int
	}{{"session", 2}, {"transaction", 1}} {
		t.Run(pm.mode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, pm.mode, pm.size, "app"))
			var between func(int)
			if other != nil {
				between = other(t, p)
			} else if pm.mode == "transaction" {
				noise := simpleConn(t, p.AppURL("app"))
				between = func(int) { value(t, noise, simple, "SELECT 1") }
			}
			w := dialWire(t, p.AppURL("app"))
			sameWire(t, "answers through the proxy", steps, w.run(steps, between), want)
		})
	}
}

// alone is the other argument of wireBothModes for steps that no other
// client may interleave with.
func alone(testing.TB, *proxy) func(int) { return nil }

// TestIsoBackendKeyDataPID: the process ID the proxy hands out in
// BackendKeyData fits a positive int4, as clients such as JDBC store it.
func TestIsoBackendKeyDataPID(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, poolConfig(cl, mode, 2, "app"))
			for i := range 50 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				pc, err := pgconn.Connect(ctx, p.AppURL("app"))
				cancel()
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				pid := pc.PID()
				pc.Close(context.Background())
				if pid == 0 || pid > math.MaxInt32 {
					t.Fatalf("connection %d: BackendKeyData process ID %d, want 1..%d", i, pid, math.MaxInt32)
				}
			}
		})
	}
}

// TestIsoServerTerminated: when PostgreSQL terminates the backend a client
// owns (session mode, or inside a transaction), the client gets the
// server's FATAL and its connection ends, as with PostgreSQL; a pooled
// backend terminated while no client owned it goes unnoticed.
func TestIsoServerTerminated(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	admin := simpleConn(t, cl.DSN("app"))
	pidOf := func(w *wireConn, inside bool) string {
		t.Helper()
		if inside {
			w.run([]wireStep{{send: []pgproto3.FrontendMessage{queryMsg("BEGIN")}, zs: 1}}, nil)
		}
		got := w.run([]wireStep{{send: []pgproto3.FrontendMessage{queryMsg("SELECT pg_backend_pid()::text")}, zs: 1}}, nil)[0]
		if len(got) != 4 {
			t.Fatalf("SELECT pg_backend_pid(): %v", got)
		}
		return got[1][2 : len(got[1])-1] // D[pid]
	}
	terminated := func(w *wireConn, inside, next bool) []string {
		t.Helper()
		pid := pidOf(w, inside)
		checkRow(t, "pg_terminate_backend", row(t, admin, simple, "SELECT pg_terminate_backend($1::int)", pid), "true")
		if next {
			// A transaction-mode client idle in its transaction hears of
			// its server's end at its next statement: the proxy watches
			// idle servers only where that costs nothing per statement
			// (session mode, pinned sessions), see docs/pooling.md.
			w.fe.Send(queryMsg("SELECT 1"))
			if err := w.fe.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for len(got) < 5 {
			more := w.read(wireStep{n: 1})
			got = append(got, more...)
			if len(more) == 1 && strings.HasPrefix(more[0], "read error") {
				break
			}
		}
		return got
	}
	for _, inside := range []bool{false, true} {
		where := map[bool]string{false: "outside a transaction", true: "inside a transaction"}[inside]
		want := terminated(dialWire(t, cl.DSN("app")), inside, false)
		if len(want) != 2 || want[1] != "read error: connection closed" {
			t.Fatalf("direct answer: %v", want)
		}
		for _, mode := range []string{"session", "transaction"} {
			if mode == "transaction" && !inside {
				continue
			}
			t.Run(mode+"/"+where, func(t *testing.T) {
				p := startProxy(t, poolConfig(cl, mode, 1, "app"))
				got := terminated(dialWire(t, p.AppURL("app")), inside, mode == "transaction")
				sameWire(t, "after pg_terminate_backend", nil, [][]string{got}, [][]string{want})
				c := simpleConn(t, p.AppURL("app"))
				checkRow(t, "a new client", row(t, c, simple, "SELECT 1"), "1")
			})
		}
	}
	t.Run("transaction/outside a transaction", func(t *testing.T) {
		p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
		c := simpleConn(t, p.AppURL("app"))
		pid := value(t, c, simple, "SELECT pg_backend_pid()::text")
		checkRow(t, "pg_terminate_backend", row(t, admin, simple, "SELECT pg_terminate_backend($1::int)", pid), "true")
		eventually(t, 5*time.Second, "the terminated backend to exit", func() bool {
			return value(t, admin, simple, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", pid) == "0"
		})
		for i := range 3 {
			if _, err := queryRow(c, simple, "SELECT 1"); err != nil {
				t.Fatalf("query %d of the client whose idle server was terminated: %s", i, errText(err))
			}
		}
	})
}

// TestIsoCopyErrorBeforeCopyDone: PostgreSQL reports a bad COPY row as soon
// as it reads it, before the client ends the copy; the proxy relays that
// error at once, and the rest of the exchange matches PostgreSQL's.
func TestIsoCopyErrorBeforeCopyDone(t *testing.T) {
	checkGoroutines(t)
	cl := isoCluster(t)
	admin := simpleConn(t, cl.DSN("app"))
	steps := []wireStep{
		{send: []pgproto3.FrontendMessage{queryMsg("COPY t (x) FROM STDIN")}, n: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.CopyData{Data: []byte("notanumber\n")}}, zs: 1},
		{send: []pgproto3.FrontendMessage{&pgproto3.CopyDone{}, queryMsg("SELECT count(*) FROM t")}, zs: 1},
	}
	want := wireDirect(t, cl, steps)
	if len(want[1]) != 2 || !strings.HasPrefix(want[1][0], "E(ERROR 22P02") {
		t.Fatalf("PostgreSQL answered the bad row with %v", want[1])
	}
	// No other client acts in between: the copy holds the server.
	wireBothModes(t, cl, steps, want, alone)
	checkRow(t, "rows copied", row(t, admin, simple, "SELECT count(*) FROM t"), "0")
}
