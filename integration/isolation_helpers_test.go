package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// otherRole is a role without superuser rights that clients switch to with
// SET ROLE or SET SESSION AUTHORIZATION; the proxy's server user (the
// cluster's superuser) may do both.
const otherRole = "other_role"

// isoCluster starts a cluster with database app holding table public.t and
// role other_role, which may read t.
func isoCluster(t testing.TB) *pgtest.Cluster {
	t.Helper()
	cl := cluster(t, "app")
	ctx := context.Background()
	if err := cl.Exec(ctx, "postgres", "CREATE ROLE "+otherRole); err != nil {
		t.Fatal(err)
	}
	if err := cl.Exec(ctx, "app", "CREATE TABLE public.t (x int); GRANT SELECT ON public.t TO "+otherRole); err != nil {
		t.Fatal(err)
	}
	return cl
}

// connectConfig connects to url with pgx, with runtime parameters params
// and DefaultQueryExecMode mode, and closes the connection when the test
// ends.
func connectConfig(t testing.TB, url string, mode pgx.QueryExecMode, params map[string]string) *pgx.Conn {
	t.Helper()
	conn, err := tryConnect(url, mode, params)
	if err != nil {
		t.Fatalf("connect %s %v: %v", url, params, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// tryConnect connects as connectConfig does but returns the error.
func tryConnect(url string, mode pgx.QueryExecMode, params map[string]string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = mode
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return pgx.ConnectConfig(ctx, cfg)
}

// notProxyNamed filters pg_prepared_statements down to what transaction
// pooling can show exactly. In transaction mode the proxy shares server-side
// statements between the clients of a pool under proxy-wide names (sg_<n>
// for protocol-level, sgq_<n> for SQL-level statements), so every client of
// the pool sees them, and its own statements under those names, not its
// own; PgBouncer and PgDog do the same. docs/pooling.md lists it as a
// difference by nature.
const notProxyNamed = "name !~ '^sgq?_[0-9]+$'"

// simpleConn connects with the simple query protocol only, so that the
// connection creates no prepared statements of its own: what it sees in
// pg_prepared_statements was made by someone else.
func simpleConn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	return connectConfig(t, url, pgx.QueryExecModeSimpleProtocol, nil)
}

// queryRow runs sql in mode and returns its first row as text (NULL as
// "NULL"); a query without rows is an error.
func queryRow(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	if rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, err
		}
		for _, v := range vals {
			if v == nil {
				out = append(out, "NULL")
			} else {
				out = append(out, fmt.Sprint(v))
			}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if out == nil {
		return nil, fmt.Errorf("%s: no rows", sql)
	}
	return out, nil
}

// row is queryRow that fails the test on an error.
func row(t testing.TB, conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) []string {
	t.Helper()
	r, err := queryRow(conn, mode, sql, args...)
	if err != nil {
		t.Fatalf("%s [%v]: %v", sql, mode, err)
	}
	return r
}

// value returns the single value sql returns.
func value(t testing.TB, conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) string {
	t.Helper()
	return row(t, conn, mode, sql, args...)[0]
}

// execIn runs sql in mode, failing the test on an error.
func execIn(t testing.TB, conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) {
	t.Helper()
	if err := tryExec(conn, mode, sql, args...); err != nil {
		t.Fatalf("%s [%v]: %v", sql, mode, err)
	}
}

// tryExec runs sql in mode, discarding any rows, and returns its error. It
// uses Query, not Exec: pgx's Exec runs every statement without arguments
// with the simple protocol, whatever the mode.
func tryExec(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) error {
	_, err := execTag(conn, mode, sql, args...)
	return err
}

// execTag runs sql as tryExec does and returns its command tag. Without
// arguments, the simple protocol sends sql as it is: pgx would take $1 in
// it (PREPARE q(int) AS SELECT $1) for a placeholder of its own.
func execTag(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if mode == pgx.QueryExecModeSimpleProtocol && len(args) == 0 {
		results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil || len(results) == 0 {
			return "", err
		}
		return results[len(results)-1].CommandTag.String(), nil
	}
	rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
	if err != nil {
		return "", err
	}
	rows.Close()
	return rows.CommandTag().String(), rows.Err()
}

// pgErr returns the PostgreSQL error in err, or nil.
func pgErr(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// errText describes an error as a client sees it: severity, SQLSTATE and
// message of a PostgreSQL error, or the error itself.
func errText(err error) string {
	if err == nil {
		return "no error"
	}
	if pe := pgErr(err); pe != nil {
		return fmt.Sprintf("%s %s %q", pe.Severity, pe.Code, abbrev(pe.Message, 120))
	}
	return "non-PostgreSQL error: " + err.Error()
}

// abbrev shortens s to n bytes for failure messages.
func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s…(%d bytes)", strings.ToValidUTF8(s[:n], ""), len(s))
}

// directDefaults returns the values a fresh direct connection to database
// db of cl has for settings names.
func directDefaults(t testing.TB, cl *pgtest.Cluster, db string, names ...string) map[string]string {
	t.Helper()
	conn := simpleConn(t, cl.DSN(db))
	defer conn.Close(context.Background())
	out := map[string]string{}
	for _, n := range names {
		out[n] = value(t, conn, pgx.QueryExecModeSimpleProtocol, "SELECT current_setting($1)", n)
	}
	return out
}

// holdBoth opens a transaction on each of two new clients at the same time
// and fails unless both get a server within the checkout timeout: on a pool
// of two, that proves no other client keeps a server pinned.
func holdBoth(t testing.TB, p *proxy) {
	t.Helper()
	ctx := context.Background()
	x := simpleConn(t, p.AppURL("app"))
	y := simpleConn(t, p.AppURL("app"))
	defer x.Close(ctx)
	defer y.Close(ctx)
	var pids []string
	for _, c := range []*pgx.Conn{x, y} {
		if err := tryExec(c, pgx.QueryExecModeSimpleProtocol, "BEGIN"); err != nil {
			t.Fatalf("BEGIN: %v", err)
		}
		pid, err := queryRow(c, pgx.QueryExecModeSimpleProtocol, "SELECT pg_backend_pid()")
		if err != nil {
			t.Fatalf("two clients could not hold the pool's two servers at once (is a server still pinned?): %v", err)
		}
		pids = append(pids, pid[0])
	}
	if pids[0] == pids[1] {
		t.Fatalf("two open transactions share backend %s", pids[0])
	}
	for _, c := range []*pgx.Conn{x, y} {
		execIn(t, c, pgx.QueryExecModeSimpleProtocol, "COMMIT")
	}
}

// checkRow fails unless got equals want.
func checkRow(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// lastRow runs sql, which may hold several statements, with the simple
// query protocol and returns the first row of the last result as text.
func lastRow(t testing.TB, conn *pgx.Conn, sql string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if len(results) == 0 || len(results[len(results)-1].Rows) == 0 {
		t.Fatalf("%s: no rows in the last result", sql)
	}
	var out []string
	for _, v := range results[len(results)-1].Rows[0] {
		out = append(out, string(v))
	}
	return out
}
