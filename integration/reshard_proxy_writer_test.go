package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// proxyReshardSchema is created on every source shard of
// TestReshardCutoverThroughProxy.
const proxyReshardSchema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE docs (id bigint PRIMARY KEY, body text);
CREATE TABLE countries (code text PRIMARY KEY, name text);
CREATE TABLE events (id bigserial PRIMARY KEY, payload text);
CREATE TABLE scratch (id bigint PRIMARY KEY, v int);
`

// proxyReshardTables are the tables the test models: key is the primary
// key (the sharding key of the sharded ones), row an expression giving a
// row's text as proxyModel records it. Each row text starts with the key
// and "|". docs records md5(body), not the 100 kB body.
var proxyReshardTables = []struct {
	name, key, row string
	omni           bool
}{
	{name: "accounts", key: "id", row: "id::text || '|' || balance::text || '|' || coalesce(note, '-')"},
	{name: "docs", key: "id", row: "id::text || '|' || coalesce(md5(body), '-')"},
	{name: "countries", key: "code", row: "code || '|' || coalesce(name, '-')", omni: true},
	{name: "events", key: "id", row: "id::text || '|' || coalesce(payload, '-')"},
	{name: "scratch", key: "id", row: "id::text || '|' || coalesce(v::text, '-')"},
}

// TestReshardCutoverThroughProxy reshards app (1 → 2 and 2 → 3 shards) with
// RESHARD while a client writes through the proxy during the copy, the
// stream, the automatic cutover and after it: inserts, updates of key and
// non-key columns, deletes, omni updates, events with sequence ids and
// truncates of a scratch table. The writer keeps a model of what its
// acknowledged statements did; afterwards the destination shards, read
// directly, must hold exactly the model. TestReshardRoutesWithNewShardCount
// isolates the stale routing it found at the 2 → 3 cutover.
func TestReshardCutoverThroughProxy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst int
	}{
		{"1to2", 1, 2},
		{"2to3", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) { testReshardThroughProxy(t, tc.src, tc.dst) })
	}
}

func testReshardThroughProxy(t *testing.T, nsrc, ndst int) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	start := time.Now()
	o, srcs, dsts := startProxyReshardEnv(t, ctx, nsrc, ndst)
	m := loadProxyModel(t, ctx, srcs)
	t.Logf("environment ready in %v", time.Since(start))

	// The proxy finds the initial rows by their keys: each is on the
	// source shard its hash names.
	app := connect(t, o.AppURL("app"))
	for id := range int64(50) {
		var n int
		if err := app.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE id = $1", id+1).Scan(&n); err != nil || n != 1 {
			t.Fatalf("through the proxy, before resharding: %d accounts with id %d (%v)", n, id+1, err)
		}
	}

	adm := connect(t, o.AdminURL())
	// A loaded machine must not abort the cutover (an abort retries only
	// after 10s); a lag limit of 0 bytes holds the automatic cutover until
	// the stream has carried writes (reshardWatched lifts it).
	for _, set := range []string{"SET reshard_cutover_timeout = '20s'", "SET reshard_max_lag_bytes = 0"} {
		if _, err := adminPgx(adm, set); err != nil {
			t.Fatalf("%s: %v", set, err)
		}
	}
	w := startProxyWriter(t, o.AppURL("app"), nsrc, ndst, m)
	eventually(t, 10*time.Second, "the writer's first acknowledged write", func() bool { return w.ackedIn("starting") > 0 })
	reshardWatched(t, ctx, adm, w)
	eventually(t, 20*time.Second, "150 acknowledged writes after the cutover", func() bool { return w.ackedIn("after") >= 150 })
	w.stop()
	after := w.check(t)

	verifyProxyReshard(t, ctx, dsts, m)
	checkAfterCutover(t, ctx, o, srcs, dsts, after)
	t.Logf("subtest took %v", time.Since(start))
}

// reshardWatched runs RESHARD app app_new and polls SHOW TASKS until the
// task is done, telling the writer the phase. Once the writer made 100
// acknowledged writes during the stream, it lets the cutover happen.
func reshardWatched(t *testing.T, ctx context.Context, adm *pgx.Conn, w *proxyWriter) {
	start := time.Now()
	tb, err := adminPgx(adm, "RESHARD app app_new")
	if err != nil {
		t.Fatal(err)
	}
	id := tb.get(t, map[string]string{"source": "app"}, "id")
	released := false
	for {
		if ctx.Err() != nil {
			t.Fatalf("task %s did not finish: %v", id, ctx.Err())
		}
		tasks, err := adminPgx(adm, "SHOW TASKS")
		if err != nil {
			t.Fatal(err)
		}
		row := tasks.find(t, map[string]string{"id": id})
		if row == nil {
			t.Fatalf("task %s not in SHOW TASKS: %v", id, tasks.rows)
		}
		state, phase := row[tasks.col(t, "state")], row[tasks.col(t, "phase")]
		w.phase.Store(&phase)
		switch state {
		case "done":
			w.cutOver.Store(true)
			t.Logf("task %s done in %v: %v", id, time.Since(start), row)
			return
		case "failed", "stopped":
			t.Fatalf("task %s %s: %v", id, state, row)
		}
		if phase == "stream" && !released && w.ackedIn("stream") >= 100 {
			released = true
			for _, set := range []string{"SET reshard_max_lag_bytes = 67108864", "SET reshard_max_lag_time = '10s'"} {
				if _, err := adminPgx(adm, set); err != nil {
					t.Fatalf("%s: %v", set, err)
				}
			}
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// check reports what the stopped writer saw and returns the ids of the
// accounts it inserted after the cutover.
func (w *proxyWriter) check(t *testing.T) []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("writer: acknowledged per phase %v; %d refused as expected, %d in doubt, %d reconnects",
		w.acked, w.refused, w.doubts, w.reconnects)
	t.Logf("writer: key changes %d applied, %d refused", w.keyMoves, w.keyRefusals)
	for _, p := range w.problems {
		t.Errorf("writer: %s", p)
	}
	if w.acked["copy"] == 0 || w.acked["stream"] == 0 || w.acked["after"] == 0 {
		t.Errorf("writer: acknowledged writes per phase %v, want some during the copy, the stream and after the cutover", w.acked)
	}
	if w.keyMoves == 0 || w.keyRefusals == 0 {
		t.Errorf("writer: %d key changes applied, %d refused; want both", w.keyMoves, w.keyRefusals)
	}
	return w.afterIDs
}

// checkAfterCutover checks that the accounts inserted after the cutover
// (after) are on no source shard, that the proxy reads the destination's
// accounts, that the destinations' sequences start past the sources', and
// that no slot is left.
func checkAfterCutover(t *testing.T, ctx context.Context, o *operated, srcs, dsts []*pgx.Conn, after []int64) {
	count := func(conn *pgx.Conn, sql string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	for s := range srcs {
		srcs[s] = reconnected(t, ctx, srcs[s]) // the cutover fenced the source
		conn := srcs[s]
		if n := count(conn, "SELECT count(*) FROM accounts WHERE id = ANY($1)", after); n != 0 {
			t.Errorf("source shard %d has %d of the %d accounts inserted after the cutover", s, n, len(after))
		}
	}
	var direct, srcMax int64
	for _, conn := range dsts {
		direct += count(conn, "SELECT count(*) FROM accounts")
	}
	app := connect(t, o.AppURL("app"))
	if n := count(app, "SELECT count(*) FROM accounts", pgx.QueryExecModeSimpleProtocol); n != direct {
		t.Errorf("through the proxy: %d accounts, directly on the new shards: %d", n, direct)
	}
	for _, conn := range srcs {
		srcMax = max(srcMax, count(conn, "SELECT last_value FROM events_id_seq"))
	}
	for d, conn := range dsts {
		if v := count(conn, "SELECT last_value FROM events_id_seq"); v < srcMax {
			t.Errorf("destination shard %d: events_id_seq at %d, a source reached %d", d, v, srcMax)
		}
	}
	// pg_replication_slots is cluster-wide: it covers every source shard.
	if n := countSlots(t, ctx, srcs[0]); n != 0 {
		t.Errorf("%d replication slots left on the source", n)
	}
	if got := o.Listener.State().Config.Database("app"); len(got.Shards) != len(dsts) {
		t.Errorf("running config: app has %d shards, want %d", len(got.Shards), len(dsts))
	}
}

// startProxyReshardEnv starts PostgreSQL with databases app_0… (the source,
// nsrc shards, filled) and app_new_0… (ndst shards, empty), and an operated
// proxy with both databases. With several source shards, every sharded
// row is on the shard the proxy's hash names.
func startProxyReshardEnv(t *testing.T, ctx context.Context, nsrc, ndst int) (o *operated, srcs, dsts []*pgx.Conn) {
	c := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "20",
		"max_prepared_transactions": "50",
	}})
	shards := func(name string, n int) string { return createShardDBs(t, ctx, c, name, n) }
	const rules = `
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { table: docs, column: id, type: bigint }
      - { table: events, column: id, type: bigint }
      - { table: scratch, column: id, type: bigint }
    omni_tables: [countries]`
	yamlText := fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 10, checkout_timeout: 5s }
limits: { client_login_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards: [%s]%s
  - name: app_new
    shards: [%s]%s
`, t.TempDir(), appPassword, c.User, c.Password, shards("app", nsrc), rules, shards("app_new", ndst), rules)

	for s := range nsrc {
		conn := reshardConnect(t, ctx, c.DSN(fmt.Sprintf("app_%d", s)))
		srcs = append(srcs, conn)
		reshardExec(t, ctx, conn, proxyReshardSchema)
		// Sequences are per shard: each source shard hands out its own ids.
		reshardExec(t, ctx, conn, fmt.Sprintf(`
ALTER SEQUENCE events_id_seq RESTART WITH %[1]d;
INSERT INTO countries SELECT 'c'||i, 'country '||i FROM generate_series(1, 20) i;
INSERT INTO accounts SELECT i, i %% 1000, CASE WHEN i %% 10 = 0 THEN NULL ELSE 'note '||i END
	FROM generate_series(1, 20000) i WHERE i = ANY (%[2]s);
INSERT INTO docs SELECT i, CASE WHEN i %% 2 = 0
	THEN (SELECT string_agg(md5(i::text || '-' || j::text), '') FROM generate_series(1, 3200) j)
	ELSE 'short '||i END
	FROM generate_series(1, 40) i WHERE i = ANY (%[3]s);
INSERT INTO events (payload) SELECT 'e'||i FROM generate_series(1, 1000) i;
DELETE FROM events WHERE NOT id = ANY (%[4]s);
INSERT INTO scratch SELECT i, i FROM generate_series(1, 200) i WHERE i = ANY (%[5]s)`,
			s*1000000+1, ownedIDs(1, 20000, nsrc, s), ownedIDs(1, 40, nsrc, s),
			ownedIDs(int64(s)*1000000+1, int64(s)*1000000+1000, nsrc, s), ownedIDs(1, 200, nsrc, s)))
	}
	for d := range ndst {
		dsts = append(dsts, reshardConnect(t, ctx, c.DSN(fmt.Sprintf("app_new_%d", d))))
	}
	return startOperated(t, yamlText), srcs, dsts
}

// ownedIDs is an array literal of the ids in [lo, hi] that shard s of n
// holds.
func ownedIDs(lo, hi int64, n, s int) string {
	var ids []string
	for id := lo; id <= hi; id++ {
		if hashShard(id, n) == s {
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	return "'{" + strings.Join(ids, ",") + "}'::bigint[]"
}
