package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/replication"
)

// TestReshardChecks: what would stop a task later is reported by Copy
// before it creates anything, every problem naming its shard and table:
// wal_level, no free replication slot, a user that is not a superuser, a
// table without a primary key, a source shard whose table has other
// columns, a destination table that is not empty.
func TestReshardChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	good := pgtest.New(t, pgtest.Options{Settings: map[string]string{
		"wal_level": "logical", "max_replication_slots": "10", "max_wal_senders": "10",
	}})
	db := func(c *pgtest.Cluster, name string, shards ...string) *config.Database {
		d := &config.Database{Name: name}
		for _, s := range shards {
			d.Shards = append(d.Shards, config.Shard{Host: c.Host, Port: c.Port, Database: s})
		}
		d.ShardedTables = []config.ShardedTable{{Table: "accounts", Column: "id", Type: "bigint", Function: "hash"}}
		return d
	}
	create := func(t *testing.T, c *pgtest.Cluster, names ...string) {
		for _, n := range names {
			if err := c.CreateDatabase(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	// copyErr runs SchemaSync and Copy and returns Copy's error, checking
	// that the failed Copy left no slot on the sources.
	copyErr := func(t *testing.T, src, dst *config.Database, user, password string, beforeCopy func()) string {
		t.Helper()
		task, err := replication.New(src, dst, user, password, log)
		if err != nil {
			t.Fatal(err)
		}
		_ = task.SchemaSync(ctx) // may fail too (a weak user); Copy's checks must say why
		if beforeCopy != nil {
			beforeCopy()
		}
		err = task.Copy(ctx)
		if err == nil {
			t.Fatalf("Copy %s → %s succeeded", src.Name, dst.Name)
		}
		for _, sh := range src.Shards {
			if sh.Port != good.Port {
				continue // the subtest checks its own cluster
			}
			conn := reshardConnect(t, ctx, good.DSN(sh.Database))
			if n := countSlots(t, ctx, conn); n != 0 {
				t.Errorf("%s: %d slots after the failed Copy", sh.Database, n)
			}
		}
		return err.Error()
	}
	expect := func(t *testing.T, what, msg string, wants ...string) {
		t.Helper()
		for _, w := range wants {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: the error does not say %q:\n%s", what, w, msg)
			}
		}
	}

	t.Run("schema", func(t *testing.T) {
		create(t, good, "s_0", "s_1", "d_0", "d_1")
		reshardExec(t, ctx, reshardConnect(t, ctx, good.DSN("s_0")), `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance int);
CREATE TABLE logs (line text)`)
		reshardExec(t, ctx, reshardConnect(t, ctx, good.DSN("s_1")), `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint, extra text);
CREATE TABLE logs (line text)`)
		msg := copyErr(t, db(good, "s", "s_0", "s_1"), db(good, "d", "d_0", "d_1"), good.User, good.Password, nil)
		expect(t, "schema", msg,
			`source shard 1 (`, `table public.accounts has columns (id bigint, balance bigint, extra text), but on source shard 0`,
			`table public.logs has no primary key`)
	})

	t.Run("destination not empty", func(t *testing.T) {
		create(t, good, "e_0", "f_0", "f_1")
		reshardExec(t, ctx, reshardConnect(t, ctx, good.DSN("e_0")), `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int);
INSERT INTO accounts VALUES (1, 1)`)
		msg := copyErr(t, db(good, "e", "e_0"), db(good, "f", "f_0", "f_1"), good.User, good.Password, func() {
			reshardExec(t, ctx, reshardConnect(t, ctx, good.DSN("f_1")), `INSERT INTO accounts VALUES (7, 7)`)
		})
		expect(t, "destination not empty", msg, `destination shard 1 (`, `table public.accounts is not empty`)
	})

	t.Run("not a superuser", func(t *testing.T) {
		create(t, good, "w_0", "x_0", "x_1")
		if err := good.CreateRole(ctx, "weak", "weak-secret", false); err != nil {
			t.Fatal(err)
		}
		reshardExec(t, ctx, reshardConnect(t, ctx, good.DSN("w_0")), `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int)`)
		msg := copyErr(t, db(good, "w", "w_0"), db(good, "x", "x_0", "x_1"), "weak", "weak-secret", nil)
		expect(t, "not a superuser", msg, `source shard 0 (`, `user "weak" is not a superuser`, `destination shard 1 (`)
	})

	t.Run("no free slot", func(t *testing.T) {
		full := pgtest.New(t, pgtest.Options{Settings: map[string]string{
			"wal_level": "logical", "max_replication_slots": "1", "max_wal_senders": "10",
		}})
		create(t, full, "p_0")
		create(t, good, "q_0", "q_1")
		conn := reshardConnect(t, ctx, full.DSN("p_0"))
		reshardExec(t, ctx, conn, `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int)`)
		reshardExec(t, ctx, conn, `SELECT pg_create_logical_replication_slot('someone_else', 'pgoutput')`)
		src := db(full, "p", "p_0")
		msg := copyErr(t, src, db(good, "q", "q_0", "q_1"), full.User, full.Password, nil)
		expect(t, "no free slot", msg, `source shard 0 (`, `no free replication slot`)
		if n := countSlots(t, ctx, conn); n != 1 {
			t.Errorf("%d slots on the full source, want only the other one", n)
		}
	})

	t.Run("wal_level", func(t *testing.T) {
		plain := pgtest.New(t, pgtest.Options{Settings: map[string]string{"wal_level": "replica"}})
		create(t, plain, "r_0")
		create(t, good, "t_0", "t_1")
		reshardExec(t, ctx, reshardConnect(t, ctx, plain.DSN("r_0")), `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int)`)
		msg := copyErr(t, db(plain, "r", "r_0"), db(good, "t", "t_0", "t_1"), plain.User, plain.Password, nil)
		expect(t, "wal_level", msg, `source shard 0 (`, `resharding needs wal_level = logical`)
	})
}
