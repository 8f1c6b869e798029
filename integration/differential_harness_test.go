package integration

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// The differential harness runs scripts, each a list of statements on one
// connection, against plain PostgreSQL and through the proxy, and requires
// the same answer to every statement from every client library: each
// runner's answers through the proxy are compared with the same runner's
// answers from the reference database. A runner compares what its library
// shows of a statement: command tag, result fields, rows, error (severity,
// SQLSTATE, message, detail, hint) and the transaction status after it.
//
// The runners: every pgx exec mode and a row-limited Execute path on
// pgproto3 (differential_driver_pgx_test.go), and each statement in a
// pipeline with one Sync and in a multi-statement Query
// (differential_driver_batch_test.go), which see RowDescriptions in full
// (name, type OID, typmod, format) and rows byte for byte; lib/pq
// (differential_driver_pq_test.go); psql (differential_driver_psql_test.go);
// and psycopg2, node-postgres and pgjdbc, each a program under
// testdata/drivers driven over a pipe (differential_driver_test.go). Each
// script runs on a fresh connection in every runner, on a one-shard
// database "one", a two-shard database "two" and a three-shard database
// "three", in session and in transaction pool mode.

// diffScript is a list of single statements.
type diffScript struct {
	name  string
	stmts []string
	// refusedOnTwo documents the statements the sharded databases ("two"
	// and "three") refuse by design, each with the exact error it answers
	// in every runner. On those databases the script's other statements,
	// which build on what the refused ones would create, are not compared.
	refusedOnTwo map[int]string
	// knownDiffs are answers through the proxy that differ from
	// PostgreSQL's today. The harness requires each to still differ, so
	// that fixing one fails the test until its entry goes.
	knownDiffs []knownDiff
	// skipRunners names runners (by name prefix) that cannot run the
	// script for a reason of their own library, said where it is set.
	skipRunners []string
}

// skips reports whether runner does not run s.
func (s diffScript) skips(runner string) bool {
	for _, p := range s.skipRunners {
		if strings.HasPrefix(runner, p) {
			return true
		}
	}
	return false
}

// knownDiff is a statement whose answer through the proxy differs from
// PostgreSQL's (issue 11), on the proxy databases dbs (all when empty) in
// the runners runners (all when empty).
type knownDiff struct {
	stmt    int
	dbs     []string
	runners []string
	// why says what the proxy answers and what PostgreSQL does.
	why string
}

// knownDiffAt returns the known difference of statement i in runner on db.
func (s diffScript) knownDiffAt(db, runner string, i int) (knownDiff, bool) {
	for _, k := range s.knownDiffs {
		if k.stmt == i && (len(k.dbs) == 0 || slices.Contains(k.dbs, db)) &&
			(len(k.runners) == 0 || slices.Contains(k.runners, runner)) {
			return k, true
		}
	}
	return knownDiff{}, false
}

// stmtResult is what a client learns from one statement. Each runner fills
// in what its library shows (see the runners' comments); a field it cannot
// see stays empty on both sides of a comparison.
type stmtResult struct {
	Tag    string
	Fields []string
	Rows   []string
	Err    string
	Tx     string
}

// key is the whole result, for comparisons.
func (r stmtResult) key() string {
	return fmt.Sprintf("tag %q fields %q rows %q tx %q error %s", r.Tag, r.Fields, r.Rows, r.Tx, r.Err)
}

// String is the result for failure messages, long errors shortened.
func (r stmtResult) String() string {
	s := fmt.Sprintf("tag %q fields %q rows %q tx %q", r.Tag, r.Fields, abbrev(fmt.Sprintf("%q", r.Rows), 600), r.Tx)
	if r.Err != "" {
		s += " error " + abbrev(r.Err, 300)
	}
	return s
}

// errKey is the part of an error the harness compares.
func errKey(err error) string {
	if pe := pgErr(err); pe != nil {
		return diffErr(pe.Severity, pe.Code, pe.Message, pe.Detail, pe.Hint)
	}
	return "non-PostgreSQL error: " + err.Error()
}

// diffErr is an ErrorResponse as every runner reports it.
func diffErr(severity, code, message, detail, hint string) string {
	return fmt.Sprintf("%s %s %q detail %q hint %q", severity, code, message, detail, hint)
}

// diffRunner runs a script on a new connection to url (a postgres:// URL).
type diffRunner struct {
	name string
	run  func(t testing.TB, url string, stmts []string, between func()) []stmtResult
}

// diffRunners are every runner whose client is installed. A missing
// client fails the test under CI=true; elsewhere its runner is left out,
// with a skipped subtest that says how to install it.
func diffRunners(t *testing.T) []diffRunner {
	t.Helper()
	out := append(diffPgxRunners(), diffBatchRunners()...)
	out = append(out, diffPqRunners()...)
	if r, ok := diffPsqlRunner(t); ok {
		out = append(out, r)
	}
	return append(out, diffWorkerRunners(t)...)
}

// diffDatabases are the proxy's databases of a diffEnv and the shard
// databases of each.
var diffDatabases = []struct {
	name   string
	shards []string
}{
	{"one", []string{"one"}},
	{"two", []string{"s0", "s1"}},
	{"three", []string{"t0", "t1", "t2"}},
}

// diffEnv is a cluster with a reference database "ref" and, for the proxy,
// a one-shard database "one", a database "two" on shards s0 and s1 and a
// database "three" on shards t0, t1 and t2, all holding table accounts with
// the same rows (each row of a sharded database only on its key's shard),
// function r and role other_role.
type diffEnv struct {
	cl  *pgtest.Cluster
	dir string
	// reset holds a connection to every database, for resetData.
	reset map[string]*pgx.Conn
}

// diffSchema is created in every database of a diffEnv.
const diffSchema = `CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL);
GRANT SELECT ON accounts TO other_role;
` + recursiveFunc

func newDiffEnv(t *testing.T) *diffEnv {
	t.Helper()
	dbs := []string{"ref"}
	for _, d := range diffDatabases {
		dbs = append(dbs, d.shards...)
	}
	cl := cluster(t, dbs...)
	ctx := context.Background()
	if err := cl.Exec(ctx, "postgres", "CREATE ROLE "+otherRole); err != nil {
		t.Fatal(err)
	}
	e := &diffEnv{cl: cl, dir: t.TempDir(), reset: map[string]*pgx.Conn{}}
	for _, db := range dbs {
		e.reset[db] = connect(t, cl.DSN(db))
		if _, err := e.reset[db].Exec(ctx, diffSchema); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
	for id := int64(1); id <= 8; id++ {
		ins := fmt.Sprintf("INSERT INTO accounts VALUES (%d, 'a%d')", id, id)
		into := []string{"ref"}
		for _, d := range diffDatabases {
			into = append(into, d.shards[hashShard(id, len(d.shards))])
		}
		for _, db := range into {
			if _, err := e.reset[db].Exec(ctx, ins); err != nil {
				t.Fatalf("%s: %v", db, err)
			}
		}
	}
	return e
}

// resetData undoes what a script committed by mistake (a BEGIN the proxy
// failed leaves the UPDATE after it committed), so that one failure does
// not spread to the scripts after it: in the databases behind proxy
// databases dbs ("ref" for the reference), or in all of them.
func (e *diffEnv) resetData(t testing.TB, dbs ...string) {
	t.Helper()
	var targets []string
	for _, d := range diffDatabases {
		if len(dbs) == 0 || slices.Contains(dbs, d.name) {
			targets = append(targets, d.shards...)
		}
	}
	if len(dbs) == 0 || slices.Contains(dbs, "ref") {
		targets = append(targets, "ref")
	}
	for _, db := range targets {
		if _, err := e.reset[db].Exec(context.Background(), "UPDATE accounts SET email = 'a' || id WHERE email <> 'a' || id"); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
}

// proxyConfig serves databases one, two and three in pool mode mode. On
// two and three, accounts is sharded by id and every other table with a
// bigint column shard_key by that column, so that scripts can create
// sharded tables of their own.
func (e *diffEnv) proxyConfig(mode string, size int) string {
	c := e.cl
	var dbs strings.Builder
	for _, d := range diffDatabases {
		shards := make([]string, len(d.shards))
		for i, s := range d.shards {
			shards[i] = shardYAML(c, s)
		}
		fmt.Fprintf(&dbs, "  - name: %s\n    shards: [%s]\n", d.name, strings.Join(shards, ", "))
		if len(d.shards) > 1 {
			dbs.WriteString(`    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { column: shard_key, type: bigint }
`)
		}
	}
	return fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: %d, checkout_timeout: 2s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
%s`, mode, size, e.dir, appPassword, c.User, c.Password, dbs.String())
}

// diffAll runs every script in every runner on the reference database once
// and, for each pool mode and proxy database, through the proxy, and
// reports each statement whose answers differ. In transaction mode another
// client with settings of its own runs a query between statements, on a
// pool of two so that it shares the script's server. It returns how often
// each class of known differences (diffKnownClasses) was seen.
func diffAll(t *testing.T, e *diffEnv, scripts []diffScript) map[string]int {
	runners := diffRunners(t)
	seen := map[string]int{}
	want := map[string][]stmtResult{}
	for _, s := range scripts {
		for _, r := range runners {
			if s.skips(r.name) {
				continue
			}
			e.resetData(t, "ref")
			want[s.name+"/"+r.name] = r.run(t, e.cl.DSN("ref"), s.stmts, nil)
		}
	}
	for _, mode := range []string{"session", "transaction"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, e.proxyConfig(mode, 2))
			for _, d := range diffDatabases {
				if diffInMatrix(mode, d.name) {
					diffDatabase(t, e, p.AppURL(d.name), d.name, mode, runners, scripts, want, seen)
				}
			}
		})
	}
	return seen
}

// diffInMatrix reports whether the scripts run through the proxy in pool
// mode on database db. The whole matrix (both modes × one, two and three
// shards) runs with SHARDGATE_DIFF_MATRIX=full (make diff-full); make test
// runs a slice that still has every runner, both modes, the one-shard
// pass-through and both shard counts — session mode on three shards,
// transaction mode on one and two — to keep the integration package
// within CI's time.
func diffInMatrix(mode, db string) bool {
	if os.Getenv("SHARDGATE_DIFF_MATRIX") == "full" {
		return true
	}
	if mode == "session" {
		return db == "three"
	}
	return db == "one" || db == "two"
}

// diffDatabase runs every script in every runner on proxy database db.
func diffDatabase(t *testing.T, e *diffEnv, url, db, mode string, runners []diffRunner, scripts []diffScript, want map[string][]stmtResult, seen map[string]int) {
	var between func()
	if mode == "transaction" {
		noise := connectConfig(t, url, simple, map[string]string{"application_name": "noise"})
		execIn(t, noise, simple, "SET work_mem = '1MB'")
		execIn(t, noise, simple, "SET search_path = pg_catalog")
		execIn(t, noise, simple, "SET DateStyle = 'SQL, DMY'")
		between = func() { value(t, noise, simple, "SELECT 1") }
	}
	// A runner that waited for an answer in vain is not run again on this
	// database, to bound the test's time.
	hung := map[string]bool{}
	for _, s := range scripts {
		t.Run(db+"/"+s.name, func(t *testing.T) {
			for _, r := range runners {
				if s.skips(r.name) {
					continue
				}
				if hung[r.name] {
					t.Errorf("[%s] not run: it got no answer in an earlier script", r.name)
					continue
				}
				e.resetData(t, db)
				got := r.run(t, url, s.stmts, between)
				if len(got) > 0 && strings.Contains(got[len(got)-1].Err, "nothing within") {
					hung[r.name] = true
				}
				if db != "one" && s.refusedOnTwo != nil {
					diffRefusals(t, r.name, s, got)
					continue
				}
				diffResults(t, db, r.name, s, got, want[s.name+"/"+r.name], seen)
			}
		})
	}
}

// diffResults reports the first statement whose answers differ, other
// than the script's known differences and those of a known class, and each
// known difference of the script that no longer differs.
func diffResults(t testing.TB, db, runner string, s diffScript, got, want []stmtResult, seen map[string]int) {
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
		k, known := s.knownDiffAt(db, runner, i)
		switch {
		case known && gk == wk:
			t.Errorf("[%s] statement %d %q: the known difference (issue 11: %s) is gone: both answer %s; remove it from the script's knownDiffs",
				runner, i, abbrev(s.stmts[i], 80), k.why, g)
		case known:
			t.Logf("[%s] statement %d: known difference (issue 11): %s", runner, i, k.why)
		case gk == wk:
		case i < len(got) && i < len(want) && diffKnownClassOf(db, runner, got[i], want[i]) != nil:
			c := diffKnownClassOf(db, runner, got[i], want[i])
			seen[c.name]++
			t.Logf("[%s] statement %d: known difference (issue 11, %s): %s", runner, i, c.name, c.why)
			if c.stop {
				return
			}
		default:
			t.Errorf("[%s] statement %d %q:\n got  %s\n want %s (as direct)", runner, i, abbrev(s.stmts[i], 80), g, w)
			return
		}
	}
}

// diffRefusals checks that each statement of s that the sharded databases
// refuse by design answers exactly its documented error.
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
