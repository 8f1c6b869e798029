package integration

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/shardgate/shardgate/wire"
)

// TestCopy runs binary COPY FROM (pgx CopyFrom) and text COPY TO STDOUT
// through a transaction pool, and checks that the data made the round trip.
func TestCopy(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 2, "app"))
	ctx := context.Background()
	conn := connect(t, p.AppURL("app"))
	mustExec(t, conn, "CREATE TABLE items (id int PRIMARY KEY, name text, price numeric, tags text[])")

	const rows = 50_000
	n, err := conn.CopyFrom(ctx, pgx.Identifier{"items"}, []string{"id", "name", "price", "tags"},
		pgx.CopyFromFunc(func() func() ([]any, error) {
			i := 0
			return func() ([]any, error) {
				if i == rows {
					return nil, nil
				}
				i++
				var name any = fmt.Sprintf("item %d, \"quoted\"\t\\", i)
				if i%1000 == 0 {
					name = nil
				}
				return []any{i, name, fmt.Sprintf("%d.%02d", i/100, i%100), []string{"a", fmt.Sprint(i)}}, nil
			}
		}()))
	if err != nil {
		t.Fatalf("CopyFrom: %v", err)
	}
	if n != rows {
		t.Fatalf("CopyFrom copied %d rows, want %d", n, rows)
	}
	var count, nulls int
	var sum int64
	if err := conn.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE name IS NULL), sum(id) FROM items").Scan(&count, &nulls, &sum); err != nil {
		t.Fatal(err)
	}
	if count != rows || nulls != rows/1000 || sum != rows*(rows+1)/2 {
		t.Fatalf("after CopyFrom: %d rows, %d NULL names, sum %d", count, nulls, sum)
	}

	// COPY TO STDOUT: compare with what the server gives directly.
	const query = "COPY (SELECT * FROM items ORDER BY id) TO STDOUT WITH (FORMAT csv, HEADER)"
	var viaProxy, direct bytes.Buffer
	tag, err := conn.PgConn().CopyTo(ctx, &viaProxy, query)
	if err != nil {
		t.Fatalf("CopyTo: %v", err)
	}
	if tag.RowsAffected() != rows {
		t.Fatalf("CopyTo: %s, want %d rows", tag, rows)
	}
	dconn := connect(t, cl.DSN("app"))
	if _, err := dconn.PgConn().CopyTo(ctx, &direct, query); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(viaProxy.Bytes(), direct.Bytes()) {
		t.Fatalf("COPY TO through the proxy differs from the server's: %d bytes vs %d", viaProxy.Len(), direct.Len())
	}
	if !strings.Contains(viaProxy.String(), "\n1000,,10.00,\"{a,1000}\"\n") {
		t.Fatalf("COPY TO output lacks the NULL row: %.300q", viaProxy.String())
	}
	// The connection goes on working.
	var v int
	if err := conn.QueryRow(ctx, "SELECT id FROM items WHERE id = $1", 777).Scan(&v); err != nil || v != 777 {
		t.Fatalf("after COPY: %d %v", v, err)
	}
}

// TestCopyFromBadRow: a COPY FROM that fails in the middle of the stream
// returns the server's error, and the connection stays usable, inside and
// outside a transaction.
func TestCopyFromBadRow(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	conn := connect(t, p.AppURL("app"))
	mustExec(t, conn, "CREATE TABLE t (id int PRIMARY KEY, v text)")

	var data strings.Builder
	for i := 1; i <= 20_000; i++ {
		if i == 10_000 {
			data.WriteString("oops\tbad\n")
			continue
		}
		fmt.Fprintf(&data, "%d\tv%d\n", i, i)
	}
	for _, inTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transaction=%v", inTx), func(t *testing.T) {
			if inTx {
				mustExec(t, conn, "BEGIN")
			}
			_, err := conn.PgConn().CopyFrom(ctx, strings.NewReader(data.String()), "COPY t FROM STDIN")
			if got := sqlstate(err); got != wire.InvalidTextRepresentation {
				t.Fatalf("SQLSTATE %q, want 22P02 (%v)", got, err)
			}
			if !strings.Contains(err.Error(), `invalid input syntax for type integer: "oops"`) {
				t.Fatalf("error %v", err)
			}
			if inTx {
				if _, err := conn.Exec(ctx, "SELECT 1"); sqlstate(err) != wire.InFailedSQLTransaction {
					t.Fatalf("in the failed transaction: %v, want 25P02", err)
				}
				mustExec(t, conn, "ROLLBACK")
			}
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 0 {
				t.Fatalf("after failed COPY: count %d, %v", n, err)
			}
			// A good COPY works on the same connection.
			tag, err := conn.PgConn().CopyFrom(ctx, strings.NewReader("1\tone\n2\ttwo\n"), "COPY t FROM STDIN")
			if err != nil || tag.RowsAffected() != 2 {
				t.Fatalf("good COPY: %v %v", tag, err)
			}
			mustExec(t, conn, "TRUNCATE t")
		})
	}
}

// TestCopyClientVanishes: a client that disconnects in the middle of COPY
// FROM STDIN leaves a clean server: the next client works and no backend is
// left idle in a transaction.
func TestCopyClientVanishes(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (id int, v text)")
	setup.Close(ctx)
	direct := connect(t, cl.DSN("app"))

	for _, inTx := range []bool{false, true} {
		t.Run(fmt.Sprintf("transaction=%v", inTx), func(t *testing.T) {
			hc := hijack(t, p.AppURL("app"))
			fe := hc.Frontend
			if inTx {
				fe.Send(&pgproto3.Query{String: "BEGIN; INSERT INTO t VALUES (0, 'zero')"})
				fe.Flush()
				expectMsgs(t, fe, "CommandComplete", "CommandComplete", "ReadyForQuery")
			}
			fe.Send(&pgproto3.Query{String: "COPY t FROM STDIN"})
			fe.Flush()
			expectMsgs(t, fe, "CopyInResponse")
			for i := 0; i < 100; i++ {
				fe.Send(&pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\trow\n", i))})
			}
			// Half a message, then gone.
			fe.Flush()
			hc.Conn.Write([]byte{'d', 0, 0, 0, 100, '1'})
			hc.Conn.Close()

			next := connect(t, p.AppURL("app"))
			var n int
			if err := next.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 0 {
				t.Fatalf("next client: %d rows (%v), want 0", n, err)
			}
			eventually(t, 10*time.Second, "no backend idle in transaction", func() bool {
				var busy int
				err := direct.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = 'app' AND state <> 'idle' AND pid <> pg_backend_pid()").Scan(&busy)
				return err == nil && busy == 0
			})
			next.Close(ctx)
		})
	}
}

// hijack logs in through pgconn (which does SCRAM) and returns the raw
// connection with its pgproto3 Frontend.
func hijack(t testing.TB, url string) *pgconn.HijackedConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hc.Conn.Close() })
	hc.Conn.SetDeadline(time.Now().Add(30 * time.Second))
	return hc
}

// expectMsgs reads one message per name and fails unless each has that type
// (the Go type name in pgproto3). It returns the messages.
func expectMsgs(t testing.TB, fe *pgproto3.Frontend, names ...string) []pgproto3.BackendMessage {
	t.Helper()
	var got []pgproto3.BackendMessage
	for _, want := range names {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("receive (want %s; got so far %s): %v", want, describeMsgs(got), err)
		}
		got = append(got, copyMessage(msg))
		if name := msgName(msg); name != want {
			t.Fatalf("got %s, want %s (so far: %s)", describeMsgs([]pgproto3.BackendMessage{msg}), want, describeMsgs(got))
		}
	}
	return got
}

func msgName(m pgproto3.BackendMessage) string {
	return strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
}

// copyMessage detaches a received message from the Frontend's buffer.
func copyMessage(m pgproto3.BackendMessage) pgproto3.BackendMessage {
	switch m := m.(type) {
	case *pgproto3.DataRow:
		c := &pgproto3.DataRow{}
		for _, v := range m.Values {
			c.Values = append(c.Values, bytes.Clone(v))
		}
		return c
	case *pgproto3.ErrorResponse:
		c := *m
		return &c
	case *pgproto3.CommandComplete:
		return &pgproto3.CommandComplete{CommandTag: bytes.Clone(m.CommandTag)}
	case *pgproto3.ReadyForQuery:
		c := *m
		return &c
	}
	return m
}

func describeMsgs(msgs []pgproto3.BackendMessage) string {
	var parts []string
	for _, m := range msgs {
		s := msgName(m)
		switch m := m.(type) {
		case *pgproto3.ErrorResponse:
			s += fmt.Sprintf("(%s %s: %s)", m.Severity, m.Code, m.Message)
		case *pgproto3.CommandComplete:
			s += fmt.Sprintf("(%s)", m.CommandTag)
		case *pgproto3.ReadyForQuery:
			s += fmt.Sprintf("(%c)", m.TxStatus)
		case *pgproto3.DataRow:
			s += fmt.Sprintf("%q", m.Values)
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// TestCopyFromRowPerMessage: a client that sends COPY data one row a
// CopyData message, thousands of them in one write, as psql and pgbench -i
// do (the proxy passes the messages buffered whole on in runs,
// wire.Reader.NextRun), gets every row in, in order, and the COPY's tag;
// then a CopyFail inside such a run aborts the COPY with the client's
// message, and the connection goes on.
func TestCopyFromRowPerMessage(t *testing.T) {
	checkGoroutines(t)
	cl := cluster(t, "app")
	p := startProxy(t, poolConfig(cl, "transaction", 1, "app"))
	ctx := context.Background()
	setup := connect(t, p.AppURL("app"))
	mustExec(t, setup, "CREATE TABLE t (id int, v text)")
	setup.Close(ctx)

	hc := hijack(t, p.AppURL("app"))
	fe := hc.Frontend
	const rows = 5000
	fe.Send(&pgproto3.Query{String: "COPY t FROM STDIN"})
	fe.Flush()
	expectMsgs(t, fe, "CopyInResponse")
	for i := 1; i <= rows; i++ {
		fe.Send(&pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\tr%d\n", i, i))})
	}
	fe.Send(&pgproto3.CopyDone{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := fe.Receive()
	if cc, ok := msg.(*pgproto3.CommandComplete); err != nil || !ok || string(cc.CommandTag) != fmt.Sprintf("COPY %d", rows) {
		t.Fatalf("after CopyDone: %#v, %v; want CommandComplete COPY %d", msg, err, rows)
	}
	expectMsgs(t, fe, "ReadyForQuery")

	fe.Send(&pgproto3.Query{String: "SELECT count(*), sum(id), bool_and(v = 'r' || id) FROM t"})
	fe.Flush()
	expectMsgs(t, fe, "RowDescription")
	msg, err = fe.Receive()
	row, ok := msg.(*pgproto3.DataRow)
	if err != nil || !ok || len(row.Values) != 3 || string(row.Values[0]) != fmt.Sprint(rows) ||
		string(row.Values[1]) != fmt.Sprint(rows*(rows+1)/2) || string(row.Values[2]) != "t" {
		t.Fatalf("rows copied: %#v, %v", msg, err)
	}
	expectMsgs(t, fe, "CommandComplete", "ReadyForQuery")

	// Rows, a CopyFail among them and rows after it, in one write.
	fe.Send(&pgproto3.Query{String: "COPY t FROM STDIN"})
	fe.Flush()
	expectMsgs(t, fe, "CopyInResponse")
	for i := 0; i < 100; i++ {
		fe.Send(&pgproto3.CopyData{Data: []byte(fmt.Sprintf("%d\tx\n", i))})
	}
	fe.Send(&pgproto3.CopyFail{Message: "client gave up"})
	fe.Flush()
	msg, err = fe.Receive()
	if e, ok := msg.(*pgproto3.ErrorResponse); err != nil || !ok || e.Code != "57014" || !strings.Contains(e.Message, "client gave up") {
		t.Fatalf("after CopyFail: %#v, %v; want 57014 with the client's message", msg, err)
	}
	expectMsgs(t, fe, "ReadyForQuery")
	fe.Send(&pgproto3.Query{String: "SELECT count(*) FROM t"})
	fe.Flush()
	expectMsgs(t, fe, "RowDescription")
	msg, err = fe.Receive()
	if row, ok := msg.(*pgproto3.DataRow); err != nil || !ok || len(row.Values) != 1 || string(row.Values[0]) != fmt.Sprint(rows) {
		t.Fatalf("after the failed COPY: %#v, %v; want %d rows", msg, err, rows)
	}
	expectMsgs(t, fe, "CommandComplete", "ReadyForQuery")
}
