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
	"github.com/jackc/pgx/v5/pgproto3"
)

// A write naming a table the proxy cannot place, or a column its table
// lacks, answers PostgreSQL's own error — severity, SQLSTATE, message,
// position, detail and hint — in every protocol path, without running:
// the shards only Parse it (router/probe.go). These tests send each case
// as raw protocol messages to plain PostgreSQL and through the proxy and
// require the same messages back, then check that nothing was written.

// probeWriteCases are writes PostgreSQL fails at parse analysis.
var probeWriteCases = []string{
	"INSERT INTO nosuch VALUES (1)",
	"INSERT INTO nosuch (shard_key, v) VALUES (1, 2)",
	"UPDATE nosuch SET v = 1",
	"DELETE FROM nosuch WHERE v = 1",
	"INSERT INTO accounts SELECT * FROM nosuch",
	"INSERT INTO nosuch SELECT * FROM accounts",
	"SELECT * INTO newtab FROM nosuch",
	"WITH d AS (DELETE FROM nosuch RETURNING *) SELECT * FROM d",
	"WITH d AS (DELETE FROM accounts RETURNING *) SELECT * FROM d JOIN nosuch n ON n.v = d.id",
	"MERGE INTO nosuch n USING accounts a ON n.v = a.id WHEN MATCHED THEN DELETE",
	"UPDATE accounts SET nosuchcol = 1",
	"UPDATE accounts SET email = nosuchcol",
	"DELETE FROM accounts WHERE nosuchcol = 1",
	"INSERT INTO accounts (id, nosuchcol) VALUES (100, 'x')",
	"INSERT INTO accounts (nosuchcol) VALUES ('x')",
	"INSERT INTO accounts VALUES (100, 'x') RETURNING nosuchcol",
	"UPDATE accounts SET email = 'x' WHERE id = 1 RETURNING nosuchcol",
	"INSERT INTO things VALUES (1)", // other.things, not on search_path
	"EXPLAIN INSERT INTO nosuch VALUES (1)",
	"EXPLAIN ANALYZE INSERT INTO nosuch VALUES (1)",
	"EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM nosuch",
}

// probeWriteModes send one statement in each protocol path: each is a
// list of wire steps.
var probeWriteModes = []struct {
	name  string
	steps func(sql string) []wireStep
}{
	{"simple", func(sql string) []wireStep {
		return []wireStep{{send: msgs(queryMsg(sql)), zs: 1}}
	}},
	{"multi-statement", func(sql string) []wireStep {
		return []wireStep{{send: msgs(queryMsg("INSERT INTO accounts VALUES (100, 'x'); SELECT 1; " + sql + "; SELECT 2")), zs: 1}}
	}},
	{"extended named", func(sql string) []wireStep {
		return []wireStep{{send: msgs(parseMsg("s", sql), bindMsg("s"), execMsg(0), syncMsg), zs: 1}}
	}},
	{"extended unnamed", func(sql string) []wireStep {
		return []wireStep{{send: msgs(parseMsg("", sql), bindMsg(""), describePortal(), execMsg(0), syncMsg), zs: 1}}
	}},
	{"describe only", func(sql string) []wireStep {
		return []wireStep{{send: msgs(parseMsg("", sql), describeStmt(""), syncMsg), zs: 1}}
	}},
	{"pipeline", func(sql string) []wireStep {
		return []wireStep{{send: msgs(
			parseMsg("", "INSERT INTO accounts VALUES (100, 'x')"), bindMsg(""), execMsg(0),
			parseMsg("p", sql), bindMsg("p"), execMsg(0),
			parseMsg("", "SELECT 1"), bindMsg(""), execMsg(0),
			syncMsg), zs: 1}}
	}},
	{"transaction", func(sql string) []wireStep {
		return []wireStep{
			{send: msgs(queryMsg("BEGIN")), zs: 1},
			{send: msgs(queryMsg("INSERT INTO accounts VALUES (100, 'x')")), zs: 1},
			{send: msgs(queryMsg(sql)), zs: 1},
			{send: msgs(queryMsg("SELECT 1")), zs: 1},
			{send: msgs(parseMsg("", "SELECT 1"), bindMsg(""), execMsg(0), syncMsg), zs: 1},
			{send: msgs(queryMsg("ROLLBACK")), zs: 1},
		}
	}},
	{"transaction extended", func(sql string) []wireStep {
		return []wireStep{
			{send: msgs(queryMsg("BEGIN")), zs: 1},
			{send: msgs(parseMsg("", sql), bindMsg(""), execMsg(0), syncMsg), zs: 1},
			{send: msgs(queryMsg("SELECT 1")), zs: 1},
			{send: msgs(queryMsg("ROLLBACK")), zs: 1},
		}
	}},
}

func msgs(m ...pgproto3.FrontendMessage) []pgproto3.FrontendMessage { return m }

func describePortal() *pgproto3.Describe { return &pgproto3.Describe{ObjectType: 'P'} }

func describeStmt(name string) *pgproto3.Describe {
	return &pgproto3.Describe{ObjectType: 'S', Name: name}
}

// probeMsg renders a backend message with every field of an error.
func probeMsg(m pgproto3.BackendMessage) string {
	if e, ok := m.(*pgproto3.ErrorResponse); ok {
		return fmt.Sprintf("E(%s/%s %s %q detail %q hint %q position %d internal %d %q where %q)",
			e.Severity, e.SeverityUnlocalized, e.Code, e.Message, e.Detail, e.Hint, e.Position,
			e.InternalPosition, e.InternalQuery, e.Where)
	}
	return fullMsg(m)
}

// probeRun runs steps on a new connection to url and returns the
// answers, step by step.
func probeRun(t *testing.T, url string, prelude []string, steps []wireStep) [][]string {
	t.Helper()
	w := dialWire(t, url)
	defer w.close()
	for _, q := range prelude {
		w.run([]wireStep{{send: msgs(queryMsg(q)), zs: 1}}, nil)
	}
	var out [][]string
	for _, st := range steps {
		for _, m := range st.send {
			w.fe.Send(m)
		}
		if err := w.fe.Flush(); err != nil {
			t.Fatal(err)
		}
		w.hc.Conn.SetReadDeadline(time.Now().Add(stepTimeout))
		var got []string
		for {
			m, err := w.fe.Receive()
			if err != nil {
				got = append(got, "read error: "+readErr(err))
				break
			}
			got = append(got, probeMsg(m))
			if _, ok := m.(*pgproto3.ReadyForQuery); ok {
				break
			}
		}
		out = append(out, got)
	}
	return out
}

// probeEnv is a diffEnv with schema other, holding table things on every
// database, and a proxy in transaction mode and one in session mode.
func probeEnv(t *testing.T) (*diffEnv, []*proxy) {
	t.Helper()
	e := newDiffEnv(t)
	for db, c := range e.reset {
		if _, err := c.Exec(context.Background(), "CREATE SCHEMA other; CREATE TABLE other.things (v int)"); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
	return e, []*proxy{startProxy(t, e.proxyConfig("transaction", 2)), startProxy(t, e.proxyConfig("session", 2))}
}

// probeURLs are the proxy databases with several shards, in both pool
// modes.
func probeURLs(ps []*proxy) map[string]string {
	out := map[string]string{}
	for k, p := range ps {
		mode := []string{"transaction", "session"}[k]
		for _, db := range []string{"two", "three"} {
			out[mode+"/"+db] = p.AppURL(db)
		}
	}
	return out
}

// rowsEverywhere counts the rows of accounts and other.things in every
// database behind proxy database db and in ref.
func (e *diffEnv) rowsEverywhere(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, db := range []string{"ref", "s0", "s1", "t0", "t1", "t2"} {
		var n, m int
		if err := e.reset[db].QueryRow(context.Background(), "SELECT (SELECT count(*) FROM accounts), (SELECT count(*) FROM other.things)").Scan(&n, &m); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
		fmt.Fprintf(&b, "%s:%d/%d ", db, n, m)
	}
	return b.String()
}

// TestProbeWriteErrors compares every case in every mode with PostgreSQL.
func TestProbeWriteErrors(t *testing.T) {
	checkGoroutines(t)
	e, ps := probeEnv(t)
	before := e.rowsEverywhere(t)
	for _, sql := range probeWriteCases {
		for _, m := range probeWriteModes {
			steps := m.steps(sql)
			want := probeRun(t, e.cl.DSN("ref"), nil, steps)
			for db, url := range probeURLs(ps) {
				got := probeRun(t, url, nil, steps)
				probeSame(t, fmt.Sprintf("%s %s %q", db, m.name, sql), got, want)
			}
		}
	}
	// A warning the Parse raises reaches the client once, as from one
	// server, before the error. (In a multi-statement Query PostgreSQL's
	// lexer warns before the first statement runs; the proxy, which runs
	// the statements one by one, warns at the statement's place.)
	warn := []string{"SET standard_conforming_strings = off"}
	for _, m := range []int{0, 2, 3, 4} {
		m := probeWriteModes[m]
		steps := m.steps(`INSERT INTO nosuch VALUES ('a\b')`)
		want := probeRun(t, e.cl.DSN("ref"), warn, steps)
		for db, url := range probeURLs(ps) {
			probeSame(t, db+" warning "+m.name, probeRun(t, url, warn, steps), want)
		}
	}
	if after := e.rowsEverywhere(t); after != before {
		t.Fatalf("rows changed:\n before %s\n after  %s", before, after)
	}
}

// probeSame reports the first step whose answers differ.
func probeSame(t *testing.T, what string, got, want [][]string) {
	t.Helper()
	g, w := fmt.Sprintf("%q", got), fmt.Sprintf("%q", want)
	if g != w {
		t.Errorf("%s:\n got  %s\n want %s (as direct)", what, g, w)
	}
}

// probeCopyCases are COPY statements naming a table that does not exist,
// which Parse does not analyse: the shards look the table up, or parse
// the query.
var probeCopyCases = []string{
	"COPY nosuch FROM STDIN",
	"COPY nosuch (shard_key, v) FROM STDIN",
	"COPY nosuch TO STDOUT",
	`COPY "NoSuch" TO STDOUT`,
	"COPY nosuch_schema.nosuch TO STDOUT",
	"COPY (SELECT * FROM nosuch) TO STDOUT",
	"COPY (SELECT a.id FROM accounts a JOIN nosuch n ON n.v = a.id) TO STDOUT (FORMAT csv)",
	"COPY (DELETE FROM nosuch RETURNING *) TO STDOUT",
}

// TestProbeWriteCopy compares COPY's errors with PostgreSQL's, alone, in
// a multi-statement Query and inside a transaction.
func TestProbeWriteCopy(t *testing.T) {
	checkGoroutines(t)
	e, ps := probeEnv(t)
	before := e.rowsEverywhere(t)
	for _, sql := range probeCopyCases {
		for _, steps := range [][]wireStep{
			{{send: msgs(queryMsg(sql))}},
			{{send: msgs(queryMsg("INSERT INTO accounts VALUES (100, 'é'); " + sql + "; SELECT 2"))}},
			{{send: msgs(queryMsg("BEGIN"))}, {send: msgs(queryMsg(sql))}, {send: msgs(queryMsg("SELECT 1"))}, {send: msgs(queryMsg("ROLLBACK"))}},
		} {
			want := probeRun(t, e.cl.DSN("ref"), nil, steps)
			for db, url := range probeURLs(ps) {
				probeSame(t, fmt.Sprintf("%s %q", db, steps[0].send[0].(*pgproto3.Query).String), probeRun(t, url, nil, steps), want)
			}
		}
	}
	if after := e.rowsEverywhere(t); after != before {
		t.Fatalf("rows changed:\n before %s\n after  %s", before, after)
	}
}

// TestProbeWritePgx runs every case through pgx in each of its exec
// modes and compares the errors field by field.
func TestProbeWritePgx(t *testing.T) {
	checkGoroutines(t)
	e, ps := probeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := e.rowsEverywhere(t)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeCacheStatement}
	run := func(url string, mode pgx.QueryExecMode, sql string) string {
		c := connect(t, url)
		defer c.Close(ctx)
		_, err := c.Exec(ctx, sql, mode)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) {
			return fmt.Sprintf("not a PostgreSQL error: %v", err)
		}
		return fmt.Sprintf("%+v", *pe)
	}
	for _, sql := range probeWriteCases {
		for _, mode := range modes {
			want := run(e.cl.DSN("ref"), mode, sql)
			for db, url := range probeURLs(ps) {
				if got := run(url, mode, sql); got != want {
					t.Errorf("%s %v %q:\n got  %s\n want %s", db, mode, sql, got, want)
				}
			}
		}
	}
	if after := e.rowsEverywhere(t); after != before {
		t.Fatalf("rows changed:\n before %s\n after  %s", before, after)
	}
}

// TestProbeWriteRefused: a write naming a table that exists where the
// client looks but that the proxy cannot place — found through the
// client's search_path, or created in its open transaction, neither of
// which the proxy's catalog session sees — parses on the client's own
// servers and stays refused with 0A000, in every protocol path, and
// writes nothing.
func TestProbeWriteRefused(t *testing.T) {
	checkGoroutines(t)
	e, ps := probeEnv(t)
	before := e.rowsEverywhere(t)
	refused := func(table string) string {
		return probeMsg(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "0A000",
			Message: fmt.Sprintf("cannot tell whether table %s is sharded by column shard_key: the proxy does not know its columns", table),
			Hint:    fmt.Sprintf("List %s in omni_tables or sharded_tables, or filter it by its sharding column.", table)})
	}
	aborted := probeMsg(&pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "25P02",
		Message: "current transaction is aborted, commands ignored until end of transaction block"})
	const ins = "INSERT INTO things VALUES (1)"
	path := []string{"SET search_path = other, public"}
	for _, tc := range []struct {
		name    string
		prelude []string
		steps   []wireStep
		want    [][]string
	}{
		{"simple", path, []wireStep{{send: msgs(queryMsg(ins))}}, [][]string{{refused("things"), "Z(I)"}}},
		{"extended", path, []wireStep{{send: msgs(parseMsg("s", ins), bindMsg("s"), execMsg(0), syncMsg)}},
			[][]string{{"1", "2", refused("things"), "Z(I)"}}},
		{"describe only", path, []wireStep{{send: msgs(parseMsg("", ins), describeStmt(""), syncMsg)}},
			[][]string{{"1", "t[]", "n", "Z(I)"}}},
		{"pipeline", path, []wireStep{{send: msgs(
			parseMsg("", "INSERT INTO accounts VALUES (100, 'x')"), bindMsg(""), execMsg(0),
			parseMsg("", ins), bindMsg(""), execMsg(0),
			parseMsg("", "SELECT 1"), bindMsg(""), execMsg(0), syncMsg)}},
			[][]string{{"1", "2", "C(INSERT 0 1)", "1", "2", refused("things"), "Z(I)"}}},
		{"transaction", path, []wireStep{
			{send: msgs(queryMsg("BEGIN"))},
			{send: msgs(queryMsg(ins))},
			{send: msgs(queryMsg("SELECT 1"))},
			{send: msgs(queryMsg("ROLLBACK"))},
		}, [][]string{{"C(BEGIN)", "Z(T)"}, {refused("things"), "Z(E)"}, {aborted, "Z(E)"}, {"C(ROLLBACK)", "Z(I)"}}},
		{"created in the transaction", nil, []wireStep{
			{send: msgs(queryMsg("BEGIN"))},
			{send: msgs(queryMsg("CREATE TABLE created_in_tx (v int)"))},
			{send: msgs(parseMsg("", "INSERT INTO created_in_tx VALUES (1)"), bindMsg(""), execMsg(0), syncMsg)},
			{send: msgs(queryMsg("SELECT 1"))},
			{send: msgs(queryMsg("ROLLBACK"))},
		}, [][]string{{"C(BEGIN)", "Z(T)"}, {"C(CREATE TABLE)", "Z(T)"}, {"1", "2", refused("created_in_tx"), "Z(E)"},
			{aborted, "Z(E)"}, {"C(ROLLBACK)", "Z(I)"}}},
	} {
		for db, url := range probeURLs(ps) {
			got := probeRun(t, url, tc.prelude, tc.steps)
			probeSame(t, db+" "+tc.name, got, tc.want)
		}
	}
	if after := e.rowsEverywhere(t); after != before {
		t.Fatalf("rows changed:\n before %s\n after  %s", before, after)
	}
}
