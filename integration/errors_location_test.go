package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestProxyErrorsLikePostgres makes the proxy answer errors itself that
// PostgreSQL gives in the same situation — on a sharded database, whose
// statements and portals are the proxy's, on a one-shard database in
// transaction pooling, and at login — and compares each
// with the error one PostgreSQL server gives: severity, SQLSTATE, message,
// and the source file, function and (on PostgreSQL 15.18, the version
// wire/origin.go was read from) line that psql shows as LOCATION.
func TestProxyErrorsLikePostgres(t *testing.T) {
	cl, p := twoShards(t, "transaction")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := cl.Exec(ctx, "postgres", fmt.Sprintf("CREATE ROLE app LOGIN PASSWORD '%s'", appPassword)); err != nil {
		t.Fatal(err)
	}
	direct := cl.DSN("shard0")
	one := startProxy(t, poolConfig(cl, "transaction", 2, "shard0"))
	var version string
	if err := connect(t, direct).QueryRow(ctx, "SHOW server_version_num").Scan(&version); err != nil {
		t.Fatal(err)
	}
	fields := func(pe *pgconn.PgError) string {
		if pe == nil {
			return "no error"
		}
		line := "-"
		if version == "150018" {
			line = fmt.Sprint(pe.Line)
		}
		return fmt.Sprintf("%s %s %q P=%d F=%s L=%s R=%s", pe.Severity, pe.Code, pe.Message, pe.Position, pe.File, line, pe.Routine)
	}
	// raw returns what the messages get on a new connection, message by
	// message: each one's type, an error or notice with its fields.
	raw := func(url string, msgs ...pgproto3.FrontendMessage) string {
		t.Helper()
		fe := dialFrontend(t, url)
		var out strings.Builder
		for _, step := range msgs {
			fe.fe.Send(step)
			if _, ok := step.(*pgproto3.Sync); !ok {
				if _, ok := step.(*pgproto3.Query); !ok {
					continue
				}
			}
			if err := fe.fe.Flush(); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := fe.fe.Receive()
				if err != nil {
					t.Fatal(err)
				}
				switch m := m.(type) {
				case *pgproto3.ErrorResponse:
					out.WriteString(fields(pgconn.ErrorResponseToPgError(m)) + "\n")
				case *pgproto3.NoticeResponse:
					out.WriteString(fields(pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))) + "\n")
				default:
					fmt.Fprintf(&out, "%T ", m)
				}
				if _, ok := m.(*pgproto3.ReadyForQuery); ok {
					out.WriteString("\n")
					break
				}
			}
		}
		// Leave, so that a transaction left open gives its servers back.
		fe.fe.Send(&pgproto3.Terminate{})
		fe.fe.Flush()
		return out.String()
	}
	login := func(url string) *pgconn.PgError {
		_, err := pgconn.Connect(ctx, url)
		var pe *pgconn.PgError
		errors.As(err, &pe)
		return pe
	}
	sync := &pgproto3.Sync{}
	for _, tc := range []struct {
		name string
		msgs []pgproto3.FrontendMessage
	}{
		{"Bind of an unknown statement", []pgproto3.FrontendMessage{&pgproto3.Bind{PreparedStatement: "nope"}, sync}},
		{"Execute of an unknown portal", []pgproto3.FrontendMessage{&pgproto3.Execute{Portal: "nope"}, sync}},
		{"Describe of an unknown portal", []pgproto3.FrontendMessage{&pgproto3.Describe{ObjectType: 'P', Name: "nope"}, sync}},
		{"Parse of a statement name in use", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s", Query: "SELECT id FROM accounts WHERE id = $1::int8"},
			&pgproto3.Parse{Name: "s", Query: "SELECT id FROM accounts WHERE id = $1::int8"}, sync}},
		{"Parse of a name that DEALLOCATE freed, then Bind of it", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "s", Query: "SELECT id FROM accounts WHERE id = $1::int8"}, sync,
			&pgproto3.Query{String: "DEALLOCATE s"},
			&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}}, sync,
			&pgproto3.Parse{Name: "s", Query: "SELECT id FROM accounts WHERE id = $1::int8"},
			&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}, sync}},
		{"Parse of the name of an SQL-level statement", []pgproto3.FrontendMessage{
			&pgproto3.Query{String: "PREPARE q AS SELECT count(*) FROM accounts"},
			&pgproto3.Parse{Name: "q", Query: "SELECT 1"}, sync}},
		{"PREPARE of the name of a protocol-level statement", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "r", Query: "SELECT 1"}, sync,
			&pgproto3.Query{String: "PREPARE r AS SELECT count(*) FROM accounts"}}},
		{"a simple Query routed by a parameter it does not have", []pgproto3.FrontendMessage{
			&pgproto3.Query{String: "INSERT INTO accounts VALUES ($1, 'x')"},
			&pgproto3.Query{String: "SELECT 1; /* é */ SELECT email FROM accounts WHERE id = $2"}}},
		{"a Bind with too few parameters, then too many", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Query: "SELECT email FROM accounts WHERE id = $1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, sync,
			&pgproto3.Parse{Name: "n", Query: "SELECT email FROM accounts WHERE id = 1", ParameterOIDs: []uint32{20}},
			&pgproto3.Bind{PreparedStatement: "n"}, &pgproto3.Execute{}, sync,
			&pgproto3.Bind{PreparedStatement: "n", Parameters: [][]byte{[]byte("1"), []byte("2")}}, &pgproto3.Execute{}, sync,
			&pgproto3.Parse{Query: "SELECT email FROM accounts WHERE id = 1 AND email <> '$1' -- $2"},
			&pgproto3.Bind{}, &pgproto3.Execute{}, sync}},
		{"Parse of a statement that another search_path accepted", []pgproto3.FrontendMessage{
			&pgproto3.Parse{Name: "a", Query: "SELECT count(*) FROM accounts WHERE id = 1"}, sync,
			&pgproto3.Query{String: "SET search_path = pg_catalog"},
			&pgproto3.Parse{Name: "b", Query: "SELECT count(*) FROM accounts WHERE id = 1"}, sync,
			&pgproto3.Query{String: "RESET search_path"},
			&pgproto3.Parse{Name: "c", Query: "SELECT count(*) FROM accounts WHERE id = 1"}, sync}},
		{"SAVEPOINT outside a transaction", []pgproto3.FrontendMessage{&pgproto3.Query{String: "SAVEPOINT a"}}},
		{"a statement in an aborted transaction", []pgproto3.FrontendMessage{
			&pgproto3.Query{String: "BEGIN"}, &pgproto3.Query{String: "SELECT 1/0"}, &pgproto3.Query{String: "ROLLBACK TO nope"},
			&pgproto3.Query{String: "SELECT count(*) FROM accounts"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := raw(direct, tc.msgs...)
			for _, via := range []struct{ what, url string }{
				{"the sharded database", p.AppURL("app")}, {"a one-shard database", one.AppURL("shard0")},
			} {
				if got := raw(via.url, tc.msgs...); got != want {
					t.Errorf("through %s:\n%s\ndirectly:\n%s", via.what, got, want)
				}
			}
		})
	}
	t.Run("login to an unknown database", func(t *testing.T) {
		want, got := fields(login(cl.DSN("no_such_db"))), fields(login(p.AppURL("no_such_db")))
		if got != want {
			t.Errorf("through the proxy %s\n                 directly  %s", got, want)
		}
	})
	t.Run("COPY of malformed rows", func(t *testing.T) {
		copyErr := func(url, sql, data string) string {
			pc, err := pgconn.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close(ctx)
			_, err = pc.CopyFrom(ctx, strings.NewReader(data), sql)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) {
				return fmt.Sprintf("no server error: %v", err)
			}
			return fields(pe) + " W=" + pe.Where
		}
		for _, c := range []struct{ sql, data string }{
			{"COPY accounts FROM STDIN (FORMAT csv)", "1,a\n2,\"b\n"},
			{"COPY accounts FROM STDIN", "1\ta\n2\n"},
			{"COPY accounts FROM STDIN", "1\ta\tb\n"},
			{"COPY accounts FROM STDIN", "101\ta\n102\tb\n103\tc\n104\td\n105\te\n101\tf\n"},
			{"COPY accounts FROM STDIN (FORMAT csv, HEADER)", "id,email\n201,a\n202,b\n203,c\n204,d\n202,e\n"},
			{"COPY accounts FROM STDIN (FORMAT binary)", "PGCOPY\n"},
			{"COPY accounts FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00"},
			{"COPY accounts FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00"},
			// Made by the proxy, which cannot route a row without its key.
			{"COPY accounts (email, id) FROM STDIN", "a\t401\nb\n"},
			{"COPY accounts (email, id) FROM STDIN (FORMAT csv, HEADER)", "email,id\n\"x\ny\",402\nb\n"},
			{"COPY accounts FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x01\x93\xff\xff"},
			// A shard's error after CSV rows with quoted newlines, which
			// count as lines except in the first line.
			{"COPY accounts FROM STDIN (FORMAT csv)", "301,\"a\nb\"\n302,c\n303,\"d\ne\"\n304,e\n305,\"f\ng\"\n301,f\n"},
			{"COPY accounts FROM STDIN (FORMAT csv)", "311,\"a\nb\"\n312,\"c\nd\"\n313\n"},
			{"COPY accounts FROM STDIN (FORMAT csv, HEADER)", "h\n321,a\n322,\"c\nd\"\n323,e\n324,\"x\ny\"\n321,z\n"},
		} {
			want, got := copyErr(direct, c.sql, c.data), copyErr(p.AppURL("app"), c.sql, c.data)
			if got != want {
				t.Errorf("%s with %q:\n through the proxy %s\n directly          %s", c.sql, c.data, got, want)
			}
		}
	})
	t.Run("login of an unknown user", func(t *testing.T) {
		want := fields(login(fmt.Sprintf("postgres://nosuchuser:x@%s:%d/shard0?sslmode=disable", cl.Host, cl.Port)))
		got := fields(login(p.URL("nosuchuser", "x", "app")))
		if got != want {
			t.Errorf("through the proxy %s\n                 directly  %s", got, want)
		}
	})
	t.Run("login with a wrong password", func(t *testing.T) {
		want := fields(login(fmt.Sprintf("postgres://app:wrong@%s:%d/shard0?sslmode=disable", cl.Host, cl.Port)))
		got := fields(login(p.URL("app", "wrong", "app")))
		if got != want {
			t.Errorf("through the proxy %s\n                 directly  %s", got, want)
		}
	})
}
