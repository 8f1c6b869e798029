//go:build linux

package frontend

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/wire"
)

// BenchmarkShardedPrepared measures the proxy's cost of issue 13's routed
// statement: pgbench -S's SELECT as -M prepared sends it (Bind with one
// parameter, Describe portal, Execute, Sync of a statement parsed once),
// through the real Listener on the event loop in transaction pooling, to
// real PostgreSQL. "pass" is a one-shard database, whose statements are
// relayed without planning; "routed" is a database of two shards, where
// the proxy plans every Bind by its sharding key. The client is a bare
// socket in the benchmark's goroutine that sends pre-encoded messages and
// reads the answers without decoding them (as pgbench does), so that
// allocs/op are the proxy's; cpu-us/op is the test process's CPU per
// statement (proxy and client, not PostgreSQL). Compare routed with pass
// within one run: the machine's load moves both.
//
//	go test -run '^$' -bench ShardedPrepared -benchtime 20000x ./frontend
func BenchmarkShardedPrepared(b *testing.B) {
	const rows = 10000
	// Every database has every row: the benchmark measures routing, not
	// which rows a shard holds.
	cl := accountsCluster(b, rows, "pass", "s0", "s1")
	l, port := serveTestListener(b, routedConfig(cl, true))
	for _, db := range []string{"pass", "routed"} {
		b.Run(db, func(b *testing.B) { benchPrepared(b, l, port, db, rows) })
	}
}

// readUntilReady reads the proxy's answers from r up to ReadyForQuery, and
// fails tb at an ErrorResponse.
func readUntilReady(tb testing.TB, r *wire.Reader) {
	tb.Helper()
	for {
		typ, _, body, err := r.Next()
		if err != nil {
			tb.Fatal(err)
		}
		if typ == 'E' {
			tb.Fatal(wire.ParseError(body))
		}
		if typ == 'Z' {
			return
		}
	}
}

func benchPrepared(b *testing.B, l *Listener, port int, db string, rows int) {
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	r := wire.NewReader(conn, 32<<10, 1<<30)
	untilReady := func() { readUntilReady(b, r) }
	enc := func(msgs ...pgproto3.FrontendMessage) []byte {
		var out []byte
		for _, m := range msgs {
			if out, err = m.Encode(out); err != nil {
				b.Fatal(err)
			}
		}
		return out
	}
	conn.Write(enc(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "app", "database": db}}))
	untilReady()
	conn.Write(enc(&pgproto3.Parse{Name: "P0_1", Query: "SELECT balance FROM accounts WHERE id = $1"}, &pgproto3.Sync{}))
	untilReady()
	// One Bind per key, in text as pgbench sends them, encoded before the
	// timer starts.
	trips := make([][]byte, 64)
	for k := range trips {
		id := fmt.Appendf(nil, "%d", k*(rows/len(trips))+1)
		trips[k] = enc(&pgproto3.Bind{PreparedStatement: "P0_1", Parameters: [][]byte{id}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})
	}
	for _, t := range trips {
		conn.Write(t)
		untilReady()
	}
	if l.HotClients() < 1 {
		b.Fatal("the client is not on the event loop")
	}
	before := processCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := conn.Write(trips[i%len(trips)]); err != nil {
			b.Fatal(err)
		}
		untilReady()
	}
	b.StopTimer()
	reportCPUPerOp(b, before)
	conn.Write([]byte{'X', 0, 0, 0, 4})
}

// accountsCluster starts PostgreSQL with databases dbs, each holding
// accounts 1..rows (balance id % 100).
func accountsCluster(tb testing.TB, rows int, dbs ...string) *pgtest.Cluster {
	tb.Helper()
	cl := pgtest.New(tb, pgtest.Options{})
	ctx := context.Background()
	for _, db := range dbs {
		if err := cl.CreateDatabase(ctx, db); err != nil {
			tb.Fatal(err)
		}
		if err := cl.Exec(ctx, db, fmt.Sprintf(`CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL);
			INSERT INTO accounts SELECT g, g %% 100 FROM generate_series(1, %d) g`, rows)); err != nil {
			tb.Fatal(err)
		}
	}
	return cl
}

// routedConfig is the proxy's configuration over cl: database "routed"
// sharded over s0 and s1, and with pass the one-shard database "pass".
func routedConfig(cl *pgtest.Cluster, pass bool) []byte {
	passDB := ""
	if pass {
		passDB = fmt.Sprintf("\n  - name: pass\n    shards: [{ host: %s, port: %d, database: pass }]", cl.Host, cl.Port)
	}
	return fmt.Appendf(nil, `listen: 127.0.0.1:0
pool: { mode: transaction, size: 2, checkout_timeout: 5s }
limits: { event_loop: true }
users:
  - { name: app, auth_type: trust, server_user: %[1]s, server_password: "%[2]s" }
databases:%[5]s
  - name: routed
    shards:
      - { host: %[3]s, port: %[4]d, database: s0 }
      - { host: %[3]s, port: %[4]d, database: s1 }
    sharded_tables:
      - { table: accounts, column: id, type: bigint }
`, cl.User, cl.Password, cl.Host, cl.Port, passDB)
}

// TestShardedPreparedReuse checks the routed prepared path's reuse of a
// portal (the client's sparePortal) and of a batch's buffer across batches against real
// PostgreSQL: statements bound again and again with other keys, one at a
// time (pgbench -M prepared) and several in one batch (a pipeline), a
// Parse inside a batch, a transaction block, a portal fetched with a row
// limit and a Bind that fails, each answer checked against the row.
func TestShardedPreparedReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx := t.Context()
	cl := accountsCluster(t, 1000, "s0", "s1")
	_, port := serveTestListener(t, routedConfig(cl, false))
	conn, err := pgconn.Connect(ctx, fmt.Sprintf("postgres://app@127.0.0.1:%d/routed?sslmode=disable", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const q = "SELECT balance, id FROM accounts WHERE id = $1"
	if _, err := conn.Prepare(ctx, "s", q, nil); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T, rows [][][]byte, id int) {
		t.Helper()
		want := fmt.Sprintf("%d %d", id%100, id)
		if len(rows) != 1 || fmt.Sprintf("%s %s", rows[0][0], rows[0][1]) != want {
			t.Fatalf("id %d: rows %q, want one %q", id, rows, want)
		}
	}
	one := func(t *testing.T, id int) {
		t.Helper()
		res := conn.ExecPrepared(ctx, "s", [][]byte{fmt.Appendf(nil, "%d", id)}, nil, nil).Read()
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		check(t, res.Rows, id)
	}
	t.Run("one at a time", func(t *testing.T) {
		for id := 1; id <= 200; id++ {
			one(t, id)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		for round := range 20 {
			b := &pgconn.Batch{}
			ids := []int{round*3 + 1, round*3 + 2, 900 - round}
			for _, id := range ids {
				b.ExecPrepared("s", [][]byte{fmt.Appendf(nil, "%d", id)}, nil, nil)
			}
			if round%4 == 0 {
				// A Parse in the batch: its text lives in the batch's
				// buffer, which must then not take the next batch.
				b.ExecParams("SELECT balance, id FROM accounts WHERE id = $1 AND balance >= 0",
					[][]byte{[]byte("7")}, nil, nil, nil)
				ids = append(ids, 7)
			}
			results, err := conn.ExecBatch(ctx, b).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			for k, res := range results {
				check(t, res.Rows, ids[k])
			}
			one(t, 500+round)
		}
	})
	t.Run("transaction block", func(t *testing.T) {
		if _, err := conn.Exec(ctx, "BEGIN").ReadAll(); err != nil {
			t.Fatal(err)
		}
		for id := 10; id < 20; id++ {
			one(t, id)
		}
		if _, err := conn.Exec(ctx, "COMMIT").ReadAll(); err != nil {
			t.Fatal(err)
		}
		one(t, 21)
	})
	t.Run("failed bind", func(t *testing.T) {
		res := conn.ExecPrepared(ctx, "s", [][]byte{[]byte("not a number")}, nil, nil).Read()
		if res.Err == nil {
			t.Fatal("a Bind of a bad key succeeded")
		}
		one(t, 33)
		res = conn.ExecPrepared(ctx, "s", [][]byte{[]byte("1"), []byte("2")}, nil, nil).Read()
		if res.Err == nil {
			t.Fatal("a Bind of two parameters for one succeeded")
		}
		one(t, 34)
	})
}
