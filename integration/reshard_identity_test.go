package integration

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/replication"
)

// TestReshardReplicaIdentityFull streams a table without a primary key,
// REPLICA IDENTITY FULL, with identical duplicate rows and NULLs: an
// UPDATE or DELETE of one of two identical rows changes one row on the
// destination too, NULLs match, and key changes move rows between shards.
func TestReshardReplicaIdentityFull(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	e := newStreamEnv(t, config.ShardedTable{Table: "logs", Column: "k", Type: "bigint", Function: "hash"})
	c := e.c
	src, dst := e.db(t, ctx, "src", "rf_s0"), e.db(t, ctx, "dst", "rf_d0", "rf_d1")
	s0 := reshardConnect(t, ctx, c.DSN("rf_s0"))
	reshardExec(t, ctx, s0, `CREATE TABLE logs (k bigint, v text, n int);
ALTER TABLE logs REPLICA IDENTITY FULL;
INSERT INTO logs VALUES (1, 'a', 1), (1, 'a', 1), (2, NULL, 5), (3, 'c', NULL), (4, 'd', 4), (4, 'd', 4);
INSERT INTO logs SELECT i, 'r' || i, i FROM generate_series(10, 200) i`)
	task := e.streamWrites(t, ctx, src, dst, s0, `UPDATE logs SET n = 10 WHERE ctid = (SELECT ctid FROM logs WHERE k = 1 LIMIT 1);
DELETE FROM logs WHERE ctid = (SELECT ctid FROM logs WHERE k = 4 LIMIT 1);
UPDATE logs SET v = 'z' WHERE k = 2;
UPDATE logs SET n = 7 WHERE k = 3;
UPDATE logs SET k = k + 1000 WHERE k BETWEEN 10 AND 60;
DELETE FROM logs WHERE k BETWEEN 100 AND 120;
INSERT INTO logs VALUES (5, NULL, NULL), (5, NULL, NULL);
UPDATE logs SET v = 'y' WHERE ctid = (SELECT ctid FROM logs WHERE k = 5 LIMIT 1)`)

	rows := func(conn *pgx.Conn) []string {
		rs, _ := conn.Query(ctx, "SELECT format('%s|%s|%s', k, v, n) FROM logs")
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := rows(s0)
	var got []string
	for d, sh := range dst.Shards {
		conn := reshardConnect(t, ctx, c.DSN(sh.Database))
		var ks []int64
		if err := conn.QueryRow(ctx, "SELECT coalesce(array_agg(k), '{}') FROM logs").Scan(&ks); err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if s := shardOf(t, k, 2); s != d {
				t.Errorf("key %d on destination shard %d, the hash names %d", k, d, s)
			}
		}
		got = append(got, rows(conn)...)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("destination rows differ from the source's:\nsource      %v\ndestination %v", want, got)
	}
	if err := task.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countSlots(t, ctx, s0); n != 0 {
		t.Errorf("%d slots left", n)
	}
}

// TestReshardIdentityAlways streams tables whose key is an identity column
// GENERATED ALWAYS (PostgreSQL refuses an INSERT of a value into it
// without OVERRIDING SYSTEM VALUE, and an UPDATE setting it other than to
// DEFAULT), one of them partitioned: inserts, updates of other columns,
// key changes to DEFAULT (rows that move between shards) and deletes
// during the stream all arrive. After SyncSequences the destination's
// columns are GENERATED ALWAYS again, as on the source, and the
// destination's sequences hand out ids past the source's.
func TestReshardIdentityAlways(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	e := newStreamEnv(t,
		config.ShardedTable{Table: "items", Column: "id", Type: "bigint", Function: "hash"},
		config.ShardedTable{Table: "events", Column: "id", Type: "bigint", Function: "hash"})
	c := e.c
	src, dst := e.db(t, ctx, "src", "ia_s0"), e.db(t, ctx, "dst", "ia_d0", "ia_d1")
	s0 := reshardConnect(t, ctx, c.DSN("ia_s0"))
	reshardExec(t, ctx, s0, `CREATE TABLE items (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text, n int);
CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY, at date NOT NULL, v text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
INSERT INTO items (v, n) SELECT 'r' || i, i FROM generate_series(1, 200) i;
INSERT INTO events (at, v) SELECT date '2025-06-01' + i, 'e' || i FROM generate_series(1, 300) i`)
	task := e.streamWrites(t, ctx, src, dst, s0, `INSERT INTO items (v, n) SELECT 'new' || i, i FROM generate_series(1, 50) i;
UPDATE items SET v = 'changed' WHERE id % 7 = 0;
UPDATE items SET id = DEFAULT WHERE id BETWEEN 10 AND 30;
DELETE FROM items WHERE id BETWEEN 40 AND 45;
INSERT INTO events (at, v) SELECT date '2026-02-01' + i, 'n' || i FROM generate_series(1, 40) i;
UPDATE events SET v = 'changed' WHERE id % 5 = 0;
UPDATE events SET id = DEFAULT WHERE id BETWEEN 3 AND 9;
DELETE FROM events WHERE id BETWEEN 100 AND 110`)
	if err := task.SyncSequences(ctx); err != nil {
		t.Fatal(err)
	}
	rows := func(conn *pgx.Conn, q string) []string {
		rs, _ := conn.Query(ctx, q)
		out, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const (
		itemRows  = "SELECT format('%s|%s|%s', id, v, n) FROM items"
		eventRows = "SELECT format('%s|%s|%s', id, at, v) FROM events"
		identity  = "SELECT format('%s.%s %s', c.relname, a.attname, a.attidentity) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid WHERE a.attidentity <> '' ORDER BY 1"
	)
	for _, q := range []string{itemRows, eventRows} {
		want := rows(s0, q)
		var got []string
		for _, sh := range dst.Shards {
			got = append(got, rows(reshardConnect(t, ctx, c.DSN(sh.Database)), q)...)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			t.Errorf("%s: destination rows differ from the source's:\nsource      %v\ndestination %v", q, want, got)
		}
	}
	wantIdentity := rows(s0, identity)
	for _, sh := range dst.Shards {
		d := reshardConnect(t, ctx, c.DSN(sh.Database))
		if got := rows(d, identity); !slices.Equal(got, wantIdentity) {
			t.Errorf("%s: identity columns %v after SyncSequences, the source's %v", sh.Database, got, wantIdentity)
		}
		var max, next int64
		if err := s0.QueryRow(ctx, "SELECT max(id) FROM items").Scan(&max); err != nil {
			t.Fatal(err)
		}
		if err := d.QueryRow(ctx, "INSERT INTO items (v) VALUES ('after') RETURNING id").Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next <= max {
			t.Errorf("%s: a new item got id %d, not past the source's %d", sh.Database, next, max)
		}
	}
	if err := task.Drop(ctx); err != nil {
		t.Fatal(err)
	}
}

// streamEnv is one PostgreSQL with a source and a destination database
// made of its databases, for tests that drive a replication.Task directly.
type streamEnv struct {
	c     *pgtest.Cluster
	rules []config.ShardedTable
}

func newStreamEnv(t *testing.T, rules ...config.ShardedTable) *streamEnv {
	return &streamEnv{c: pgtest.New(t, pgtest.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}}), rules: rules}
}

// db creates the shard databases and returns the database over them.
func (e *streamEnv) db(t *testing.T, ctx context.Context, name string, shards ...string) *config.Database {
	t.Helper()
	d := &config.Database{Name: name, ShardedTables: e.rules}
	for _, s := range shards {
		if err := e.c.CreateDatabase(ctx, s); err != nil {
			t.Fatal(err)
		}
		d.Shards = append(d.Shards, config.Shard{Host: e.c.Host, Port: e.c.Port, Database: s})
	}
	return d
}

// streamWrites copies src to dst with a new task, runs changes on the
// source (over conn) while the task streams, waits until the destination
// caught up and stops the stream. It returns the task.
func (e *streamEnv) streamWrites(t *testing.T, ctx context.Context, src, dst *config.Database, conn *pgx.Conn, changes string) *replication.Task {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	task, err := replication.New(src, dst, e.c.User, e.c.Password, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func(context.Context) error{task.SchemaSync, task.Copy, task.SchemaSyncPost} {
		if err := step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sctx, stop := context.WithCancel(ctx)
	streamed := make(chan error, 1)
	go func() { streamed <- task.Stream(sctx) }()
	reshardExec(t, ctx, conn, changes)
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	defer wcancel()
	if err := task.WaitCaughtUp(wctx, nil); err != nil {
		stop()
		t.Fatalf("%v (stream: %v)", err, <-streamed)
	}
	stop()
	if err := <-streamed; err != nil {
		t.Fatalf("stream: %v", err)
	}
	return task
}
