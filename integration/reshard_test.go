package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/replication"
	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// reshardSchema is created on every source shard. scratch is a sharded
// table the writer truncates on one source shard at a time: with several
// sources, only that source's rows leave the destination.
const reshardSchema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
CREATE TABLE users (name text PRIMARY KEY, n int NOT NULL);
CREATE TABLE docs (id bigint PRIMARY KEY, version int NOT NULL, body text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
CREATE TABLE events (id bigserial PRIMARY KEY, payload text);
CREATE TABLE scratch (id bigint PRIMARY KEY, v int);
CREATE INDEX accounts_balance ON accounts (balance);
`

// reshardTables are the tables the test compares, with their sharding key
// (empty for omni tables).
var reshardTables = []struct{ name, key, typ string }{
	{"accounts", "id", "bigint"},
	{"users", "name", "text"},
	{"docs", "id", "bigint"},
	{"countries", "", ""},
	{"events", "id", "bigint"},
	{"scratch", "id", "bigint"},
}

func TestReshard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src, dst int
	}{
		{"1to2", 1, 2},
		{"2to3", 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) { testReshard(t, tc.src, tc.dst) })
	}
}

func reshardDB(c *pgtest.Cluster, name string, n int) *config.Database {
	db := &config.Database{Name: name}
	for i := range n {
		db.Shards = append(db.Shards, config.Shard{Host: c.Host, Port: c.Port, Database: fmt.Sprintf("%s_%d", name, i)})
	}
	for _, tb := range reshardTables {
		if tb.key == "" {
			db.OmniTables = append(db.OmniTables, tb.name)
			continue
		}
		db.ShardedTables = append(db.ShardedTables, config.ShardedTable{Table: tb.name, Column: tb.key, Type: tb.typ, Function: "hash"})
	}
	return db
}

func testReshard(t *testing.T, nsrc, ndst int) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "20", "max_wal_senders": "20",
	}})
	src := reshardDB(c, "src", nsrc)
	dst := reshardDB(c, "dst", ndst)
	for _, db := range []*config.Database{src, dst} {
		for _, sh := range db.Shards {
			if err := c.CreateDatabase(ctx, sh.Database); err != nil {
				t.Fatal(err)
			}
		}
	}
	srcConns := make([]*pgx.Conn, nsrc)
	for s := range nsrc {
		srcConns[s] = reshardConnect(t, ctx, c.DSN(src.Shards[s].Database))
		reshardExec(t, ctx, srcConns[s], reshardSchema)
		// Each source shard hands out its own range of ids.
		reshardExec(t, ctx, srcConns[s], fmt.Sprintf("ALTER SEQUENCE events_id_seq RESTART WITH %d", s*1000000+1))
		reshardExec(t, ctx, srcConns[s], `INSERT INTO countries SELECT 'c'||i, 'country '||i FROM generate_series(1, 20) i`)
	}
	srcShard := func(id int64) int { return hashShard(id, nsrc) }
	srcShardText := func(name string) int {
		k, _ := sharding.ParseKey(sharding.Text, name)
		s, _ := sharding.Hash{Type: sharding.Text, Shards: nsrc}.Shard(k)
		return s
	}
	for s := range nsrc {
		conn := srcConns[s]
		reshardExec(t, ctx, conn, fmt.Sprintf(`
INSERT INTO accounts SELECT i, i %% 100, 'note '||i FROM generate_series(1, 3000) i WHERE %[1]s;
INSERT INTO users SELECT 'user'||i, i FROM generate_series(1, 500) i;
INSERT INTO docs SELECT i, 1, (SELECT string_agg(md5(i::text || j::text), '') FROM generate_series(1, 3200) j)
	FROM generate_series(1, 20) i WHERE %[1]s;
INSERT INTO events (payload) SELECT 'e'||i FROM generate_series(1, 1000) i;
INSERT INTO scratch SELECT i, i FROM generate_series(1, 100) i WHERE %[1]s`, srcFilter(srcShard, s)))
		if nsrc > 1 {
			// Keep users on the source shard its key hashes to.
			rows, _ := conn.Query(ctx, "SELECT name FROM users")
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if srcShardText(n) != s {
					reshardExec(t, ctx, conn, "DELETE FROM users WHERE name = '"+n+"'")
				}
			}
		}
	}

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	task, err := replication.New(src, dst, c.User, c.Password, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.SchemaSync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := task.SchemaSync(ctx); err != nil { // re-runnable
		t.Fatalf("second schema sync: %v", err)
	}

	w := startReshardWriter(t, c, src, srcShard)
	defer w.stop()
	time.Sleep(200 * time.Millisecond)
	if err := task.Copy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := task.Copy(ctx); err != nil { // a re-run finds everything copied
		t.Fatalf("second copy: %v", err)
	}
	if err := task.SchemaSyncPost(ctx); err != nil {
		t.Fatal(err)
	}

	// Stream, stop it mid-way, and stream again with a new Task: the
	// replication origins make the second run skip what the first applied.
	for round := range 2 {
		task, err := replication.New(src, dst, c.User, c.Password, log)
		if err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
		go func() {
			err := task.Stream(sctx)
			if err != nil {
				wcancel() // stop waiting for a stream that failed
			}
			done <- err
		}()
		// Let the stream apply writes for a while; the writer keeps going.
		time.Sleep(1500 * time.Millisecond)
		if round == 1 {
			w.stop()
			if err := task.WaitCaughtUp(wctx, nil); err != nil {
				scancel()
				t.Fatalf("%v (stream: %v)", err, <-done)
			}
			lag, err := task.Lag(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("lag after catching up: %+v", lag)
		}
		scancel()
		wcancel()
		if err := <-done; err != nil {
			t.Fatalf("stream round %d: %v", round, err)
		}
	}
	t.Logf("writer: %d writes acknowledged, %d rejected", w.writes.Load(), w.failed.Load())
	if w.writes.Load() < 100 {
		t.Fatalf("writer made only %d writes", w.writes.Load())
	}

	dstConns := make([]*pgx.Conn, ndst)
	for d := range ndst {
		dstConns[d] = reshardConnect(t, ctx, c.DSN(dst.Shards[d].Database))
	}
	verifyReshard(t, ctx, srcConns, dstConns, dst)

	// Sequences move past the sources' values.
	if err := task.SyncSequences(ctx); err != nil {
		t.Fatal(err)
	}
	var srcMax int64
	for _, conn := range srcConns {
		var v int64
		if err := conn.QueryRow(ctx, "SELECT last_value FROM events_id_seq").Scan(&v); err != nil {
			t.Fatal(err)
		}
		srcMax = max(srcMax, v)
	}
	for d, conn := range dstConns {
		var next int64
		if err := conn.QueryRow(ctx, "SELECT nextval('events_id_seq')").Scan(&next); err != nil {
			t.Fatal(err)
		}
		if next <= srcMax {
			t.Errorf("destination shard %d: nextval(events_id_seq) = %d, source reached %d", d, next, srcMax)
		}
	}

	if err := task.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	var slots, pubs int
	if err := srcConns[0].QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil {
		t.Fatal(err)
	}
	for _, conn := range srcConns {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication").Scan(&n); err != nil {
			t.Fatal(err)
		}
		pubs += n
	}
	var origins int
	if err := dstConns[0].QueryRow(ctx, "SELECT count(*) FROM pg_replication_origin").Scan(&origins); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || pubs != 0 || origins != 0 {
		t.Errorf("after Drop: %d slots, %d publications, %d origins left", slots, pubs, origins)
	}
}

// srcFilter keeps the ids of source shard s among 1…3000.
func srcFilter(srcShard func(int64) int, s int) string {
	var ids []string
	for i := int64(1); i <= 3000; i++ {
		if srcShard(i) == s {
			ids = append(ids, fmt.Sprint(i))
		}
	}
	return "i = ANY ('{" + strings.Join(ids, ",") + "}'::int[])"
}

// verifyReshard compares every table on the sources with the destination:
// row counts and an order-independent checksum, every sharded row on the
// shard the destination's hash names, omni tables identical everywhere.
func verifyReshard(t *testing.T, ctx context.Context, srcs, dsts []*pgx.Conn, dst *config.Database) {
	t.Helper()
	sum := func(conn *pgx.Conn, table string) (n, h int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(hashtext(t::text)::bigint), 0) FROM "+table+" t").Scan(&n, &h); err != nil {
			t.Fatal(err)
		}
		return n, h
	}
	omni := map[string]bool{}
	for _, o := range dst.OmniTables {
		omni[o] = true
	}
	for _, tb := range reshardTables {
		if omni[tb.name] {
			wn, wh := sum(srcs[0], tb.name)
			for d, conn := range dsts {
				if n, h := sum(conn, tb.name); n != wn || h != wh {
					t.Errorf("omni table %s on destination shard %d: %d rows (checksum %d), source shard 0 has %d (%d)", tb.name, d, n, h, wn, wh)
				}
			}
			continue
		}
		var wn, wh, gn, gh int64
		for _, conn := range srcs {
			n, h := sum(conn, tb.name)
			wn, wh = wn+n, wh+h
		}
		for d, conn := range dsts {
			n, h := sum(conn, tb.name)
			gn, gh = gn+n, gh+h
			typ, _ := sharding.ParseType(tb.typ)
			rows, _ := conn.Query(ctx, "SELECT "+tb.key+"::text FROM "+tb.name)
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			misplaced := 0
			for _, key := range keys {
				k, err := sharding.ParseKey(typ, key)
				if err != nil {
					t.Fatal(err)
				}
				if want, _ := (sharding.Hash{Type: typ, Shards: len(dsts)}).Shard(k); want != d {
					misplaced++
				}
			}
			if misplaced > 0 {
				t.Errorf("table %s: %d of %d rows on destination shard %d belong elsewhere", tb.name, misplaced, len(keys), d)
			}
		}
		if gn != wn || gh != wh {
			t.Errorf("table %s: destination has %d rows (checksum %d), sources %d (%d)", tb.name, gn, gh, wn, wh)
		} else {
			t.Logf("table %s: %d rows match", tb.name, gn)
		}
	}
	// The TOASTed bodies survived updates of other columns and key moves.
	for d, conn := range dsts {
		var bad int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM docs WHERE body IS NULL OR length(body) <> 102400").Scan(&bad); err != nil {
			t.Fatal(err)
		}
		if bad > 0 {
			t.Errorf("destination shard %d: %d docs lost their TOASTed body", d, bad)
		}
	}
}

// reshardWriter writes to the source shards directly while the task copies
// and streams, one connection per source shard.
type reshardWriter struct {
	writes, failed atomic.Int64
	once           sync.Once
	quit           chan struct{}
	wg             sync.WaitGroup
}

func (w *reshardWriter) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}

func startReshardWriter(t *testing.T, c *pgtest.Cluster, src *config.Database, srcShard func(int64) int) *reshardWriter {
	w := &reshardWriter{quit: make(chan struct{})}
	ctx := context.WithoutCancel(t.Context())
	conns := make([]*pgx.Conn, len(src.Shards))
	for s := range src.Shards {
		conns[s] = reshardConnect(t, ctx, c.DSN(src.Shards[s].Database))
	}
	exec := func(conn *pgx.Conn, sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			w.failed.Add(1)
			var pgErr interface{ SQLState() string }
			if !errors.As(err, &pgErr) || pgErr.SQLState() != wire.UniqueViolation {
				t.Logf("writer: %s: %v", sql, err)
			}
			return
		}
		w.writes.Add(1)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		next := int64(100000)
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			id := rng.Int64N(3000) + 1
			conn := conns[srcShard(id)]
			any := conns[rng.IntN(len(conns))]
			switch i % 12 {
			case 0, 1:
				next++
				exec(conns[srcShard(next)], "INSERT INTO accounts VALUES ($1, $2, 'new')", next, i)
			case 2:
				exec(conn, "UPDATE accounts SET balance = balance + 1, note = NULL WHERE id = $1", id)
			case 3: // moves the row to another shard, mostly
				exec(conn, "UPDATE accounts SET id = id + 10000000 WHERE id = $1", id)
			case 4:
				exec(conn, "DELETE FROM accounts WHERE id = $1", id)
			case 5:
				exec(any, "UPDATE users SET n = n + 1 WHERE name = $1", fmt.Sprint("user", id%500))
			case 6:
				exec(any, "UPDATE users SET name = name || 'x' WHERE name = $1", fmt.Sprint("user", id%500))
			case 7:
				doc := id%20 + 1
				exec(conns[srcShard(doc)], "UPDATE docs SET version = version + 1 WHERE id = $1", doc)
			case 8: // a key move with an unchanged TOASTed column
				doc := id%20 + 1
				exec(conns[srcShard(doc)], "UPDATE docs SET id = id + 1000 WHERE id = $1", doc)
				exec(conns[srcShard(doc)], "UPDATE docs SET id = id - 1000 WHERE id = $1", doc+1000)
			case 9:
				exec(any, "INSERT INTO events (payload) VALUES ('w')")
				for _, conn := range conns { // omni: the same write everywhere
					exec(conn, "UPDATE countries SET name = name || '.' WHERE code = $1", fmt.Sprint("c", id%20+1))
				}
			case 10: // a multi-statement transaction
				tx, err := any.Begin(ctx)
				if err == nil {
					_, err = tx.Exec(ctx, "UPDATE accounts SET balance = balance - 1 WHERE id = $1", id)
					if err == nil {
						_, err = tx.Exec(ctx, "INSERT INTO events (payload) VALUES ('tx')")
					}
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						tx.Rollback(ctx)
					}
				}
				if err == nil {
					w.writes.Add(1)
				}
			case 11:
				if i%120 == 11 { // empties one source's part of scratch
					exec(any, "TRUNCATE scratch")
				} else {
					exec(conns[srcShard(id%200)], "INSERT INTO scratch VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET v = scratch.v + 1", id%200, i)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	t.Cleanup(func() {
		w.stop()
		for _, conn := range conns {
			conn.Close(ctx)
		}
	})
	return w
}

func reshardConnect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	return conn
}

// reconnected is a new connection like conn: a cutover fences its source
// shards (replication/fence.go), which ends every session on them.
func reconnected(t *testing.T, ctx context.Context, conn *pgx.Conn) *pgx.Conn {
	t.Helper()
	return reshardConnect(t, ctx, conn.Config().ConnString())
}

func reshardExec(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.PgConn().Exec(ctx, sql).ReadAll(); err != nil {
		t.Fatalf("%s: %v", strings.TrimSpace(sql)[:min(60, len(strings.TrimSpace(sql)))], err)
	}
}
