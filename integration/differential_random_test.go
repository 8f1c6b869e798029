package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/integration/internal/querygen"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// The random differential test runs queries of querygen over its schema
// and rows on one PostgreSQL database and through the proxy on two and
// three shards, and requires the same answer: field names, type OIDs,
// sizes, type modifiers and formats, the rows' bytes, the command tag and
// the error (SQLSTATE, message, detail). Each query runs with the simple
// protocol (text), the extended one with binary results, and as JDBC
// with a fetch size runs it (Execute with a row limit), and once more
// with some of its constants as Bind parameters when the generator made
// some; every connection has the session settings the seed draws,
// and one query in eight runs in a transaction block.
// See querygen's package comment for the environment variables.

// rndModes are the protocols each query runs in: text rows, and binary
// rows of a prepared statement.
var rndModes = []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement}

// rndMaxFailures bounds the failures one run reports.
const rndMaxFailures = 25

// rndEnv is the reference database and the proxy's databases "two" and
// "three", each sharded by shard_key, holding querygen's rows.
type rndEnv struct {
	cl    *pgtest.Cluster
	ref   string            // URL of the reference database
	proxy map[string]string // URL of each proxy database
	// userTypes names the types the schema created (the enum), by OID in
	// any database of the cluster: OIDs are unique in a cluster, and the
	// same type has another OID in each database.
	userTypes map[uint32]string
}

// rndShards are the shard databases of each proxy database.
var rndShards = map[string][]string{
	"two":   {"rnd2_0", "rnd2_1"},
	"three": {"rnd3_0", "rnd3_1", "rnd3_2"},
}

// newRndEnv starts the cluster and a proxy in pool mode poolMode, and
// loads the rows of seed.
func newRndEnv(t *testing.T, seed uint64, poolMode string) *rndEnv {
	t.Helper()
	pgtest.RequireLocale(t, "en_US.UTF-8")
	cl := cluster(t)
	ctx := context.Background()
	dbs := []string{"rnd_ref"}
	for _, db := range []string{"two", "three"} {
		dbs = append(dbs, rndShards[db]...)
	}
	for _, db := range dbs {
		if err := cl.Exec(ctx, "postgres", "CREATE DATABASE "+db+" TEMPLATE template0 ENCODING 'UTF8' LOCALE 'en_US.UTF-8'"); err != nil {
			t.Fatal(err)
		}
		if err := cl.Exec(ctx, db, querygen.Schema()); err != nil {
			t.Fatal(err)
		}
	}
	var yaml strings.Builder
	fmt.Fprintf(&yaml, `listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: %s, size: 4, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
`, poolMode, t.TempDir(), appPassword, cl.User, cl.Password)
	for _, db := range []string{"two", "three"} {
		var shards []string
		for _, s := range rndShards[db] {
			shards = append(shards, shardYAML(cl, s))
		}
		fmt.Fprintf(&yaml, `  - name: %s
    shards: [%s]
    sharded_tables:
      - { table: items, column: shard_key, type: bigint }
      - { table: events, column: shard_key, type: bigint }
    omni_tables: [lookup]
`, db, strings.Join(shards, ", "))
	}
	p := startProxy(t, yaml.String())
	e := &rndEnv{cl: cl, ref: cl.DSN("rnd_ref"), proxy: map[string]string{"two": p.AppURL("two"), "three": p.AppURL("three")}}
	e.load(t, seed)
	e.userTypes = map[uint32]string{}
	type userType struct {
		OID  uint32
		Name string
	}
	for _, db := range dbs {
		conn := connect(t, cl.DSN(db))
		rows, _ := conn.Query(ctx, "SELECT oid, format_type(oid, NULL) FROM pg_type WHERE oid >= 16384")
		types, err := pgx.CollectRows(rows, pgx.RowToStructByPos[userType])
		if err != nil {
			t.Fatal(err)
		}
		for _, ut := range types {
			e.userTypes[ut.OID] = ut.Name
		}
		conn.Close(ctx)
	}
	return e
}

// rndOID matches the type OID of a field in an answer.
var rndOID = regexp.MustCompile(`oid=([0-9]+)`)

// ask is the answer to sql on conn in mode, with the OIDs of the
// schema's own types replaced by their names.
func (e *rndEnv) ask(conn *pgx.Conn, mode pgx.QueryExecMode, sql string) answer {
	a := ask(conn, mode, sql)
	e.nameTypes(&a)
	return a
}

// nameTypes replaces the OIDs of the schema's own types in a by their
// names.
func (e *rndEnv) nameTypes(a *answer) {
	for i, f := range a.Fields {
		a.Fields[i] = rndOID.ReplaceAllStringFunc(f, func(m string) string {
			oid, err := strconv.ParseUint(m[len("oid="):], 10, 32)
			if name, ok := e.userTypes[uint32(oid)]; ok && err == nil {
				return "type=" + name
			}
			return m
		})
	}
}

// load inserts querygen's rows directly into the reference database and
// through the proxy into the sharded ones, then checks that each shard
// holds exactly the rows of its keys.
func (e *rndEnv) load(t *testing.T, seed uint64) {
	t.Helper()
	ctx := context.Background()
	stmts := querygen.Data(seed)
	if err := e.cl.Exec(ctx, "rnd_ref", strings.Join(stmts, ";\n")); err != nil {
		t.Fatal(err)
	}
	for db, url := range e.proxy {
		conn := connectConfig(t, url, pgx.QueryExecModeSimpleProtocol, nil)
		for _, s := range stmts {
			if _, err := conn.Exec(ctx, s); err != nil {
				t.Fatalf("%s: %v\n%s", db, err, abbrev(s, 200))
			}
		}
		conn.Close(ctx)
	}
	ref := connect(t, e.ref)
	for _, table := range []string{"items", "events", "lookup"} {
		want := value(t, ref, simple, "SELECT count(*) FROM "+table)
		for db := range e.proxy {
			e.checkPlacement(t, db, table, want)
		}
	}
}

// checkPlacement requires that the shards of db hold want rows of table
// in all (each row of lookup on every shard), each sharded row on the
// shard of its key (NULL on shard 0).
func (e *rndEnv) checkPlacement(t *testing.T, db, table, want string) {
	t.Helper()
	shards := rndShards[db]
	total := 0
	for i, s := range shards {
		conn := connect(t, e.cl.DSN(s))
		if table == "lookup" {
			if got := value(t, conn, simple, "SELECT count(*) FROM lookup"); got != want {
				t.Fatalf("%s: omni table lookup holds %s rows, want %s", s, got, want)
			}
			continue
		}
		rows, _ := conn.Query(context.Background(), "SELECT shard_key FROM "+table)
		keys, err := pgx.CollectRows(rows, pgx.RowTo[*int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if k != nil && hashShard(*k, len(shards)) != i || k == nil && i != 0 {
				t.Fatalf("%s.%s holds a row of key %v, which belongs elsewhere", s, table, k)
			}
		}
		total += len(keys)
	}
	if table != "lookup" && strconv.Itoa(total) != want {
		t.Fatalf("%s: the shards hold %d rows of %s, want %s", db, total, table, want)
	}
}

// rndSettings are the test's knobs, from the environment.
type rndSettings struct {
	seed    uint64
	queries int
	only    int // -1: all
	gaps    []string
	// poolMode is the proxy's pool mode, drawn from the seed.
	poolMode string
	// session holds the startup parameters of every connection, drawn
	// from the seed: settings that change how values are written as
	// text, which the proxy must read in any of their values.
	session map[string]string
}

// rndSession draws the session settings of seed.
func rndSession(seed uint64) map[string]string {
	rng := rand.New(rand.NewPCG(seed, 0x5e551))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	return map[string]string{
		"TimeZone":           pick("UTC", "America/St_Johns", "Asia/Kathmandu", "Pacific/Chatham"),
		"IntervalStyle":      pick("postgres", "postgres_verbose", "iso_8601", "sql_standard"),
		"extra_float_digits": pick("1", "0", "3"),
	}
}

func rndSettingsFromEnv(t *testing.T) rndSettings {
	t.Helper()
	s := rndSettings{seed: uint64(time.Now().UnixNano()), queries: 150, only: -1}
	num := func(name string, set func(uint64)) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			set(n)
		}
	}
	num("RANDOM_DIFF_SEED", func(n uint64) { s.seed = n })
	num("RANDOM_DIFF_QUERIES", func(n uint64) { s.queries = int(n) })
	num("RANDOM_DIFF_ONLY", func(n uint64) { s.only = int(n) })
	if v := os.Getenv("RANDOM_DIFF_GAPS"); v != "" {
		s.gaps = strings.Split(v, ",")
		known := querygen.KnownGaps()
		for _, g := range s.gaps {
			if _, ok := known[g]; !ok {
				t.Fatalf("RANDOM_DIFF_GAPS: %q is not a known gap (%v)", g, known)
			}
		}
	}
	s.session = rndSession(s.seed)
	s.poolMode = []string{"transaction", "session"}[s.seed%2]
	return s
}

// TestRndDifferential runs querygen's queries on the reference database
// and through the proxy on two and three shards, in the simple and the
// extended protocol, and requires the same answers. A query the proxy
// refuses with 0A000 passes only when the generator marked it as one the
// proxy may refuse by design.
func TestRndDifferential(t *testing.T) {
	checkGoroutines(t)
	s := rndSettingsFromEnv(t)
	t.Logf("seed %d, %d queries, %s pooling, session %v (RANDOM_DIFF_SEED=%d replays them)", s.seed, s.queries, s.poolMode, s.session, s.seed)
	e := newRndEnv(t, s.seed, s.poolMode)
	r := &rndRun{t: t, s: s, conns: map[string]*pgx.Conn{}, wires: map[string]*pgconn.HijackedConn{}, refused: map[string]int{}}
	defer r.close()
	g := querygen.Generator{Seed: s.seed, Gaps: s.gaps}
	start := time.Now()
	indexes := make([]int, s.queries)
	for i := range indexes {
		indexes[i] = i
	}
	if s.only >= 0 {
		indexes = []int{s.only}
	}
	for _, i := range indexes {
		if r.failures >= rndMaxFailures {
			t.Errorf("stopped after %d failures", r.failures)
			break
		}
		r.check(e, i, g.Query(i))
	}
	t.Logf("seed %d: %d queries in %s: %d ordered totally, %d in a transaction block, %d row-limited, %d answers an error on PostgreSQL, %d failures",
		s.seed, r.ran, time.Since(start).Round(time.Millisecond), r.ordered, r.inBlock, r.fetched, r.errors, r.failures)
	for _, k := range slices.Sorted(maps.Keys(r.refused)) {
		t.Logf("refused as allowed, %d answers: %s", r.refused[k], k)
	}
}

// rndRun is the state of one TestRndDifferential run.
type rndRun struct {
	t     *testing.T
	s     rndSettings
	conns map[string]*pgx.Conn            // by URL and mode
	wires map[string]*pgconn.HijackedConn // by URL
	// counts for the summary; refused counts the answers refused as
	// allowed by the generator's reason and the proxy's error
	ran, ordered, inBlock, fetched, errors, failures int
	refused                                          map[string]int
}

// conn returns the run's connection to url in mode, connecting again
// when the last one closed.
func (r *rndRun) conn(url string, mode pgx.QueryExecMode) *pgx.Conn {
	key := url + " " + mode.String()
	if c := r.conns[key]; c != nil && !c.IsClosed() {
		return c
	}
	c, err := tryConnect(url, mode, r.s.session)
	if err != nil {
		r.t.Fatalf("connect %s: %v", url, err)
	}
	r.conns[key] = c
	return c
}

func (r *rndRun) close() {
	for _, c := range r.conns {
		c.Close(context.Background())
	}
	for _, hc := range r.wires {
		hc.Conn.Close()
	}
}

// rndRunner is one way of running a query: a protocol, with the query's
// constants as literals or as Bind parameters.
type rndRunner struct {
	mode   pgx.QueryExecMode
	params bool
	// fetch: as JDBC with a fetch size runs it, Execute with a row limit
	// (rndFetchSize) repeated while the portal is suspended.
	fetch bool
	// pipeline: twice in one pipeline with one Sync (rndPipeline).
	pipeline bool
}

// rndFetchSize is the row limit of the row-limited runner's Executes.
const rndFetchSize = 7

func (rr rndRunner) String() string {
	switch {
	case rr.fetch:
		return fmt.Sprintf("row-limited Execute (%d)", rndFetchSize)
	case rr.pipeline:
		return "pipeline"
	case rr.params:
		return rr.mode.String() + " with parameters"
	}
	return rr.mode.String()
}

// rndRunners are the ways check runs c.
func rndRunners(c querygen.Case) []rndRunner {
	var out []rndRunner
	for _, m := range rndModes {
		out = append(out, rndRunner{mode: m})
	}
	if c.ParamSQL != "" {
		out = append(out, rndRunner{mode: pgx.QueryExecModeCacheStatement, params: true})
	}
	return append(out, rndRunner{fetch: true}, rndRunner{pipeline: true})
}

// answer is the answer to c on url as rr runs it, in a transaction block
// opened by begin unless begin is "" (the row-limited runner runs only
// outside one: else ok is false).
func (r *rndRun) answer(e *rndEnv, url string, rr rndRunner, begin string, c querygen.Case) (a answer, ok bool) {
	if !rr.fetch && !rr.pipeline {
		return r.inTx(r.conn(url, rr.mode), begin, func(conn *pgx.Conn) answer { return e.run(conn, rr, c) }), true
	}
	if begin != "" {
		return a, false
	}
	if url == e.ref && rr.fetch {
		r.fetched++
	}
	hc := r.wire(url)
	run := rndFetch
	if rr.pipeline {
		run = rndPipeline
	}
	a, err := run(hc, c.SQL)
	if err != nil {
		hc.Conn.Close()
		delete(r.wires, url)
		a.Err = "connection: " + err.Error()
	}
	e.nameTypes(&a)
	return a, true
}

// wire returns the run's raw protocol connection to url.
func (r *rndRun) wire(url string) *pgconn.HijackedConn {
	if hc := r.wires[url]; hc != nil {
		return hc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		r.t.Fatal(err)
	}
	maps.Copy(cfg.RuntimeParams, r.s.session)
	pc, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		r.t.Fatalf("connect %s: %v", url, err)
	}
	hc, err := pc.Hijack()
	if err != nil {
		r.t.Fatal(err)
	}
	r.wires[url] = hc
	return hc
}

// rndFetch runs sql on hc with the unnamed statement and portal, text
// results, Describe of the portal and Executes of rndFetchSize rows, then
// Sync, and reads the answer up to ReadyForQuery. The tag is the last
// Execute's, as the client sees it.
func rndFetch(hc *pgconn.HijackedConn, sql string) (answer, error) {
	var a answer
	fe := hc.Frontend
	send := func(msgs ...pgproto3.FrontendMessage) error {
		for _, m := range msgs {
			fe.Send(m)
		}
		return fe.Flush()
	}
	exec := &pgproto3.Execute{MaxRows: rndFetchSize}
	if err := send(&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, exec, &pgproto3.Flush{}); err != nil {
		return a, err
	}
	hc.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer hc.Conn.SetReadDeadline(time.Time{})
	for {
		m, err := fe.Receive()
		if err != nil {
			return a, err
		}
		switch m := m.(type) {
		case *pgproto3.RowDescription:
			a.Fields = append(a.Fields, rowDescKeys(m)...)
		case *pgproto3.DataRow:
			a.Rows = append(a.Rows, rawRow(m.Values))
		case *pgproto3.PortalSuspended:
			err = send(exec, &pgproto3.Flush{})
		case *pgproto3.CommandComplete:
			a.Tag = string(m.CommandTag)
			err = send(&pgproto3.Sync{})
		case *pgproto3.ErrorResponse:
			a.Err = fmt.Sprintf("%s %s %q detail %q hint %q", m.Severity, m.Code, m.Message, m.Detail, m.Hint)
			a.Fields, a.Rows, a.Tag = nil, nil, ""
			err = send(&pgproto3.Sync{})
		case *pgproto3.ReadyForQuery:
			a.Tx = m.TxStatus
			return a, nil
		}
		if err != nil {
			return a, err
		}
	}
}

// rndPipeline runs sql twice in one pipeline with one Sync, as a driver's
// batch does: with the unnamed statement and text results, then as a
// named statement described before its Bind, with binary results, closed
// after its Execute. The answer holds both results' fields and rows, "--"
// after the first's, and the first error of the batch (the statements
// after it do not run, as in PostgreSQL).
func rndPipeline(hc *pgconn.HijackedConn, sql string) (answer, error) {
	var a answer
	fe := hc.Frontend
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
		&pgproto3.Parse{Name: "rnd_pipeline", Query: sql}, &pgproto3.Describe{ObjectType: 'S', Name: "rnd_pipeline"},
		&pgproto3.Bind{PreparedStatement: "rnd_pipeline", ResultFormatCodes: []int16{1}}, &pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "rnd_pipeline"}, &pgproto3.Sync{},
	} {
		fe.Send(m)
	}
	if err := fe.Flush(); err != nil {
		return a, err
	}
	hc.Conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer hc.Conn.SetReadDeadline(time.Time{})
	var tags []string
	for {
		m, err := fe.Receive()
		if err != nil {
			return a, err
		}
		switch m := m.(type) {
		case *pgproto3.RowDescription:
			a.Fields = append(a.Fields, rowDescKeys(m)...)
		case *pgproto3.NoData:
			a.Fields = append(a.Fields, "(no data)")
		case *pgproto3.DataRow:
			a.Rows = append(a.Rows, rawRow(m.Values))
		case *pgproto3.CommandComplete:
			tags = append(tags, string(m.CommandTag))
			if len(tags) == 1 {
				a.Rows = append(a.Rows, "--")
			}
		case *pgproto3.ErrorResponse:
			if a.Err == "" {
				a.Err = fmt.Sprintf("%s %s %q detail %q hint %q", m.Severity, m.Code, m.Message, m.Detail, m.Hint)
			}
		case *pgproto3.ReadyForQuery:
			if a.Err != "" {
				// How many rows come before an error is not compared
				// (as rndFetch): a merge may read further ahead.
				a.Fields, a.Rows, tags = nil, nil, nil
			}
			a.Tag = strings.Join(tags, "; ")
			a.Tx = m.TxStatus
			return a, nil
		}
	}
}

// rowDescKeys are the fieldKeys of a RowDescription's fields.
func rowDescKeys(m *pgproto3.RowDescription) []string {
	var out []string
	for _, f := range m.Fields {
		out = append(out, fieldKey(pgconn.FieldDescription{Name: string(f.Name), TableOID: f.TableOID,
			TableAttributeNumber: f.TableAttributeNumber, DataTypeOID: f.DataTypeOID, DataTypeSize: f.DataTypeSize,
			TypeModifier: f.TypeModifier, Format: f.Format}))
	}
	return out
}

// run is the answer to c on conn, as rr runs it.
func (e *rndEnv) run(conn *pgx.Conn, rr rndRunner, c querygen.Case) answer {
	if !rr.params {
		return e.ask(conn, rr.mode, c.SQL)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var a answer
	rows, err := conn.Query(ctx, c.ParamSQL, append([]any{rr.mode}, c.Params...)...)
	if err == nil {
		for _, f := range rows.FieldDescriptions() {
			a.Fields = append(a.Fields, fieldKey(f))
		}
		for rows.Next() {
			a.Rows = append(a.Rows, rawRow(rows.RawValues()))
		}
		rows.Close()
		err = rows.Err()
		a.Tag = rows.CommandTag().String()
	}
	if err != nil {
		a.Err, a.Tag, a.Fields, a.Rows = pgErrKey(err), "", nil, nil
	}
	a.Tx = conn.PgConn().TxStatus()
	e.nameTypes(&a)
	return a
}

// check runs query i in every mode on the reference and both proxy
// databases and reports each difference.
func (r *rndRun) check(e *rndEnv, i int, c querygen.Case) {
	r.ran++
	if c.Ordered {
		r.ordered++
	}
	begin := rndBegin(r.s.seed, i)
	if begin != "" {
		r.inBlock++
	}
	for _, rr := range rndRunners(c) {
		want, ok := r.answer(e, e.ref, rr, begin, c)
		if !ok {
			continue
		}
		if want.Err != "" {
			r.errors++
		}
		for _, db := range []string{"two", "three"} {
			got, _ := r.answer(e, e.proxy[db], rr, begin, c)
			if strings.HasPrefix(got.Err, "ERROR 0A000") && !strings.HasPrefix(want.Err, "ERROR 0A000") {
				if c.MayRefuse != "" {
					msg, _, _ := strings.Cut(got.Err, " detail ")
					r.refused[c.MayRefuse+" → "+msg]++
					continue
				}
				r.fail(i, c, rr, db, "an unexpected refusal", got, want)
				continue
			}
			if !c.Ordered {
				slices.Sort(got.Rows)
				slices.Sort(want.Rows)
			}
			if got.String() != want.String() {
				r.fail(i, c, rr, db, "a different answer", got, want)
			}
		}
	}
}

// rndBegin is how query i of seed runs: outside a transaction block
// (""), or, one time in eight, after a BEGIN of a random kind, so that
// the proxy opens its transaction on the shards the query reads.
func rndBegin(seed uint64, i int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(i)^0xbe91))
	if rng.IntN(8) != 0 {
		return ""
	}
	return []string{"BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ", "BEGIN READ ONLY", "START TRANSACTION ISOLATION LEVEL SERIALIZABLE"}[rng.IntN(4)]
}

// inTx runs f on conn, inside a transaction block opened with begin
// unless begin is "", and rolls the block back.
func (r *rndRun) inTx(conn *pgx.Conn, begin string, f func(*pgx.Conn) answer) answer {
	if begin == "" {
		return f(conn)
	}
	ctx := context.Background()
	if _, err := conn.Exec(ctx, begin); err != nil {
		r.t.Fatalf("%s: %v", begin, err)
	}
	a := f(conn)
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		r.t.Fatalf("ROLLBACK: %v", err)
	}
	return a
}

func (r *rndRun) fail(i int, c querygen.Case, rr rndRunner, db, what string, got, want answer) {
	r.t.Helper()
	r.failures++
	sql := c.SQL
	if rr.params {
		sql = fmt.Sprintf("%s\n parameters %v", c.ParamSQL, c.Params)
	}
	replay := fmt.Sprintf("RANDOM_DIFF_SEED=%d RANDOM_DIFF_ONLY=%d", r.s.seed, i)
	if len(r.s.gaps) > 0 {
		replay += " RANDOM_DIFF_GAPS=" + strings.Join(r.s.gaps, ",")
	}
	if begin := rndBegin(r.s.seed, i); begin != "" {
		sql = begin + ";\n" + sql
	}
	r.t.Errorf("seed %d query %d [%s, %s shards]: %s\n%s\n got  %s\n want %s\n replay: %s go test -count=1 -run TestRndDifferential ./integration/",
		r.s.seed, i, rr, db, what, sql, rndShort(got), rndShort(want), replay)
}

// rndShort is an answer for a failure message, long row lists shortened.
func rndShort(a answer) string {
	if len(a.Rows) > 12 {
		a.Rows = append(a.Rows[:12:12], fmt.Sprintf("… %d rows in all", len(a.Rows)))
	}
	return a.String()
}
