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

// The differential harness runs scripts, each a list of statements on one
// connection, against plain PostgreSQL and through the proxy, and requires
// the same answer to every statement: command tag, result columns (name
// and type OID), rows as text, error (severity, SQLSTATE, message, detail,
// hint) and the transaction status after it. Each script runs on a fresh
// connection in every pgx exec mode and once more the way JDBC runs a
// statement with a fetch size: an unnamed statement, Describe of the
// portal, and Execute with a row limit of 1 repeated until the portal is
// done, all before Sync.

// diffScript is a list of single statements.
type diffScript struct {
	name  string
	stmts []string
	// refusedOnTwo documents the statements the two-shard database refuses
	// by design, each with the exact error it answers in every runner. On
	// that database the script's other statements, which build on what
	// the refused ones would create, are not compared.
	refusedOnTwo map[int]string
}

// stmtResult is what a client learns from one statement.
type stmtResult struct {
	Tag    string
	Fields []string
	Rows   []string
	Err    string
	Tx     byte
}

// key is the whole result, for comparisons.
func (r stmtResult) key() string {
	return fmt.Sprintf("tag %q fields %v rows %q tx %c error %s", r.Tag, r.Fields, r.Rows, r.Tx, r.Err)
}

// String is the result for failure messages, long errors shortened.
func (r stmtResult) String() string {
	s := fmt.Sprintf("tag %q fields %v rows %q tx %c", r.Tag, r.Fields, r.Rows, r.Tx)
	if r.Err != "" {
		s += " error " + abbrev(r.Err, 300)
	}
	return s
}

// errKey is the part of an error the harness compares.
func errKey(err error) string {
	if pe := pgErr(err); pe != nil {
		return fmt.Sprintf("%s %s %q detail %q hint %q", pe.Severity, pe.Code, pe.Message, pe.Detail, pe.Hint)
	}
	return "non-PostgreSQL error: " + err.Error()
}

// diffRunner runs a script on a new connection to url.
type diffRunner struct {
	name string
	run  func(t testing.TB, url string, stmts []string, between func()) []stmtResult
}

// diffRunners are every pgx exec mode and the JDBC-like path.
func diffRunners() []diffRunner {
	var out []diffRunner
	for _, mode := range execModes {
		out = append(out, diffRunner{mode.String(), func(t testing.TB, url string, stmts []string, between func()) []stmtResult {
			return runPgxScript(t, url, mode, stmts, between)
		}})
	}
	return append(out, diffRunner{"row-limited Execute", runFetchScript})
}

func runPgxScript(t testing.TB, url string, mode pgx.QueryExecMode, stmts []string, between func()) []stmtResult {
	t.Helper()
	conn, err := tryConnect(url, mode, nil)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	defer conn.Close(context.Background())
	var out []stmtResult
	for _, sql := range stmts {
		out = append(out, pgxStmt(conn, mode, sql))
		if conn.IsClosed() {
			break
		}
		if between != nil {
			between()
		}
	}
	return out
}

func pgxStmt(conn *pgx.Conn, mode pgx.QueryExecMode, sql string) stmtResult {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if mode == pgx.QueryExecModeSimpleProtocol {
		return simpleStmt(ctx, conn, sql)
	}
	var r stmtResult
	rows, err := conn.Query(ctx, sql, mode)
	if err == nil {
		for _, f := range rows.FieldDescriptions() {
			r.Fields = append(r.Fields, fmt.Sprintf("%s:%d", f.Name, f.DataTypeOID))
		}
		for rows.Next() {
			vals, verr := rows.Values()
			if verr != nil {
				err = verr
				break
			}
			var cells []string
			for _, v := range vals {
				if v == nil {
					cells = append(cells, "NULL")
				} else {
					cells = append(cells, fmt.Sprint(v))
				}
			}
			r.Rows = append(r.Rows, strings.Join(cells, "|"))
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		r.Tag = rows.CommandTag().String()
	}
	if err != nil {
		r.Err = errKey(err)
		r.Tag = ""
	}
	r.Tx = conn.PgConn().TxStatus()
	return r
}

// simpleStmt sends sql in a Query message as it is (pgx's simple protocol
// mode would take $1 in PREPARE … AS … $1 for a placeholder of its own) and
// reads the rows as text.
func simpleStmt(ctx context.Context, conn *pgx.Conn, sql string) stmtResult {
	var r stmtResult
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		r.Err = errKey(err)
	} else if len(results) > 0 {
		res := results[len(results)-1]
		for _, f := range res.FieldDescriptions {
			r.Fields = append(r.Fields, fmt.Sprintf("%s:%d", f.Name, f.DataTypeOID))
		}
		for _, row := range res.Rows {
			var cells []string
			for _, v := range row {
				if v == nil {
					cells = append(cells, "NULL")
				} else {
					cells = append(cells, string(v))
				}
			}
			r.Rows = append(r.Rows, strings.Join(cells, "|"))
		}
		r.Tag = res.CommandTag.String()
	}
	r.Tx = conn.PgConn().TxStatus()
	return r
}

// runFetchScript runs each statement as JDBC does with a fetch size of 1:
// Parse, Bind, Describe portal, Execute(1), Flush; Execute(1) again while
// the portal is suspended; then Sync.
func runFetchScript(t testing.TB, url string, stmts []string, between func()) []stmtResult {
	t.Helper()
	w := dialWire(t, url)
	defer w.close()
	var out []stmtResult
	for _, sql := range stmts {
		r, ok := fetchStmt(w, sql)
		out = append(out, r)
		if !ok {
			break
		}
		if between != nil {
			between()
		}
	}
	return out
}

// maxFetches bounds the Execute messages of one statement.
const maxFetches = 100

// fetchStmt runs one statement on w; ok is false once the connection is
// unusable.
func fetchStmt(w *wireConn, sql string) (r stmtResult, ok bool) {
	send := func(msgs ...pgproto3.FrontendMessage) bool {
		for _, m := range msgs {
			w.fe.Send(m)
		}
		if err := w.fe.Flush(); err != nil {
			r.Err = "write error: " + err.Error()
			return false
		}
		return true
	}
	if !send(parseMsg("", sql), bindMsg(""), &pgproto3.Describe{ObjectType: 'P'}, execMsg(1), flushMsg) {
		return r, false
	}
	w.hc.Conn.SetReadDeadline(time.Now().Add(stepTimeout))
	defer w.hc.Conn.SetReadDeadline(time.Time{})
	synced := false
	suspended := 0
	for {
		m, err := w.fe.Receive()
		if err != nil {
			r.Err += "read error: " + readErr(err)
			return r, false
		}
		switch m := m.(type) {
		case *pgproto3.RowDescription:
			for _, f := range m.Fields {
				r.Fields = append(r.Fields, fmt.Sprintf("%s:%d", f.Name, f.DataTypeOID))
			}
		case *pgproto3.DataRow:
			var cells []string
			for _, v := range m.Values {
				if v == nil {
					cells = append(cells, "NULL")
				} else {
					cells = append(cells, string(v))
				}
			}
			r.Rows = append(r.Rows, strings.Join(cells, "|"))
		case *pgproto3.PortalSuspended:
			// No script statement returns this many rows.
			if suspended++; suspended > maxFetches {
				r.Err += fmt.Sprintf("more than %d PortalSuspended", maxFetches)
				return r, false
			}
			if !send(execMsg(1), flushMsg) {
				return r, false
			}
		case *pgproto3.CommandComplete:
			r.Tag = string(m.CommandTag)
		case *pgproto3.ErrorResponse:
			r.Err = fmt.Sprintf("%s %s %q detail %q hint %q", m.Severity, m.Code, m.Message, m.Detail, m.Hint)
			if m.Severity == "FATAL" || m.Severity == "PANIC" {
				return r, false
			}
		case *pgproto3.ReadyForQuery:
			r.Tx = m.TxStatus
			return r, true
		}
		switch m.(type) {
		case *pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.ErrorResponse:
			if !synced {
				synced = true
				if !send(syncMsg) {
					return r, false
				}
			}
		}
	}
}

// diffEnv is a cluster with a reference database "ref" and, for the proxy,
// a one-shard database "one" and a database "two" on shards s0 and s1,
// all holding table accounts with the same rows (each row of "two" only on
// its key's shard), function r and role other_role.
type diffEnv struct {
	cl  *pgtest.Cluster
	dir string
}

// diffSchema is created in every database of a diffEnv.
const diffSchema = `CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL);
GRANT SELECT ON accounts TO other_role;
` + recursiveFunc

func newDiffEnv(t *testing.T) *diffEnv {
	t.Helper()
	cl := cluster(t, "ref", "one", "s0", "s1")
	ctx := context.Background()
	if err := cl.Exec(ctx, "postgres", "CREATE ROLE "+otherRole); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{"ref", "one", "s0", "s1"} {
		if err := cl.Exec(ctx, db, diffSchema); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 8; id++ {
		ins := fmt.Sprintf("INSERT INTO accounts VALUES (%d, 'a%d')", id, id)
		for _, db := range []string{"ref", "one", fmt.Sprintf("s%d", hashShard(id, 2))} {
			if err := cl.Exec(ctx, db, ins); err != nil {
				t.Fatal(err)
			}
		}
	}
	return &diffEnv{cl: cl, dir: t.TempDir()}
}

// resetData undoes what a script committed by mistake (a BEGIN the proxy
// failed leaves the UPDATE after it committed), so that one failure does
// not spread to the scripts after it.
func (e *diffEnv) resetData(t testing.TB) {
	t.Helper()
	for _, db := range []string{"ref", "one", "s0", "s1"} {
		if err := e.cl.Exec(context.Background(), db, "UPDATE accounts SET email = 'a' || id WHERE email <> 'a' || id"); err != nil {
			t.Fatal(err)
		}
	}
}

// proxyConfig serves databases one and two in pool mode mode. On two,
// accounts is sharded by id and every other table with a bigint column
// shard_key by that column, so that scripts can create sharded tables of
// their own.
func (e *diffEnv) proxyConfig(mode string, size int) string {
	c := e.cl
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: %d, checkout_timeout: 2s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: one
    shards: [%s]
  - name: two
    shards: [%s, %s]
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { column: shard_key, type: bigint }
`, mode, size, e.dir, appPassword, c.User, c.Password, shardYAML(c, "one"), shardYAML(c, "s0"), shardYAML(c, "s1"))
}

// diffAll runs every script in every runner on the reference database once
// and, for each pool mode and proxy database, through the proxy, and
// reports each statement whose answers differ. In transaction mode another
// client with settings of its own runs a query between statements, on a
// pool of two so that it shares the script's server.
func diffAll(t *testing.T, e *diffEnv, scripts []diffScript) {
	runners := diffRunners()
	want := map[string][]stmtResult{}
	for _, s := range scripts {
		for _, r := range runners {
			e.resetData(t)
			want[s.name+"/"+r.name] = r.run(t, e.cl.DSN("ref"), s.stmts, nil)
		}
	}
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, e.proxyConfig(mode, 2))
			for _, db := range []string{"one", "two"} {
				url := p.AppURL(db)
				var between func()
				if mode == "transaction" {
					noise := connectConfig(t, url, simple, map[string]string{"application_name": "noise"})
					execIn(t, noise, simple, "SET work_mem = '1MB'")
					execIn(t, noise, simple, "SET search_path = pg_catalog")
					execIn(t, noise, simple, "SET DateStyle = 'SQL, DMY'")
					between = func() { value(t, noise, simple, "SELECT 1") }
				}
				// A runner that waited for an answer in vain is not run
				// again on this database, to bound the test's time.
				hung := map[string]bool{}
				for _, s := range scripts {
					t.Run(db+"/"+s.name, func(t *testing.T) {
						for _, r := range runners {
							if hung[r.name] {
								t.Errorf("[%s] not run: it got no answer in an earlier script", r.name)
								continue
							}
							e.resetData(t)
							got := r.run(t, url, s.stmts, between)
							if len(got) > 0 && strings.Contains(got[len(got)-1].Err, "nothing within") {
								hung[r.name] = true
							}
							if db == "two" && s.refusedOnTwo != nil {
								diffRefusals(t, r.name, s, got)
								continue
							}
							diffResults(t, r.name, s.stmts, got, want[s.name+"/"+r.name])
						}
					})
				}
			}
		})
	}
}

// diffResults reports the first statement whose answers differ.
func diffResults(t testing.TB, runner string, stmts []string, got, want []stmtResult) {
	t.Helper()
	show := func(rs []stmtResult, i int) (key, text string) {
		if i < len(rs) {
			return rs[i].key(), rs[i].String()
		}
		return "-", "(not run: the connection ended)"
	}
	for i := range max(len(got), len(want)) {
		gk, g := show(got, i)
		wk, w := show(want, i)
		if gk != wk {
			t.Errorf("[%s] statement %d %q:\n got  %s\n want %s (as direct)", runner, i, abbrev(stmts[i], 80), g, w)
			return
		}
	}
}

// diffRefusals checks that each statement of s that the two-shard database
// refuses by design answers exactly its documented error.
func diffRefusals(t testing.TB, runner string, s diffScript, got []stmtResult) {
	t.Helper()
	for i, want := range s.refusedOnTwo {
		switch {
		case i >= len(got):
			t.Errorf("[%s] statement %d %q: not run (the connection ended), want the documented refusal %s", runner, i, abbrev(s.stmts[i], 80), want)
		case got[i].Err != want:
			t.Errorf("[%s] statement %d %q:\n got  %s\n want the documented refusal %s", runner, i, abbrev(s.stmts[i], 80), got[i], want)
		}
	}
}
