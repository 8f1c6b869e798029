//go:build linux

package frontend

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/wire"
)

// TestShardedAnswerBytes sends the same extended-protocol batches to a
// routed database of two shards through the proxy and straight to each
// shard's database (each holds every row), and checks that the client gets
// the bytes one of the shards sends (a RowDescription names its database's
// table OID): the routed Execute's answer is relayed from the shard as
// bytes (relayAnswer), so RowDescription, DataRow, notices, CommandComplete
// and ErrorResponse must be PostgreSQL's own, also with rows larger than
// the server connection's read buffer, an error after some rows, a Bind
// the shard rejects, a pipeline and a row-limited Execute.
func TestShardedAnswerBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := t.Context()
	cl := accountsCluster(t, 1000, "s0", "s1")
	const noisy = `CREATE FUNCTION noisy(n int) RETURNS int LANGUAGE plpgsql AS
		$$BEGIN RAISE NOTICE 'row %', n; RETURN n; END$$`
	for _, db := range []string{"s0", "s1"} {
		if err := cl.Exec(ctx, db, noisy); err != nil {
			t.Fatal(err)
		}
	}
	_, port := serveTestListener(t, routedConfig(cl, false))
	proxied := hijackedConn(t, fmt.Sprintf("postgres://app@127.0.0.1:%d/routed?sslmode=disable", port))
	direct := []*rawTestConn{hijackedConn(t, cl.DSN("s0")), hijackedConn(t, cl.DSN("s1"))}

	bind := func(stmt string, params ...string) *pgproto3.Bind {
		b := &pgproto3.Bind{PreparedStatement: stmt}
		for _, p := range params {
			b.Parameters = append(b.Parameters, []byte(p))
		}
		return b
	}
	describe := &pgproto3.Describe{ObjectType: 'P'}
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	tests := []struct {
		name string
		msgs []pgproto3.FrontendMessage
		want string // the message types of the answer, to show the case does what it says
	}{
		{"parse", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s", Query: "SELECT balance, id FROM accounts WHERE id = $1"},
			&pgproto3.Parse{Name: "m", Query: "SELECT a.id, g, repeat('x', $2::int) FROM accounts a, generate_series(1, $3::int) g WHERE a.id = $1"},
			&pgproto3.Parse{Name: "e", Query: "SELECT a.id, 10 / (3 - g) FROM accounts a, generate_series(1, 5) g WHERE a.id = $1"},
			&pgproto3.Parse{Name: "n", Query: "SELECT noisy(g) FROM accounts a, generate_series(1, 3) g WHERE a.id = $1"},
			sync}, "1 1 1 1 Z"},
		{"one row", []pgproto3.FrontendMessage{bind("s", "7"), describe, exec, sync}, "2 T D C Z"},
		{"one row, no describe", []pgproto3.FrontendMessage{bind("s", "8"), exec, sync}, "2 D C Z"},
		{"keys of both shards", []pgproto3.FrontendMessage{bind("s", "1"), exec, sync, bind("s", "2"), exec, sync, bind("s", "3"), exec, sync}, "2 D C Z 2 D C Z 2 D C Z"},
		{"no row", []pgproto3.FrontendMessage{bind("s", "5000"), describe, exec, sync}, "2 T C Z"},
		{"rows beyond the read buffer", []pgproto3.FrontendMessage{bind("m", "9", "2000", "100"), describe, exec, sync},
			"2 T" + strings.Repeat(" D", 100) + " C Z"},
		{"a row larger than the read buffer", []pgproto3.FrontendMessage{bind("m", "10", "100000", "2"), describe, exec, sync}, "2 T D D C Z"},
		{"error after rows", []pgproto3.FrontendMessage{bind("e", "11"), describe, exec, sync}, "2 T D D E Z"},
		{"notices between rows", []pgproto3.FrontendMessage{bind("n", "12"), describe, exec, sync}, "2 T N D N D N D C Z"},
		{"bind rejected by the shard", []pgproto3.FrontendMessage{bind("m", "13", "abc", "1"), describe, exec, sync, bind("s", "13"), exec, sync}, "E Z 2 D C Z"},
		{"row limit", []pgproto3.FrontendMessage{bind("m", "14", "10", "5"), describe,
			&pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{MaxRows: 2}, &pgproto3.Execute{MaxRows: 2}, sync},
			"2 T D D s D D s D C Z"},
		{"pipeline with an error", []pgproto3.FrontendMessage{bind("s", "15"), exec, bind("e", "16"), exec, bind("s", "17"), exec, sync,
			bind("s", "18"), exec, sync}, "2 D C 2 D D E Z 2 D C Z"},
		{"transaction block", []pgproto3.FrontendMessage{&pgproto3.Query{String: "BEGIN"}, bind("s", "19"), describe, exec, sync,
			bind("e", "20"), exec, sync, &pgproto3.Query{String: "ROLLBACK"}}, "C Z 2 T D C Z 2 D D E Z C Z"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := encode(tc.msgs...)
			readies := 0
			for _, m := range tc.msgs {
				switch m.(type) {
				case *pgproto3.Sync, *pgproto3.Query:
					readies++
				}
			}
			want := [][]byte{direct[0].exchange(t, in, readies), direct[1].exchange(t, in, readies)}
			got := proxied.exchange(t, in, readies)
			if types := messageTypes(want[0]); types != tc.want {
				t.Fatalf("PostgreSQL answered %q, the case expects %q%s", types, tc.want, errorsOf(want[0]))
			}
			if !bytes.Equal(got, want[0]) && !bytes.Equal(got, want[1]) {
				t.Fatalf("through the proxy: %q%s\nPostgreSQL: %q%s\nfirst difference at byte %d of %d (%d of %d)",
					messageTypes(got), errorsOf(got), messageTypes(want[0]), errorsOf(want[0]),
					firstDiff(got, want[0]), len(want[0]), firstDiff(got, want[1]), len(want[1]))
			}
		})
	}
}

// rawTestConn is a connection that logged in with pgconn and then sends and
// reads bytes.
type rawTestConn struct {
	conn net.Conn
	r    *wire.Reader
}

// hijackedConn logs in to dsn and hands over the connection's socket.
func hijackedConn(t *testing.T, dsn string) *rawTestConn {
	t.Helper()
	pc, err := pgconn.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hc.Conn.Write([]byte{'X', 0, 0, 0, 4})
		hc.Conn.Close()
	})
	return &rawTestConn{conn: hc.Conn, r: wire.NewReader(hc.Conn, 8192, 1<<30)}
}

// exchange sends in and returns every message of the answer up to the
// readies-th ReadyForQuery.
func (rc *rawTestConn) exchange(t *testing.T, in []byte, readies int) []byte {
	t.Helper()
	rc.conn.SetDeadline(time.Now().Add(30 * time.Second))
	defer rc.conn.SetDeadline(time.Time{})
	if _, err := rc.conn.Write(in); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for readies > 0 {
		typ, raw, _, err := rc.r.Next()
		if err != nil {
			t.Fatalf("after %q: %v", messageTypes(out), err)
		}
		out = append(out, raw...)
		if typ == 'Z' {
			readies--
		}
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
