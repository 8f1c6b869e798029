package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestWireScript runs every script in testdata/wirescript (the format is
// in wirescript_format_test.go and docs/wirescript.md) three times, on a
// new connection each time and on freshly reset data:
//
//   - postgres: directly against a PostgreSQL server holding table kv;
//   - proxy: through the proxy, on database "two" in transaction pool mode,
//     whose kv is hashed on k over two shards, each its own PostgreSQL
//     server;
//   - proxy-session: the same database in session pool mode.
//
// Every until block must read exactly its expected messages in every run,
// except that a block marked known-difference must read something else
// through the proxy (in the marker's pool mode), so that the test tells
// when the proxy is fixed. With -rewrite (or WIRESCRIPT_REWRITE=1) the
// postgres run records its answers as the expected messages instead.
//
// Normalisations, all there is between the runs:
//   - The startup exchange (authentication, ParameterStatus, BackendKeyData)
//     is not part of a script: pgconn logs in and the script starts after
//     the first ReadyForQuery. So the BackendKeyData the proxy issues, and
//     the order of the startup ParameterStatus messages, are not compared.
//   - ErrorResponse and NoticeResponse drop File, Line and Routine (see
//     wsNotice). Every other field, Position and constraint names included,
//     is compared.
//   - Nothing else. RowDescription's TableOID is compared too: the three
//     servers start from the same template and run the same setup, so kv
//     gets the same OID on each (newWSEnv checks this), and a proxy that
//     passes a shard's RowDescription through answers as PostgreSQL does.
func TestWireScript(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "wirescript", "*"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no wire scripts in testdata/wirescript (%v)", err)
	}
	var scripts []*wsScript
	for _, p := range paths {
		s, err := readWireScript(p)
		if err != nil {
			t.Fatal(err)
		}
		scripts = append(scripts, s)
	}
	rewrite := *wsRewrite || os.Getenv("WIRESCRIPT_REWRITE") == "1"
	e := newWSEnv(t)
	for _, s := range scripts {
		t.Run(filepath.Base(s.path), func(t *testing.T) {
			t.Run("postgres", func(t *testing.T) {
				e.reset(t)
				runWireScript(t, s, wsTarget{url: e.ref.DSN("app")}, rewrite)
				if rewrite {
					rewriteWireScript(t, s)
				}
			})
			for _, tg := range []wsTarget{
				{name: "proxy", mode: "transaction", url: e.p.AppURL("two")},
				{name: "proxy-session", mode: "session", url: e.p.AppURL("two_session")},
			} {
				t.Run(tg.name, func(t *testing.T) {
					e.reset(t)
					runWireScript(t, s, tg, false)
					e.checkShards(t)
				})
			}
		})
	}
}

var wsRewrite = flag.Bool("rewrite", false, "TestWireScript: record PostgreSQL's answers as the expected messages of testdata/wirescript (as WIRESCRIPT_REWRITE=1)")

// wsTimeout bounds the wait for the messages of one until block.
const wsTimeout = 10 * time.Second

// wsSchema is created on the reference server and on both shards.
const wsSchema = "CREATE TABLE kv (k int PRIMARY KEY, v text)"

// wsSeed are the rows of kv at the start of every run. Scripts rely on
// where the proxy puts each key of kv on the two-shard database:
// wsPlacement, which newWSEnv checks against the shards.
var (
	wsSeed      = map[int]string{1: "one", 2: "two", 3: "three", 4: "four"}
	wsPlacement = map[int]int{1: 0, 2: 0, 12: 0, 13: 0, 14: 0, 16: 0, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1, 8: 1}
)

// wsEnv is the reference server, two shard servers and a proxy with
// database "two" (transaction mode) and "two_session" (session mode) on
// database app of both shards.
type wsEnv struct {
	ref    *pgtest.Cluster
	shards []*pgtest.Cluster
	p      *proxy
}

func newWSEnv(t *testing.T) *wsEnv {
	t.Helper()
	// The same options on all three servers, so that the same setup
	// gives kv the same OID on each.
	opts := pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "10"}}
	e := &wsEnv{ref: pgtest.New(t, opts)}
	e.shards = []*pgtest.Cluster{pgtest.New(t, opts), pgtest.New(t, opts)}
	ctx := context.Background()
	oids := map[string]bool{}
	for _, c := range e.servers() {
		if err := c.CreateDatabase(ctx, "app"); err != nil {
			t.Fatal(err)
		}
		if err := c.Exec(ctx, "app", wsSchema); err != nil {
			t.Fatal(err)
		}
		oids[wsQuery(t, c, "SELECT 'kv'::regclass::oid")[0]] = true
	}
	if len(oids) != 1 {
		t.Fatalf("kv has OIDs %v on the three servers: RowDescription.TableOID would differ between PostgreSQL and the proxy", oids)
	}
	shard := func(c *pgtest.Cluster) string { return shardYAML(c, "app") }
	e.p = startProxy(t, fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 2, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: two
    shards: [%s, %s]
    sharded_tables: [{ table: kv, column: k, type: integer }]
  - name: two_session
    pool: { mode: session }
    shards: [%s, %s]
    sharded_tables: [{ table: kv, column: k, type: integer }]
`, t.TempDir(), appPassword, e.ref.User, e.ref.Password, shard(e.shards[0]), shard(e.shards[1]), shard(e.shards[0]), shard(e.shards[1])))
	e.checkPlacement(t)
	return e
}

func (e *wsEnv) servers() []*pgtest.Cluster { return append([]*pgtest.Cluster{e.ref}, e.shards...) }

// checkPlacement inserts each key of wsPlacement through the proxy and
// requires it on the shard wsPlacement names, and only there.
func (e *wsEnv) checkPlacement(t *testing.T) {
	t.Helper()
	conn := connect(t, e.p.AppURL("two"))
	for k := range wsPlacement {
		if _, err := conn.Exec(context.Background(), "INSERT INTO kv VALUES ($1, 'placement')", k); err != nil {
			t.Fatalf("insert key %d through the proxy: %v", k, err)
		}
	}
	for i, c := range e.shards {
		got := map[string]bool{}
		for _, k := range wsQuery(t, c, "SELECT k FROM kv") {
			got[k] = true
		}
		for k, want := range wsPlacement {
			if got[fmt.Sprint(k)] != (want == i) {
				t.Fatalf("key %d: on shard %d: %v; wsPlacement says shard %d", k, i, got[fmt.Sprint(k)], want)
			}
		}
	}
}

// reset gives kv the rows of wsSeed: all of them on the reference server,
// each shard its own. A lock_timeout turns a transaction the proxy left
// open on a shard into an error rather than a hang.
func (e *wsEnv) reset(t testing.TB) {
	t.Helper()
	values := func(shard int) string {
		var vs []string
		for _, k := range slices.Sorted(maps.Keys(wsSeed)) {
			if shard < 0 || wsPlacement[k] == shard {
				vs = append(vs, fmt.Sprintf("(%d, '%s')", k, wsSeed[k]))
			}
		}
		return strings.Join(vs, ", ")
	}
	for i, c := range e.servers() {
		sql := "SET lock_timeout = '10s'; TRUNCATE kv; INSERT INTO kv VALUES " + values(i-1)
		if err := c.Exec(context.Background(), "app", sql); err != nil {
			t.Fatal(err)
		}
	}
}

// checkShards requires, after a proxy run, every row of kv on its key's
// shard and no prepared transaction left on either shard (the proxy
// commits a two-shard transaction with two-phase commit; it may finish
// COMMIT PREPARED after answering, hence the poll).
func (e *wsEnv) checkShards(t testing.TB) {
	t.Helper()
	for i, c := range e.shards {
		for _, k := range wsQuery(t, c, "SELECT k FROM kv") {
			key, err := strconv.ParseInt(k, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			// An integer key hashes as the same bigint does.
			if s := hashShard(key, len(e.shards)); s != i {
				t.Errorf("key %s is on shard %d, its hash says shard %d", k, i, s)
			}
		}
		eventually(t, 10*time.Second, fmt.Sprintf("no prepared transaction on shard %d", i), func() bool {
			return len(wsQuery(t, c, "SELECT gid FROM pg_prepared_xacts")) == 0
		})
	}
}

// wsQuery returns the first column of sql's rows in database app of c.
func wsQuery(t testing.TB, c *pgtest.Cluster, sql string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.DSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var out []string
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// wsTarget is where a run connects: PostgreSQL itself (mode "") or the
// proxy in pool mode mode.
type wsTarget struct {
	name string
	mode string
	url  string
}

// runWireScript plays s on a new connection to tg. On PostgreSQL with record set,
// each until block's output becomes what PostgreSQL answered. The run ends
// with checkIdle, also after a known difference: a script whose proxy run
// is out of step after one must say reconnect.
func runWireScript(t *testing.T, s *wsScript, tg wsTarget, record bool) {
	c := &wsConn{url: tg.url}
	c.dial(t)
	defer c.close()
	var marker *wsBlock // known-difference before the next until block
	for _, b := range s.blocks {
		switch b.cmd {
		case wsSend:
			c.send(b)
		case wsKnownDifference:
			marker = b
		case wsReconnect:
			c.close()
			c.dial(t)
		case wsUntil:
			usable := c.broken == ""
			got := c.until(b)
			m := marker
			marker = nil
			switch {
			case record:
				b.output = got
				if usable && c.broken != "" {
					t.Errorf("%s: PostgreSQL did not send the types this block waits for: %s", b.pos(s), c.broken)
				}
			case tg.mode != "" && m != nil && m.appliesTo(tg.mode):
				if slices.Equal(got, b.output) {
					t.Errorf("%s: marked known-difference issue=%s (%s), but the proxy now answers as PostgreSQL does: remove the marker at %s",
						b.pos(s), m.issue, m.reason, m.pos(s))
				} else {
					t.Logf("%s: known difference, issue %s: %s\nPostgreSQL answers:\n%s\nthe proxy answers:\n%s",
						b.pos(s), m.issue, m.reason, wsIndent(b.output), wsIndent(got))
				}
			case !slices.Equal(got, b.output):
				t.Errorf("%s: after %s\n got:\n%s\n want:\n%s", b.pos(s), c.sent, wsIndent(got), wsIndent(b.output))
			}
		}
	}
	c.checkIdle(t)
}

// rewriteWireScript writes s back to its file if its text changed.
func rewriteWireScript(t testing.TB, s *wsScript) {
	t.Helper()
	text := s.render()
	if old, err := os.ReadFile(s.path); err == nil && string(old) == text {
		return
	}
	if err := os.WriteFile(s.path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("rewrote %s", s.path)
}

// wsConn is the connection of one run.
type wsConn struct {
	url    string
	hc     *pgconn.HijackedConn
	sent   string // the message types of the last send, for failure messages
	broken string // why the connection is unusable; "" while it is usable
}

// dial logs in with pgconn and takes over its socket.
func (c *wsConn) dial(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pc, err := pgconn.Connect(ctx, c.url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	if c.hc, err = pc.Hijack(); err != nil {
		t.Fatal(err)
	}
	c.broken = ""
}

func (c *wsConn) close() {
	if c.hc != nil {
		c.hc.Conn.Close()
		c.hc = nil
	}
}

// send writes the block's messages in one write.
func (c *wsConn) send(b *wsBlock) {
	var names []string
	for _, m := range b.msgs {
		names = append(names, strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3."))
	}
	c.sent = fmt.Sprintf("line %d: send %s", b.line, strings.Join(names, " "))
	if c.broken != "" {
		return
	}
	for _, m := range b.msgs {
		c.hc.Frontend.Send(m)
	}
	if err := c.hc.Frontend.Flush(); err != nil {
		c.broken = fmt.Sprintf("write error at line %d: %v", b.line, err)
	}
}

// until reads messages until it has seen the block's types in order, and
// returns them rendered, ignored types left out. A read that fails ends
// the list with a line saying why and makes the connection unusable.
func (c *wsConn) until(b *wsBlock) []string {
	if c.broken != "" {
		return []string{"not run: " + c.broken}
	}
	c.hc.Conn.SetReadDeadline(time.Now().Add(wsTimeout))
	defer c.hc.Conn.SetReadDeadline(time.Time{})
	var out []string
	for next := 0; next < len(b.types); {
		m, err := c.hc.Frontend.Receive()
		if err != nil {
			c.broken = fmt.Sprintf("read error at line %d: %s", b.line, wsReadErr(err))
			return append(out, "read error: "+wsReadErr(err))
		}
		name := wsTypeName(m)
		if name == b.types[next] {
			next++
		}
		if !b.ignore[name] {
			out = append(out, wsRender(m))
		}
	}
	return out
}

// checkIdle requires that nothing is left to read after the last block:
// a Sync must be answered by a ReadyForQuery and nothing before it.
func (c *wsConn) checkIdle(t testing.TB) {
	t.Helper()
	if c.broken != "" {
		t.Errorf("connection unusable at the end: %s", c.broken)
		return
	}
	c.hc.Frontend.Send(&pgproto3.Sync{})
	if err := c.hc.Frontend.Flush(); err != nil {
		t.Errorf("after the last block: send Sync: %v", err)
		return
	}
	c.hc.Conn.SetReadDeadline(time.Now().Add(wsTimeout))
	m, err := c.hc.Frontend.Receive()
	switch {
	case err != nil:
		t.Errorf("after the last block: Sync got no ReadyForQuery: %s", wsReadErr(err))
	case wsTypeName(m) != "ReadyForQuery":
		t.Errorf("after the last block: unread message %s (a Sync's ReadyForQuery expected)", wsRender(m))
	}
}

// wsReadErr names the end of a read as a client sees it.
func wsReadErr(err error) string {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("nothing within %s", wsTimeout)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return err.Error()
}

func wsIndent(lines []string) string {
	if len(lines) == 0 {
		return "    (nothing)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
