package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
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

// partitionSchema is created on the source shard: events is partitioned by
// range of created, and its 2026 partition again by hash of id, so that
// leaves sit one and two levels below the root the config names. accounts
// is an ordinary sharded table next to it.
const partitionSchema = `
CREATE TABLE events (id bigint, created date, payload text, PRIMARY KEY (id, created)) PARTITION BY RANGE (created);
CREATE TABLE events_2024 PARTITION OF events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01') PARTITION BY HASH (id);
CREATE TABLE events_2026_a PARTITION OF events_2026 FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE events_2026_b PARTITION OF events_2026 FOR VALUES WITH (MODULUS 2, REMAINDER 1);
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
INSERT INTO events SELECT i, date '2024-01-01' + (i % 1000), 'p' || i FROM generate_series(1, 3000) i;
INSERT INTO accounts SELECT i, i % 100 FROM generate_series(1, 1000) i;
`

// partitionLate is a partition created on the source while the stream runs.
const partitionLate = `CREATE TABLE events_2027 PARTITION OF events FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')`

// partitionLeaves are the leaf partitions of events at the end.
var partitionLeaves = []string{"events_2024", "events_2025", "events_2026_a", "events_2026_b", "events_2027"}

func partitionDB(c *pgtest.Cluster, name string, n int) *config.Database {
	db := &config.Database{Name: name}
	for i := range n {
		db.Shards = append(db.Shards, config.Shard{Host: c.Host, Port: c.Port, Database: fmt.Sprintf("%s_%d", name, i)})
	}
	for _, tb := range []string{"events", "accounts"} {
		db.ShardedTables = append(db.ShardedTables, config.ShardedTable{Table: tb, Column: "id", Type: "bigint", Function: "hash"})
	}
	return db
}

// TestReshardPartitionedTable reshards a partitioned table sharded by its
// root's name: each leaf partition is copied and streamed to the same leaf
// on the destination shard its row's key names, including UPDATEs that move
// rows between partitions (a DELETE and an INSERT in pgoutput) and between
// destination shards.
func TestReshardPartitionedTable(t *testing.T) {
	const ndst = 2
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	c := pgtest.New(t, pgtest.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	src := partitionDB(c, "psrc", 1)
	dst := partitionDB(c, "pdst", ndst)
	for _, db := range []*config.Database{src, dst} {
		for _, sh := range db.Shards {
			if err := c.CreateDatabase(ctx, sh.Database); err != nil {
				t.Fatal(err)
			}
		}
	}
	srcConn := reshardConnect(t, ctx, c.DSN(src.Shards[0].Database))
	reshardExec(t, ctx, srcConn, partitionSchema)

	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	task, err := replication.New(src, dst, c.User, c.Password, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := task.SchemaSync(ctx); err != nil {
		t.Fatal(err)
	}
	w := startPartitionWriter(t, c.DSN(src.Shards[0].Database))
	defer w.stop()
	waitWrites(t, ctx, w, 50) // the copy runs under writes
	start := time.Now()
	if err := task.Copy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := task.SchemaSyncPost(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("copy and post-data schema: %v", time.Since(start))

	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	done := make(chan error, 1)
	go func() { done <- task.Stream(sctx) }()
	streamFailed := func() {
		select {
		case err := <-done:
			t.Fatalf("stream ended early: %v", err)
		default:
		}
	}
	waitWrites(t, ctx, w, w.writes.Load()+300)
	streamFailed()
	// A partition created while the stream runs is not copied, but its
	// changes follow the root's rule (not omni) to the destination shards
	// that have it too.
	for _, sh := range dst.Shards {
		conn := reshardConnect(t, ctx, c.DSN(sh.Database))
		reshardExec(t, ctx, conn, partitionLate)
	}
	reshardExec(t, ctx, srcConn, partitionLate+`;
INSERT INTO events SELECT 50000000 + i, date '2027-01-01' + i, 'late' FROM generate_series(1, 300) i;
UPDATE events SET id = id + 1000 WHERE id BETWEEN 50000001 AND 50000100`)
	waitWrites(t, ctx, w, w.writes.Load()+300)
	streamFailed()
	w.stop()
	start = time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
	err = task.WaitCaughtUp(wctx, nil)
	wcancel()
	if err != nil {
		scancel()
		t.Fatalf("%v (stream: %v)", err, <-done)
	}
	t.Logf("caught up in %v", time.Since(start))
	scancel()
	if err := <-done; err != nil {
		t.Fatalf("stream: %v", err)
	}
	t.Logf("writer: %d writes acknowledged, %d rejected", w.writes.Load(), w.failed.Load())

	dstConns := make([]*pgx.Conn, ndst)
	for d := range ndst {
		dstConns[d] = reshardConnect(t, ctx, c.DSN(dst.Shards[d].Database))
	}
	for _, conn := range dstConns {
		rows, _ := conn.Query(ctx, "SELECT relid::regclass::text FROM pg_partition_tree('events') WHERE isleaf ORDER BY 1")
		leaves, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(leaves, partitionLeaves) {
			t.Fatalf("destination partitions of events: %v, want %v", leaves, partitionLeaves)
		}
	}
	// The partitioned root holds no rows of its own and is not copied.
	var rootCopies int
	if err := dstConns[0].QueryRow(ctx, `SELECT count(*) FROM shardgate_reshard.table_copies WHERE table_name IN ('public.events', 'public.events_2026')`).Scan(&rootCopies); err != nil {
		t.Fatal(err)
	}
	if rootCopies != 0 {
		t.Errorf("%d copies of partitioned tables recorded", rootCopies)
	}
	for _, table := range append(slices.Clone(partitionLeaves), "events", "accounts") {
		verifyPartitioned(t, ctx, srcConn, dstConns, table)
	}
}

// waitWrites polls until the writer has acknowledged n writes.
func waitWrites(t *testing.T, ctx context.Context, w *partitionWriter, n int64) {
	t.Helper()
	for w.writes.Load() < n {
		select {
		case <-ctx.Done():
			t.Fatalf("writer made %d of %d writes: %v", w.writes.Load(), n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// verifyPartitioned compares table (a leaf or a root, whose rows are all of
// its leaves') on the source with the union of the destination shards: row
// count and an order-independent checksum, every row on the shard the hash
// of its id names, and no (id, created) on two shards.
func verifyPartitioned(t *testing.T, ctx context.Context, src *pgx.Conn, dsts []*pgx.Conn, table string) {
	t.Helper()
	sum := func(conn *pgx.Conn) (n, h int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, "SELECT count(*), coalesce(sum(hashtext(t::text)::bigint), 0) FROM "+table+" t").Scan(&n, &h); err != nil {
			t.Fatal(err)
		}
		return n, h
	}
	wn, wh := sum(src)
	if wn == 0 {
		t.Fatalf("table %s: no rows on the source", table)
	}
	var gn, gh int64
	seen := map[string]int{}
	for d, conn := range dsts {
		n, h := sum(conn)
		gn, gh = gn+n, gh+h
		rows, _ := conn.Query(ctx, "SELECT id, t::text FROM "+table+" t")
		type row struct {
			id  int64
			key string
		}
		keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.id, &x.key)
			return x, err
		})
		if err != nil {
			t.Fatal(err)
		}
		misplaced := 0
		for _, k := range keys {
			key, _ := sharding.ParseKey(sharding.Bigint, fmt.Sprint(k.id))
			if want, _ := (sharding.Hash{Type: sharding.Bigint, Shards: len(dsts)}).Shard(key); want != d {
				misplaced++
			}
			if prev, ok := seen[k.key]; ok {
				t.Errorf("table %s: row %s on destination shards %d and %d", table, k.key, prev, d)
			}
			seen[k.key] = d
		}
		if misplaced > 0 {
			t.Errorf("table %s: %d of %d rows on destination shard %d belong elsewhere", table, misplaced, len(keys), d)
		}
	}
	if gn != wn || gh != wh {
		t.Errorf("table %s: destination has %d rows (checksum %d), source %d (%d)", table, gn, gh, wn, wh)
	} else {
		t.Logf("table %s: %d rows match", table, gn)
	}
}

// partitionWriter changes events and accounts on the source while the task
// copies and streams.
type partitionWriter struct {
	writes, failed atomic.Int64
	once           sync.Once
	quit           chan struct{}
	wg             sync.WaitGroup
}

func (w *partitionWriter) stop() {
	w.once.Do(func() { close(w.quit) })
	w.wg.Wait()
}

func startPartitionWriter(t *testing.T, dsn string) *partitionWriter {
	w := &partitionWriter{quit: make(chan struct{})}
	ctx := context.WithoutCancel(t.Context())
	conn := reshardConnect(t, ctx, dsn)
	exec := func(sql string, args ...any) {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			w.failed.Add(1)
			var pgErr interface{ SQLState() string }
			if !errors.As(err, &pgErr) || pgErr.SQLState() != wire.UniqueViolation {
				t.Errorf("writer: %s: %v", sql, err)
			}
			return
		}
		w.writes.Add(1)
	}
	// shift moves created to the next range partition, 2026 back to 2024.
	const shift = "CASE WHEN created >= date '2026-01-01' THEN created - 730 ELSE created + 365 END"
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		rng := rand.New(rand.NewPCG(3, 4))
		next := int64(100000)
		for i := 0; ; i++ {
			select {
			case <-w.quit:
				return
			default:
			}
			id := rng.Int64N(3000) + 1
			switch i % 10 {
			case 0, 1:
				next++
				exec("INSERT INTO events VALUES ($1, date '2024-01-01' + $2::int, 'new')", next, rng.IntN(1095))
			case 2:
				exec("UPDATE events SET payload = payload || '.' WHERE id = $1", id)
			case 3: // another range partition, the same destination shard
				exec("UPDATE events SET created = "+shift+" WHERE id = $1", id)
			case 4: // another destination shard, mostly; in 2026 also another leaf
				exec("UPDATE events SET id = id + 10000000 WHERE id = $1", id)
			case 5: // another partition and another shard at once
				exec("UPDATE events SET id = id + 20000000, created = "+shift+" WHERE id = $1", id)
			case 6:
				exec("DELETE FROM events WHERE id = $1", id)
			case 7: // a transaction across tables, moving an accounts row
				tx, err := conn.Begin(ctx)
				if err == nil {
					_, err = tx.Exec(ctx, "UPDATE accounts SET id = id + 1000000 WHERE id = $1", id%1000+1)
					if err == nil {
						_, err = tx.Exec(ctx, "UPDATE events SET created = "+shift+", payload = 'tx' WHERE id = $1", next)
					}
					if err == nil {
						err = tx.Commit(ctx)
					} else {
						tx.Rollback(ctx)
					}
				}
				if err != nil {
					t.Errorf("writer: transaction: %v", err)
				} else {
					w.writes.Add(1)
				}
			case 8:
				exec("UPDATE accounts SET balance = balance + 1 WHERE id = $1", id%1000+1)
			case 9:
				next++
				exec("INSERT INTO accounts VALUES ($1, 0)", next)
			}
			select { // pace the writer on a shared machine
			case <-w.quit:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}
