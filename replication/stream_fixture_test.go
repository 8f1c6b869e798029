package replication

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// streamFixture is a source database of one shard and a destination of
// ndst shards on one real PostgreSQL, copied by a Task (schema sync, copy,
// post-data), ready to stream.
type streamFixture struct {
	c        *pgtest.Cluster
	src, dst *config.Database
	task     *Task
	srcConn  *pgx.Conn
	dstConns []*pgx.Conn
}

// newStreamFixture creates schema and runs setup on the source, configures
// the destination with rules, and copies.
func newStreamFixture(tb testing.TB, ndst int, schema, setup string, rules func(*config.Database)) *streamFixture {
	tb.Helper()
	f := newTaskFixture(tb, ndst, schema, setup, rules)
	for _, step := range []func(context.Context) error{f.task.SchemaSync, f.task.Copy, f.task.SchemaSyncPost} {
		if err := step(tb.Context()); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}

// newTaskFixture is newStreamFixture before the task's first step.
func newTaskFixture(tb testing.TB, ndst int, schema, setup string, rules func(*config.Database)) *streamFixture {
	tb.Helper()
	ctx := tb.Context()
	c := pgtest.New(tb, pgtest.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	f := &streamFixture{c: c, src: &config.Database{Name: "src"}, dst: &config.Database{Name: "dst"}}
	f.src.Shards = []config.Shard{{Host: c.Host, Port: c.Port, Database: "src_0"}}
	for d := range ndst {
		f.dst.Shards = append(f.dst.Shards, config.Shard{Host: c.Host, Port: c.Port, Database: fmt.Sprintf("dst_%d", d)})
	}
	rules(f.dst)
	for _, db := range []*config.Database{f.src, f.dst} {
		for _, sh := range db.Shards {
			if err := c.CreateDatabase(ctx, sh.Database); err != nil {
				tb.Fatal(err)
			}
		}
	}
	f.srcConn = fixtureConnect(tb, c.DSN("src_0"))
	f.exec(tb, f.srcConn, schema)
	if setup != "" {
		f.exec(tb, f.srcConn, setup)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(tbWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	f.task = f.newTask(tb, log)
	for _, sh := range f.dst.Shards {
		f.dstConns = append(f.dstConns, fixtureConnect(tb, c.DSN(sh.Database)))
	}
	return f
}

// newTask is another Task of the fixture's source and destination: the
// same task, as another proxy would run it.
func (f *streamFixture) newTask(tb testing.TB, log *slog.Logger) *Task {
	tb.Helper()
	task, err := New(f.src, f.dst, f.c.User, f.c.Password, log)
	if err != nil {
		tb.Fatal(err)
	}
	return task
}

func fixtureConnect(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	conn, err := pgx.Connect(tb.Context(), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (f *streamFixture) exec(tb testing.TB, conn *pgx.Conn, sql string) {
	tb.Helper()
	if _, err := conn.PgConn().Exec(tb.Context(), sql).ReadAll(); err != nil {
		tb.Fatalf("%s: %v", sql, err)
	}
}

// stream runs the task's Stream until every destination applied the
// source's current WAL position, then stops it.
func (f *streamFixture) stream(tb testing.TB) {
	tb.Helper()
	f.streamWhile(tb, func(context.Context) {})
}

// streamWhile runs the task's Stream until every destination applied the
// source's current WAL position, then calls caughtUp, then stops the stream.
func (f *streamFixture) streamWhile(tb testing.TB, caughtUp func(context.Context)) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	done := make(chan error, 1)
	go func() {
		err := f.task.Stream(ctx)
		if err != nil {
			wcancel() // stop waiting for a stream that failed
		}
		done <- err
	}()
	err := f.task.WaitCaughtUp(wctx, nil)
	if err == nil {
		caughtUp(ctx)
	}
	wcancel()
	cancel()
	if serr := <-done; serr != nil {
		tb.Fatalf("stream: %v", serr)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// tbWriter writes log lines to the test's log.
type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(p))
	return len(p), nil
}

// compare checks that the destination shards together hold exactly the
// source's rows of table, each on the shard the destination's rule names
// by column key, and an omni table's rows on every shard. rest is a text
// expression of the other columns.
func (f *streamFixture) compare(tb testing.TB, table, key, rest string) {
	tb.Helper()
	ctx := tb.Context()
	q := fmt.Sprintf("SELECT %s::text, coalesce(%s, '<null>') FROM %s", quoteIdent(key), rest, quoteIdent(table))
	// read returns the rows as "key\x00rest" -> key.
	read := func(conn *pgx.Conn) map[string]string {
		rows, err := conn.Query(ctx, q)
		if err != nil {
			tb.Fatal(err)
		}
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				tb.Fatal(err)
			}
			out[k+"\x00"+v] = k
		}
		if err := rows.Err(); err != nil {
			tb.Fatal(err)
		}
		return out
	}
	want := read(f.srcConn)
	ru, err := ruleFor(f.dst, "public", table, []string{key})
	if err != nil {
		tb.Fatal(err)
	}
	seen := map[string]bool{}
	for d, conn := range f.dstConns {
		got := read(conn)
		for row, k := range got {
			seen[row] = true
			if _, ok := want[row]; !ok {
				tb.Errorf("%s on destination shard %d: row %.80q is not on the source", table, d, row)
			}
			if ru.place == placeSharded {
				if s, err := ru.shardOfText([]byte(k), false); err != nil || s != d {
					tb.Errorf("%s: row %s on destination shard %d, its rule names %d (%v)", table, k, d, s, err)
				}
			}
		}
		if ru.place == placeOmni && len(got) != len(want) {
			tb.Errorf("omni %s on destination shard %d: %d rows, source %d", table, d, len(got), len(want))
		}
	}
	for row := range want {
		if !seen[row] {
			tb.Errorf("%s: source row %.80q is on no destination shard", table, row)
		}
	}
}
