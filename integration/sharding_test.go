package integration

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shardgate/shardgate/internal/pgtest"
	"github.com/shardgate/shardgate/router/sharding"
	"github.com/shardgate/shardgate/wire"
)

// shardSchema is created on the reference database and on every shard.
const shardSchema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, email text NOT NULL, balance numeric NOT NULL DEFAULT 0, score float8, active bool, created timestamptz);
CREATE TABLE orders (id bigint NOT NULL, account_id bigint NOT NULL, amount numeric NOT NULL, note text);
CREATE TABLE countries (code text PRIMARY KEY, name text NOT NULL);
CREATE TABLE types (id bigint PRIMARY KEY, n numeric, f float8, b bytea, j json, jb jsonb, arr int[], ts timestamptz, iv interval, u uuid, ip inet);
`

// shardedEnv is a reference database and a sharded proxy database with
// the same schema and data.
type shardedEnv struct {
	cl     *pgtest.Cluster
	p      *proxy
	n      int
	ref    *pgx.Conn
	direct []*pgx.Conn // each shard, directly
}

func newShardedEnv(t *testing.T, n int) *shardedEnv {
	t.Helper()
	dbs := []string{"ref"}
	for i := 0; i < n; i++ {
		dbs = append(dbs, fmt.Sprintf("shard%d", i))
	}
	cl := pgtest.New(t, pgtest.Options{Auth: "scram-sha-256", Password: "pg-secret", Settings: map[string]string{"max_prepared_transactions": "50"}})
	ctx := context.Background()
	for _, db := range dbs {
		if err := cl.CreateDatabase(ctx, db); err != nil {
			t.Fatal(err)
		}
		if err := cl.Exec(ctx, db, shardSchema); err != nil {
			t.Fatal(err)
		}
	}
	var shards strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&shards, "      - { host: %s, port: %d, database: shard%d }\n", cl.Host, cl.Port, i)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
admin: { user: admin, password: admin-secret }
pool: { mode: transaction, size: 4, checkout_timeout: 5s }
two_phase_commit_log: %s/2pc.log
users:
  - { name: app, password: %s, server_user: %s, server_password: %s }
databases:
  - name: app
    shards:
%s    sharded_tables:
      - { table: accounts, column: id, type: bigint }
      - { table: orders, column: account_id, type: bigint }
      - { table: types, column: id, type: bigint }
    omni_tables: [countries]
`, t.TempDir(), appPassword, cl.User, cl.Password, shards.String())
	e := &shardedEnv{cl: cl, p: startProxy(t, cfg), n: n}
	e.ref = connect(t, cl.DSN("ref"))
	for i := 0; i < n; i++ {
		e.direct = append(e.direct, connect(t, cl.DSN(fmt.Sprintf("shard%d", i))))
	}
	return e
}

// shardOf is where PostgreSQL hash partitioning puts a bigint key.
func shardOf(_ testing.TB, id int64, n int) int { return hashShard(id, n) }

// hashShard is the shard of n that the proxy's hash names for a bigint
// key; it needs no testing.T, so writer goroutines can use it too.
func hashShard(id int64, n int) int {
	k, err := sharding.ParseKey(sharding.Bigint, strconv.FormatInt(id, 10))
	if err != nil {
		panic(err) // a decimal int64 always parses
	}
	s, err := sharding.Hash{Type: sharding.Bigint, Shards: n}.Shard(k)
	if err != nil {
		panic(err)
	}
	return s
}

// result is what a statement returned, comparable across servers.
type result struct {
	Tag  string
	Cols []string
	Rows [][]string
}

func runQuery(t testing.TB, conn *pgx.Conn, sql string, mode pgx.QueryExecMode, args ...any) (result, error) {
	t.Helper()
	var r result
	rows, err := conn.Query(context.Background(), sql, append([]any{mode}, args...)...)
	if err != nil {
		return r, err
	}
	defer rows.Close()
	for _, f := range rows.FieldDescriptions() {
		r.Cols = append(r.Cols, f.Name+":"+strconv.Itoa(int(f.DataTypeOID)))
	}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return r, err
		}
		var row []string
		for _, v := range vals {
			row = append(row, fmt.Sprint(v))
		}
		r.Rows = append(r.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return r, err
	}
	r.Tag = rows.CommandTag().String()
	return r, nil
}

// same runs sql on the reference database and through the proxy and
// requires identical answers (row order only where ordered).
func (e *shardedEnv) same(t *testing.T, proxyConn *pgx.Conn, sql string, ordered bool, args ...any) {
	t.Helper()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec} {
		want, werr := runQuery(t, e.ref, sql, mode, args...)
		got, gerr := runQuery(t, proxyConn, sql, mode, args...)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%s [%v]: reference error %v, proxy error %v", sql, mode, werr, gerr)
		}
		if werr != nil {
			if sqlstate(werr) != sqlstate(gerr) {
				t.Fatalf("%s [%v]: reference %v, proxy %v", sql, mode, werr, gerr)
			}
			continue
		}
		if !ordered {
			sortRows(want.Rows)
			sortRows(got.Rows)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s [%v]:\nreference %+v\nproxy     %+v", sql, mode, want, got)
		}
	}
}

func sortRows(rows [][]string) {
	sort.Slice(rows, func(i, j int) bool { return strings.Join(rows[i], "\x00") < strings.Join(rows[j], "\x00") })
}

// both runs a write on the reference and through the proxy, comparing tags.
func (e *shardedEnv) both(t *testing.T, proxyConn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	e.same(t, proxyConn, sql+" RETURNING *", false, args...)
}

func TestShardedDifferential(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d shards", n), func(t *testing.T) {
			e := newShardedEnv(t, n)
			ctx := context.Background()
			pc := connect(t, e.p.AppURL("app"))
			write := func(sql string, args ...any) {
				t.Helper()
				for _, c := range []*pgx.Conn{e.ref, pc} {
					if _, err := c.Exec(ctx, sql, args...); err != nil {
						t.Fatalf("%s: %v", sql, err)
					}
				}
			}
			write("INSERT INTO countries VALUES ('fr', 'France'), ('jp', 'Japan'), ('br', 'Brazil')")
			for id := int64(1); id <= 60; id++ {
				write("INSERT INTO accounts (id, email, balance, score, active, created) VALUES ($1, $2, $3, $4, $5, $6)",
					id, fmt.Sprintf("user%d@example.com", id), fmt.Sprintf("%d.%02d", id*7%100, id%100), float64(id%13)/3, id%3 != 0,
					time.Date(2024, 1, 1, int(id), 0, 0, 0, time.UTC))
				write("INSERT INTO orders VALUES ($1, $2, $3, $4)", id*10, id, fmt.Sprint(id%5+1), nil)
			}
			// A multi-row INSERT whose rows belong to different shards.
			write("INSERT INTO accounts (id, email) VALUES (101, 'a@x'), (102, 'b@x'), (103, 'c@x'), (104, 'd@x')")
			// Every row is on the shard the hash names; omni rows everywhere.
			for i, d := range e.direct {
				rows, err := d.Query(ctx, "SELECT id FROM accounts")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var id int64
					rows.Scan(&id)
					if s := shardOf(t, id, n); s != i {
						t.Errorf("account %d on shard %d, hash says %d", id, i, s)
					}
				}
				rows.Close()
				var nc int
				d.QueryRow(ctx, "SELECT count(*) FROM countries").Scan(&nc)
				if nc != 3 {
					t.Errorf("shard %d has %d countries", i, nc)
				}
			}
			queries := []struct {
				sql     string
				ordered bool
				args    []any
			}{
				{"SELECT * FROM accounts WHERE id = 7", true, nil},
				{"SELECT email FROM accounts WHERE id = $1", true, []any{int64(42)}},
				{"SELECT id, email FROM accounts WHERE id IN (1, 2, 3, 50)", false, nil},
				{"SELECT * FROM accounts ORDER BY id", true, nil},
				{"SELECT id, balance FROM accounts ORDER BY balance DESC, id LIMIT 10", true, nil},
				{"SELECT id FROM accounts ORDER BY id LIMIT 5 OFFSET 3", true, nil},
				{"SELECT id, score FROM accounts ORDER BY score NULLS FIRST, id", true, nil},
				{"SELECT email FROM accounts ORDER BY created DESC NULLS LAST LIMIT 3", true, nil},
				{"SELECT count(*) FROM accounts", true, nil},
				{"SELECT count(*), sum(balance), min(balance), max(balance), avg(balance) FROM accounts", true, nil},
				{"SELECT active, count(*), sum(id), avg(balance), max(score) FROM accounts GROUP BY active ORDER BY active", true, nil},
				{"SELECT bool_and(active), bool_or(active) FROM accounts", true, nil},
				{"SELECT DISTINCT active FROM accounts ORDER BY 1", true, nil},
				{"SELECT account_id, sum(amount) FROM orders GROUP BY account_id HAVING sum(amount) > 3 ORDER BY account_id", true, nil},
				{"SELECT * FROM countries ORDER BY code", true, nil},
				{"SELECT a.id, o.amount FROM accounts a JOIN orders o ON o.account_id = a.id WHERE a.id = 9", false, nil},
				{"SELECT 1 + 1", true, nil},
				{"SELECT id FROM accounts WHERE email LIKE 'user1%' ORDER BY id", true, nil},
			}
			for _, q := range queries {
				e.same(t, pc, q.sql, q.ordered, q.args...)
			}
			// Type round trips, by key and merged.
			write(`INSERT INTO types VALUES
				(1, 'NaN', 'NaN', '\x00ff', '{"a": [1, 2]}', '{"b": null}', '{1,NULL,3}', '2024-03-10 01:30:00-05', '1 day 02:00:00', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1/8'),
				(2, '-12345678901234567890.000000001', 'Infinity', '', '[]', '[1, "x"]', '{}', 'infinity', '-3 months', '00000000-0000-0000-0000-000000000000', '::1'),
				(3, NULL, '-Infinity', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
				(4, 0.5, 1e-300, '\x', 'null', '{"k": {"n": 1.50}}', '{-1}', '1999-12-31 23:59:59.999999+00', '0', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '192.168.1.1')`)
			for _, q := range []string{
				"SELECT * FROM types ORDER BY id",
				"SELECT * FROM types WHERE id = 2",
				"SELECT id, n, f FROM types ORDER BY n NULLS FIRST, id",
				"SELECT id, f FROM types ORDER BY f DESC, id",
				"SELECT id, ts FROM types ORDER BY ts, id",
				"SELECT id, u FROM types ORDER BY u DESC NULLS LAST",
				"SELECT min(n), max(n), min(f), max(f), min(ts), max(ts), min(u::text), count(b) FROM types",
			} {
				e.same(t, pc, q, true)
			}
			// Writes: tags add up across shards.
			e.same(t, pc, "UPDATE accounts SET balance = balance + 1 WHERE active", true)
			e.same(t, pc, "UPDATE accounts SET note = 'x' WHERE id = 3", true)
			e.same(t, pc, "DELETE FROM orders WHERE amount = 1", true)
			e.same(t, pc, "UPDATE countries SET name = upper(name) WHERE code = 'fr'", true)
			e.same(t, pc, "SELECT * FROM countries ORDER BY code", true)
			e.same(t, pc, "SELECT count(*), sum(amount) FROM orders", true)
			for i, d := range e.direct {
				var name string
				d.QueryRow(ctx, "SELECT name FROM countries WHERE code = 'fr'").Scan(&name)
				if name != "FRANCE" {
					t.Errorf("omni write missing on shard %d: %q", i, name)
				}
			}
		})
	}
}

func TestShardedTransactions(t *testing.T) {
	e := newShardedEnv(t, 2)
	ctx := context.Background()
	pc := connect(t, e.p.AppURL("app"))
	// Find two ids on different shards.
	a, b := int64(1), int64(2)
	for shardOf(t, b, 2) == shardOf(t, a, 2) {
		b++
	}
	mustExec(t, pc, "BEGIN")
	mustExec(t, pc, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'a')", a))
	mustExec(t, pc, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'b')", b))
	mustExec(t, pc, "ROLLBACK")
	var n int
	if err := pc.QueryRow(ctx, "SELECT count(*) FROM accounts").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after rollback: %d rows (%v)", n, err)
	}
	mustExec(t, pc, "BEGIN")
	mustExec(t, pc, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'a')", a))
	mustExec(t, pc, "SAVEPOINT s1")
	mustExec(t, pc, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'b')", b))
	mustExec(t, pc, "ROLLBACK TO SAVEPOINT s1")
	mustExec(t, pc, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'b2')", b))
	mustExec(t, pc, "COMMIT")
	rows, _ := runQuery(t, pc, "SELECT id, email FROM accounts ORDER BY id", pgx.QueryExecModeSimpleProtocol)
	want := [][]string{{fmt.Sprint(a), "a"}, {fmt.Sprint(b), "b2"}}
	if !reflect.DeepEqual(rows.Rows, want) {
		t.Fatalf("after commit: %v", rows.Rows)
	}
	// Nothing stays prepared on the shards.
	for i, d := range e.direct {
		var np int
		d.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&np)
		if np != 0 {
			t.Errorf("shard %d has %d prepared transactions", i, np)
		}
	}
	// An error aborts the whole transaction.
	mustExec(t, pc, "BEGIN")
	mustExec(t, pc, fmt.Sprintf("UPDATE accounts SET email = 'zz' WHERE id = %d", a))
	if _, err := pc.Exec(ctx, fmt.Sprintf("INSERT INTO accounts (id, email) VALUES (%d, 'dup')", b)); sqlstate(err) != wire.UniqueViolation {
		t.Fatalf("want unique violation, got %v", err)
	}
	if _, err := pc.Exec(ctx, "SELECT 1"); sqlstate(err) != wire.InFailedSQLTransaction {
		t.Fatalf("want 25P02 in aborted transaction, got %v", err)
	}
	mustExec(t, pc, "ROLLBACK")
	var email string
	pc.QueryRow(ctx, "SELECT email FROM accounts WHERE id = $1", a).Scan(&email)
	if email != "a" {
		t.Fatalf("aborted update kept: %q", email)
	}
}
