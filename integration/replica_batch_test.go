package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shardgate/shardgate/internal/pgtest"
)

// TestReplicaBatchWithWrite: a pipeline whose first statement reads and
// a later one writes, under one Sync (pgx's SendBatch), runs as one
// implicit transaction on the primary, as PostgreSQL runs it: the read
// must not take a replica's server that the write then meets read-only
// (25006). A batch of reads alone still goes to replicas. Every pgx mode,
// on a one-shard and a sharded database.
func TestReplicaBatchWithWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, _, yaml := replicatedDatabases(t)
	p := startProxy(t, yaml)
	next := 100
	for _, db := range []string{"app", "sharded"} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
			pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
			t.Run(fmt.Sprintf("%s/%v", db, mode), func(t *testing.T) {
				c := connectConfig(t, p.AppURL(db), mode, nil)
				for range 3 {
					next++
					b := &pgx.Batch{}
					b.Queue("SELECT count(*) FROM items WHERE id = $1", next)
					b.Queue("INSERT INTO items VALUES ($1, 'b')", next)
					b.Queue("SELECT pg_is_in_recovery(), v FROM items WHERE id = $1", next)
					res := c.SendBatch(ctx, b)
					var n int
					if err := res.QueryRow().Scan(&n); err != nil || n != 0 {
						t.Fatalf("batch read: %d, %s", n, errText(err))
					}
					if _, err := res.Exec(); err != nil {
						t.Fatalf("batch write after a read: %s", errText(err))
					}
					var rec bool
					var v string
					if err := res.QueryRow().Scan(&rec, &v); err != nil || rec || v != "b" {
						t.Fatalf("batch read after the write: in recovery %v, %q, %s", rec, v, errText(err))
					}
					if err := res.Close(); err != nil {
						t.Fatal(err)
					}
				}
				// Two transactions in one pipeline (two Syncs, one
				// write): the proxy sends them on, in one write, to the
				// server it took for the first.
				next++
				pl := c.PgConn().StartPipeline(ctx)
				pl.SendQueryParams("SELECT count(*) FROM items WHERE id = $1", [][]byte{[]byte(fmt.Sprint(next))}, nil, nil, nil)
				pl.SendPipelineSync()
				pl.SendQueryParams("INSERT INTO items VALUES ($1, 'p')", [][]byte{[]byte(fmt.Sprint(next))}, nil, nil, nil)
				pl.SendPipelineSync()
				if err := pl.Flush(); err != nil {
					t.Fatal(err)
				}
				for i := range 4 {
					r, err := pl.GetResults()
					if err != nil {
						t.Fatalf("pipeline result %d: %s", i, errText(err))
					}
					if rr, ok := r.(*pgconn.ResultReader); ok {
						if _, err := rr.Close(); err != nil {
							t.Fatalf("pipeline result %d: %s", i, errText(err))
						}
					}
				}
				if err := pl.Close(); err != nil {
					t.Fatalf("pipeline: %s", errText(err))
				}
				if db == "app" {
					// A read-only transaction pipelined whole (one write,
					// one Sync) runs on a replica; the same with a plain
					// BEGIN on the primary.
					for _, begin := range []string{"BEGIN READ ONLY", "BEGIN"} {
						pl := c.PgConn().StartPipeline(ctx)
						for _, sql := range []string{begin, "SELECT pg_is_in_recovery()::text", "COMMIT"} {
							pl.SendQueryParams(sql, nil, nil, nil, nil)
						}
						pl.SendPipelineSync()
						if err := pl.Flush(); err != nil {
							t.Fatal(err)
						}
						var got string
						for i := range 4 {
							r, err := pl.GetResults()
							if err != nil {
								t.Fatalf("%s pipeline, result %d: %s", begin, i, errText(err))
							}
							if rr, ok := r.(*pgconn.ResultReader); ok {
								res := rr.Read()
								if res.Err != nil {
									t.Fatalf("%s pipeline, result %d: %s", begin, i, errText(res.Err))
								}
								if i == 1 && len(res.Rows) == 1 {
									got = string(res.Rows[0][0])
								}
							}
						}
						if err := pl.Close(); err != nil {
							t.Fatalf("%s pipeline: %s", begin, errText(err))
						}
						if want := map[string]string{"BEGIN READ ONLY": "true", "BEGIN": "false"}[begin]; got != want {
							t.Fatalf("%s; SELECT pg_is_in_recovery(); COMMIT pipelined: in recovery %q, want %s", begin, got, want)
						}
					}
				}
				// A batch of reads over both shards of the sharded
				// database (keys 1 to 8): an implicit transaction, on
				// replicas, which commits on each shard on its own. A
				// row whether or not the replica has the key's yet.
				b := &pgx.Batch{}
				for k := range 8 {
					b.Queue("SELECT pg_is_in_recovery(), current_database()::text, count(*) FROM items WHERE id = $1", k+1)
				}
				res := c.SendBatch(ctx, b)
				dbs := map[string]bool{}
				for k := range 8 {
					var r bool
					var on string
					var n int
					if err := res.QueryRow().Scan(&r, &on, &n); err != nil {
						t.Fatalf("read-only batch, read %d: %s", k, errText(err))
					}
					dbs[on] = true
					if !r {
						t.Fatalf("read-only batch, read %d ran on a primary, want a replica", k)
					}
				}
				if db == "sharded" && len(dbs) != 2 {
					t.Fatalf("the read-only batch read from %v, want both shards", dbs)
				}
				if err := res.Close(); err != nil {
					t.Fatalf("read-only batch: %s", errText(err))
				}
			})
		}
	}
}

// replicatedDatabases starts a primary holding databases app, shard0 and
// shard1 with a streaming replica, each with an empty table items (id
// bigint primary key, v text), and returns the configuration of a proxy
// (transaction pooling) that serves them as database "app" (one shard)
// and database "sharded" (two shards, items sharded by id), every shard
// with the replica.
func replicatedDatabases(t *testing.T) (primary, replica *pgtest.Cluster, yaml string) {
	t.Helper()
	primary, replica = withReplica(t, "app", "shard0", "shard1")
	for _, db := range []string{"app", "shard0", "shard1"} {
		c := simpleConn(t, primary.DSN(db))
		mustExec(t, c, "CREATE TABLE items (id bigint PRIMARY KEY, v text)")
	}
	return primary, replica, fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 5s, connect_timeout: 5s }
load_balancing: { health_check_interval: 200ms, health_check_timeout: 1s, ban_time: 500ms }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
      - { host: %[5]s, port: %[6]d, database: app, replicas: [{ host: %[5]s, port: %[7]d }] }
  - name: sharded
    shards:
      - { host: %[5]s, port: %[6]d, database: shard0, replicas: [{ host: %[5]s, port: %[7]d }] }
      - { host: %[5]s, port: %[6]d, database: shard1, replicas: [{ host: %[5]s, port: %[7]d }] }
    sharded_tables:
      - { table: items, column: id, type: bigint }
`, t.TempDir(), appPassword, primary.User, primary.Password, primary.Host, primary.Port, replica.Port)
}
