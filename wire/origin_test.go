package wire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// TestOriginsMatchPostgres makes a real PostgreSQL raise every error of
// the origins table and checks that the proxy would send the same file and
// routine — and the same line, on the PostgreSQL version the table was read
// from (15.18) — and that its encoding of the server's own error equals the
// server's bytes from the message on.
func TestOriginsMatchPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret",
		Settings: map[string]string{"max_connections": "12", "superuser_reserved_connections": "0"}})
	dsn := c.DSN("postgres")
	conn := func(t *testing.T) *pgconn.PgConn {
		t.Helper()
		pc, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close(context.Background()) })
		return pc
	}
	var version int
	res, err := conn(t).Exec(ctx, "SHOW server_version_num").ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		t.Fatalf("server_version_num: %v", err)
	}
	version, _ = strconv.Atoi(string(res[0].Rows[0][0]))

	// raw sends msgs on a fresh connection and returns the first error.
	raw := func(t *testing.T, msgs ...pgproto3.FrontendMessage) *pgconn.PgError {
		t.Helper()
		hc, err := conn(t).Hijack()
		if err != nil {
			t.Fatal(err)
		}
		defer hc.Conn.Close()
		hc.Conn.SetDeadline(time.Now().Add(10 * time.Second))
		for _, m := range msgs {
			hc.Frontend.Send(m)
		}
		if err := hc.Frontend.Flush(); err != nil {
			t.Fatal(err)
		}
		var first *pgconn.PgError
		for {
			m, err := hc.Frontend.Receive()
			if err != nil {
				return first
			}
			switch m := m.(type) {
			case *pgproto3.ErrorResponse:
				if first == nil {
					first = pgconn.ErrorResponseToPgError(m)
				}
			case *pgproto3.NoticeResponse:
				if first == nil && m.Severity == "WARNING" {
					first = pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))
				}
			case *pgproto3.ReadyForQuery:
				return first
			}
		}
	}
	query := func(sql string) *pgproto3.Query { return &pgproto3.Query{String: sql} }
	if _, err := conn(t).Exec(ctx, "CREATE TABLE t (id bigint, v text)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	copyErr := func(t *testing.T, sql, data string) *pgconn.PgError {
		t.Helper()
		_, err := conn(t).CopyFrom(ctx, strings.NewReader(data), sql)
		var pe *pgconn.PgError
		errors.As(err, &pe)
		return pe
	}
	sync := &pgproto3.Sync{}
	loginErr := func(t *testing.T, url string) *pgconn.PgError {
		t.Helper()
		_, err := pgconn.Connect(ctx, url)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			t.Fatalf("connect %s: %v, want a server error", url, err)
		}
		return pe
	}
	raise := map[string]func(*testing.T) *pgconn.PgError{
		`prepared statement "%" does not exist`: func(t *testing.T) *pgconn.PgError {
			return raw(t, &pgproto3.Bind{PreparedStatement: "nope"}, sync)
		},
		`unnamed prepared statement does not exist`: func(t *testing.T) *pgconn.PgError { return raw(t, &pgproto3.Bind{}, sync) },
		`prepared statement "%" already exists`: func(t *testing.T) *pgconn.PgError {
			return raw(t, &pgproto3.Parse{Name: "a", Query: "SELECT 1"}, &pgproto3.Parse{Name: "a", Query: "SELECT 1"}, sync)
		},
		`portal "%" does not exist`: func(t *testing.T) *pgconn.PgError { return raw(t, &pgproto3.Execute{Portal: "nope"}, sync) },
		`cursor "%" does not exist`: func(t *testing.T) *pgconn.PgError { return raw(t, query("FETCH 1 FROM nope")) },
		`cursor "%" already exists`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("BEGIN; DECLARE c CURSOR FOR SELECT 1; DECLARE c CURSOR FOR SELECT 1"))
		},
		`cursor can only scan forward`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("BEGIN; DECLARE c NO SCROLL CURSOR FOR SELECT 1; FETCH PRIOR FROM c"))
		},
		`cannot insert multiple commands into a prepared statement`: func(t *testing.T) *pgconn.PgError {
			return raw(t, &pgproto3.Parse{Query: "SELECT 1; SELECT 2"}, sync)
		},
		`bind message supplies %`: func(t *testing.T) *pgconn.PgError {
			return raw(t, &pgproto3.Parse{Name: "p", Query: "SELECT $1::int"}, &pgproto3.Bind{PreparedStatement: "p"}, sync)
		},
		`bind message has % parameters`: func(t *testing.T) *pgconn.PgError {
			return raw(t, &pgproto3.Parse{Name: "p", Query: "SELECT $1::int"},
				&pgproto3.Bind{PreparedStatement: "p", ParameterFormatCodes: []int16{0, 0}, Parameters: [][]byte{[]byte("1")}}, sync)
		},
		`invalid frontend message type %`: func(t *testing.T) *pgconn.PgError {
			hc, err := conn(t).Hijack()
			if err != nil {
				t.Fatal(err)
			}
			defer hc.Conn.Close()
			hc.Conn.SetDeadline(time.Now().Add(10 * time.Second))
			hc.Conn.Write([]byte{'!', 0, 0, 0, 4})
			m, err := hc.Frontend.Receive()
			if e, ok := m.(*pgproto3.ErrorResponse); ok && err == nil {
				return pgconn.ErrorResponseToPgError(e)
			}
			return nil
		},
		`invalid startup packet layout: expected terminator as last byte`: func(t *testing.T) *pgconn.PgError {
			nc, err := net.Dial("tcp", net.JoinHostPort(c.Host, strconv.Itoa(c.Port)))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			nc.Write([]byte{0, 0, 0, 17, 0, 3, 0, 0, 'u', 's', 'e', 'r', 0, 'p', 'o', 's', 't'})
			m, err := pgproto3.NewFrontend(nc, nc).Receive()
			if e, ok := m.(*pgproto3.ErrorResponse); ok && err == nil {
				return pgconn.ErrorResponseToPgError(e)
			}
			return nil
		},
		`% can only be used in transaction blocks`: func(t *testing.T) *pgconn.PgError { return raw(t, query("SAVEPOINT a")) },
		`current transaction is aborted, commands ignored until end of transaction block`: func(t *testing.T) *pgconn.PgError {
			pc := conn(t)
			pc.Exec(ctx, "BEGIN; SELECT 1/0").ReadAll()
			_, err := pc.Exec(ctx, "SELECT 1").ReadAll()
			var pe *pgconn.PgError
			errors.As(err, &pe)
			return pe
		},
		`there is no parameter $%`: func(t *testing.T) *pgconn.PgError { return raw(t, query("SELECT $1")) },
		`invalid input syntax for type numeric: %`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT 'x'::numeric"))
		},
		`database "%" does not exist`: func(t *testing.T) *pgconn.PgError { return loginErr(t, c.DSN("no_such_database")) },
		`password authentication failed for user "%"`: func(t *testing.T) *pgconn.PgError {
			return loginErr(t, fmt.Sprintf("postgres://postgres:wrong@%s:%d/postgres?sslmode=disable", c.Host, c.Port))
		},
		`terminating connection due to administrator command`: func(t *testing.T) *pgconn.PgError {
			victim := conn(t)
			if _, err := conn(t).Exec(ctx, fmt.Sprintf("SELECT pg_terminate_backend(%d)", victim.PID())).ReadAll(); err != nil {
				t.Fatal(err)
			}
			_, err := victim.Exec(ctx, "SELECT 1").ReadAll()
			var pe *pgconn.PgError
			errors.As(err, &pe)
			return pe
		},
		`there is already a transaction in progress`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("BEGIN; BEGIN"))
		},
		`there is no transaction in progress`: func(t *testing.T) *pgconn.PgError { return raw(t, query("COMMIT")) },
		`savepoint "%" does not exist`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("BEGIN; ROLLBACK TO nope"))
		},
		`COPY file signature not recognized`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT binary)", "PGCOPY\n")
		},
		`invalid COPY file header (missing flags)`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00")
		},
		`invalid COPY file header (missing length)`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00")
		},
		`unexpected EOF in COPY data`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x08\x00")
		},
		`unterminated CSV quoted field`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT csv)", "1,\"a\n")
		},
		`missing data for column "%"`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t (v, id) FROM STDIN", "a\n")
		},
		`row field count is %, expected %`: func(t *testing.T) *pgconn.PgError {
			return copyErr(t, "COPY t FROM STDIN (FORMAT binary)", "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x01x\xff\xff")
		},
		`money out of range`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT sum(x) FROM (VALUES ('92233720368547758.07'::money), ('1'::money)) v(x)"))
		},
		`interval out of range`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT sum(x) FROM (VALUES ('178956970 years'::interval), ('178956970 years'::interval)) v(x)"))
		},
		`cannot AND bit strings of different sizes`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT bit_and(x) FROM (VALUES (B'101'), (B'10')) v(x)"))
		},
		`cannot OR bit strings of different sizes`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT bit_or(x) FROM (VALUES (B'101'), (B'10')) v(x)"))
		},
		`cannot XOR bit strings of different sizes`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT bit_xor(x) FROM (VALUES (B'101'), (B'10')) v(x)"))
		},
		`cannot accumulate arrays of different dimensionality`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT array_agg(x) FROM (VALUES (ARRAY[1]), (ARRAY[1, 2])) v(x)"))
		},
		`value out of range: overflow`: func(t *testing.T) *pgconn.PgError {
			return raw(t, query("SELECT regr_sxx(y, x) FROM (VALUES (0, 1e200::float8), (0, -1e200::float8)) v(y, x)"))
		},
		`sorry, too many clients already`: func(t *testing.T) *pgconn.PgError {
			for range 20 {
				pc, err := pgconn.Connect(ctx, dsn)
				var pe *pgconn.PgError
				if errors.As(err, &pe) {
					return pe
				}
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { pc.Close(context.Background()) })
			}
			return nil
		},
	}
	check := func(t *testing.T, pe *pgconn.PgError, at *wire.Location) {
		t.Helper()
		got := wire.AppendError(nil, &wire.Error{Severity: pe.Severity, Code: pe.Code, Message: pe.Message, At: at})
		be := &pgproto3.ErrorResponse{}
		if err := be.Decode(got[5:]); err != nil {
			t.Fatal(err)
		}
		if be.File != pe.File || be.Routine != pe.Routine || version == 150018 && be.Line != pe.Line {
			t.Errorf("the proxy's %q: F=%s L=%d R=%s; PostgreSQL %d sends F=%s L=%d R=%s", pe.Message,
				be.File, be.Line, be.Routine, version, pe.File, pe.Line, pe.Routine)
		}
	}
	for _, at := range []struct {
		name string
		at   *wire.Location
		sql  string
	}{
		{"AtRollbackOutside", wire.AtRollbackOutside, "ROLLBACK"},
		{"AtRelease", wire.AtRelease, "BEGIN; RELEASE nope"},
		{"AtIntervalDays", wire.AtIntervalDays, "SELECT sum(x) FROM (VALUES ('2147483647 days'::interval), ('1 day'::interval)) v(x)"},
		{"AtIntervalTime", wire.AtIntervalTime, "SELECT sum(x) FROM (VALUES ('2562047788 hours'::interval), ('2562047788 hours'::interval)) v(x)"},
		{"AtCommitImplicit", wire.AtCommitImplicit, "SELECT 1; COMMIT"},
		{"AtRollbackOutside in an implicit transaction", wire.AtRollbackOutside, "SELECT 1; ROLLBACK"},
	} {
		t.Run(at.name, func(t *testing.T) {
			pe := raw(t, query(at.sql))
			if pe == nil {
				t.Fatalf("%s raised nothing", at.sql)
			}
			check(t, pe, at.at)
		})
	}
	t.Run("AtDescribePortal", func(t *testing.T) {
		pe := raw(t, &pgproto3.Describe{ObjectType: 'P', Name: "nope"}, sync)
		if pe == nil {
			t.Fatal("Describe of an unknown portal raised nothing")
		}
		check(t, pe, wire.AtDescribePortal)
	})
	for _, o := range wire.OriginsForTest() {
		t.Run(o.Message, func(t *testing.T) {
			f := raise[o.Message]
			if f == nil {
				t.Fatalf("no way to make PostgreSQL raise %q", o.Message)
			}
			pe := f(t)
			if pe == nil || pe.Code != o.Code {
				t.Fatalf("PostgreSQL answered %v, want SQLSTATE %s", pe, o.Code)
			}
			check(t, pe, nil)
		})
	}
}
