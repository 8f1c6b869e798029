package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shardgate/shardgate/config"
)

// BenchmarkShardedRouted measures a statement routed to one of two shards
// (database "routed") against the same statement passed through to a
// one-shard database ("pass"), with the clients on the event loop and on
// goroutines (limits.event_loop), in pgbench's -M prepared (a cached
// named statement: Bind, Execute, Sync) and -M extended (Parse, Bind,
// Describe, Execute, Sync) shapes: issue 13's "routed ≥ 0.95× a one-shard
// pass-through". 8 clients (4 per GOMAXPROCS on 2 cores) share pools of
// 8; client, proxy and PostgreSQL share the machine, so compare ns/op only
// within one run. Every shard is a database of one cluster. handoffs/op
// counts the clients' moves from the loop to a goroutine (connections
// opened at the start included).
//
//	go test -run '^$' -bench ShardedRouted -benchtime 20000x ./integration
func BenchmarkShardedRouted(b *testing.B) {
	cl := cluster(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const rows = 10000
	var dbs strings.Builder
	for _, db := range []string{"pass", "s0", "s1"} {
		if err := cl.CreateDatabase(ctx, db); err != nil {
			b.Fatal(err)
		}
		// Every database has every row: the benchmark measures routing,
		// not which rows a shard holds.
		if err := cl.Exec(ctx, db, fmt.Sprintf(`CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
			INSERT INTO accounts SELECT g, g %% 100 FROM generate_series(1, %d) g`, rows)); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Fprintf(&dbs, `  - name: pass
    shards: [{ host: %[1]s, port: %[2]d, database: pass }]
  - name: routed
    shards:
      - { host: %[1]s, port: %[2]d, database: s0 }
      - { host: %[1]s, port: %[2]d, database: s1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
`, cl.Host, cl.Port)
	for _, loop := range []bool{true, false} {
		cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
pool: { mode: transaction, size: 8 }
limits: { event_loop: %t }
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
%s`, loop, appPassword, cl.User, cl.Password, dbs.String())), "bench.yaml")
		if err != nil {
			b.Fatal(err)
		}
		b.Setenv("SHARDGATE_TEST_EVENT_LOOP", map[bool]string{true: "1", false: "0"}[loop])
		p := startProxyConfig(b, cfg)
		where := map[bool]string{true: "loop", false: "goroutines"}[loop]
		for _, mode := range []struct {
			name string
			mode pgx.QueryExecMode
		}{{"prepared", pgx.QueryExecModeCacheStatement}, {"extended", pgx.QueryExecModeExec}} {
			for _, db := range []string{"pass", "routed"} {
				b.Run(where+"/"+mode.name+"/"+db, func(b *testing.B) {
					offs := p.Listener.HotHandoffs()
					benchKeyed(b, p.AppURL(db), mode.mode, rows)
					// Hand-offs to a goroutine: each costs a goroutine's
					// start and a return to the loop.
					b.ReportMetric(float64(p.Listener.HotHandoffs()-offs)/float64(b.N), "handoffs/op")
				})
			}
		}
	}
}

// benchKeyed runs pgbench -S's statement over 8 connections to url.
func benchKeyed(b *testing.B, url string, mode pgx.QueryExecMode, rows int) {
	ctx := context.Background()
	conns := make(chan *pgx.Conn, 8)
	for range cap(conns) {
		c := connect(b, url)
		var bal int
		if err := c.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", mode, 1).Scan(&bal); err != nil {
			b.Fatal(err)
		}
		conns <- c
	}
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		c := <-conns
		id := int64(0)
		for pb.Next() {
			id = (id+6)%int64(rows) + 1
			var bal int
			if err := c.QueryRow(ctx, "SELECT balance FROM accounts WHERE id = $1", mode, id).Scan(&bal); err != nil {
				b.Error(err)
				return
			}
			if bal != int(id%100) {
				b.Errorf("id %d: balance %d, want %d", id, bal, id%100)
				return
			}
		}
	})
}
