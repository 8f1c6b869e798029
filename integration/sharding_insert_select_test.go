package integration

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// insertSelectSetup adds to the schema of a shardedEnv what the INSERT …
// SELECT tests need: an integer column for assignment casts and a CHECK
// constraint some rows violate.
const insertSelectSetup = `ALTER TABLE accounts ADD COLUMN rank int, ADD CONSTRAINT balance_limit CHECK (balance < 1000000)`

// insertSelectScript is run statement by statement on the reference
// database and through the proxy; every answer (tag, rows, error,
// transaction status) must be the same.
var insertSelectScript = []struct {
	sql  string
	args []any
}{
	// Loads from functions, with and without a column list.
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'user' || g || '@x' FROM generate_series(1, 2000) g"},
	{sql: "INSERT INTO accounts (email, id, balance) SELECT 'r' || g, g, g * 1.5 FROM generate_series(2001, 2100) g"},
	{sql: "INSERT INTO accounts SELECT g, 'n' || g, 2.5, g / 3.0, g % 2 = 0, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour', g FROM generate_series(2101, 2200) g"},
	// Assignment casts as INSERT … SELECT applies them: char(4) loses its
	// blanks in text, 2201.5 rounds into an integer, untyped literals
	// become the columns' types.
	{sql: "INSERT INTO accounts (id, email, balance, score, created, rank) SELECT g, 'ab  '::char(4), '7.25', 1.5::numeric, '2024-03-01 10:00:00+02', g + 0.5 FROM generate_series(2201, 2220) g"},
	{sql: "INSERT INTO accounts (id, email, score) SELECT g, 'defaults', NULL FROM generate_series(2221, 2230) g"},
	{sql: "SELECT count(*), sum(balance), sum(rank), min(email), max(created) FROM accounts"},
	// Values keep their exact value when the session's output settings
	// would round them (floats) or make them ambiguous (dates).
	{sql: "SET extra_float_digits = 0"},
	{sql: "SET DateStyle = 'SQL, DMY'"},
	{sql: "SET TimeZone = 'Asia/Kolkata'"},
	{sql: "INSERT INTO types (id, n, f, b, j, jb, arr, ts, iv, u, ip) SELECT g, g / 7.0, 1.0 / g::float8 / 3, decode(md5(g::text), 'hex'), json_build_object('g', g, 's', 'it''s \\ \"q\"'), jsonb_build_array(g, NULL), ARRAY[g, NULL, -g], timestamptz '2024-03-10 01:30:00-05' + g * interval '1 minute 0.123456 second', g * interval '1 day 1.5 hour', md5(g::text)::uuid, ('10.0.' || g || '.1/24')::inet FROM generate_series(1, 50) g"},
	{sql: "SELECT f::text, ts::text, iv::text FROM types WHERE id = 3"},
	{sql: "RESET extra_float_digits"},
	{sql: "RESET DateStyle"},
	{sql: "RESET TimeZone"},
	// From an omni table (one shard reads, both get rows).
	{sql: "INSERT INTO accounts (id, email) SELECT 3000 + row_number() OVER (ORDER BY code), name FROM countries"},
	// From another sharded table: rows move between tables and shards.
	{sql: "INSERT INTO orders (id, account_id, amount, note) SELECT g, g % 50 + 1, g / 4.0, CASE WHEN g % 3 = 0 THEN 'n' || g END FROM generate_series(1, 500) g"},
	{sql: "INSERT INTO accounts (id, email, balance) SELECT id + 10000, 'order of ' || account_id, amount FROM orders"},
	// From the table itself: the SELECT does not see the rows it inserts.
	{sql: "INSERT INTO accounts (id, email, balance, rank) SELECT id + 100000, email, balance, rank FROM accounts"},
	{sql: "SELECT count(*) FROM accounts"},
	// A SELECT whose shards' rows are merged.
	{sql: "INSERT INTO accounts (id, email, balance) SELECT account_id + 300000, 'sum', sum(amount) FROM orders GROUP BY account_id"},
	{sql: "INSERT INTO accounts (id, email) SELECT id + 4000000, email FROM accounts ORDER BY id DESC LIMIT 7"},
	// Parameters, typed by the INSERT.
	{sql: "INSERT INTO accounts (id, email, score) SELECT g, $1, $2 FROM generate_series($3::int, $4::int) g", args: []any{"p", 12.5, 500000, 500050}},
	{sql: "INSERT INTO accounts (id, email) SELECT id + 1, email FROM accounts WHERE id = $1", args: []any{int64(500050)}},
	// A SELECT without rows, and VALUES that are a query of their own.
	{sql: "INSERT INTO accounts (id, email) SELECT id, email FROM accounts WHERE email = 'nobody'"},
	{sql: "INSERT INTO accounts (id, email) VALUES (950001, 'v1'), (950002, 'v2'), (950003, 'v3') ORDER BY 1 DESC LIMIT 2"},
	// ON CONFLICT DO NOTHING on each shard.
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'dup' FROM generate_series(2195, 2240) g ON CONFLICT (id) DO NOTHING"},
	// Failures leave nothing behind: a duplicate key, a CHECK violation
	// and a division by zero after rows were already sent to every shard.
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'x' FROM generate_series(600000, 600100) g UNION ALL SELECT 7, 'dup'"},
	{sql: "INSERT INTO accounts (id, email, balance) SELECT g, repeat('x', 60), CASE WHEN g = 729999 THEN 2000000 ELSE 0 END FROM generate_series(700000, 730000) g"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, repeat('y', 60) FROM generate_series(800000, 830000) g WHERE 1 / (830000 - g) >= 0"},
	{sql: "INSERT INTO accounts (id, email) SELECT 'abc', 'x'"},
	{sql: "INSERT INTO accounts (id, email, created) SELECT g, 'x', 'x' || g FROM generate_series(1, 2) g"},
	{sql: "INSERT INTO accounts (id) SELECT 1, 2"},
	{sql: "INSERT INTO accounts (id, email) SELECT NULL, 'x'"},
	{sql: "SELECT count(*), max(id) FROM accounts"},
	// Transactions: rolled back, and committed around a failure undone by
	// ROLLBACK TO.
	{sql: "BEGIN"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, 't' FROM generate_series(900000, 900999) g"},
	{sql: "SELECT count(*) FROM accounts WHERE id >= 900000"},
	{sql: "ROLLBACK"},
	{sql: "SELECT count(*) FROM accounts WHERE id >= 900000"},
	{sql: "BEGIN"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, 't' FROM generate_series(910000, 910099) g"},
	{sql: "SAVEPOINT s"},
	{sql: "INSERT INTO accounts (id, email) SELECT g + 1000, 't' FROM generate_series(910000, 910099) g UNION ALL SELECT 7, 'dup'"},
	{sql: "SELECT 1"},
	{sql: "ROLLBACK TO SAVEPOINT s"},
	{sql: "INSERT INTO accounts (id, email) SELECT id + 10000, email FROM accounts WHERE id >= 910000"},
	{sql: "COMMIT"},
	{sql: "BEGIN"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'u' FROM generate_series(930000, 930010) g"},
	{sql: "INSERT INTO accounts (id, email) SELECT 5, 'dup'"},
	{sql: "SELECT 1"},
	{sql: "ROLLBACK"},
	{sql: "BEGIN"},
	{sql: "SAVEPOINT a"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'a' FROM generate_series(940000, 940020) g"},
	{sql: "ROLLBACK TO SAVEPOINT a"},
	{sql: "INSERT INTO accounts (id, email) SELECT g, 'b' FROM generate_series(940010, 940030) g"},
	{sql: "COMMIT"},
	{sql: "SELECT count(*), sum(id), min(email) FROM accounts WHERE id >= 900000"},
}

// TestShardedInsertSelect: INSERT … SELECT into a sharded table answers as
// one PostgreSQL database does, in every pgx exec mode; every row lands on
// its key's shard, and nothing stays prepared.
func TestShardedInsertSelect(t *testing.T) {
	e := newShardedEnv(t, 2)
	ctx := context.Background()
	for _, db := range []string{"ref", "shard0", "shard1"} {
		if err := e.cl.Exec(ctx, db, insertSelectSetup); err != nil {
			t.Fatal(err)
		}
	}
	pc := connect(t, e.p.AppURL("app"))
	for _, c := range []*pgx.Conn{e.ref, pc} {
		mustExec(t, c, "INSERT INTO countries VALUES ('fr', 'France'), ('jp', 'Japan'), ('br', 'Brazil')")
	}
	for _, mode := range execModes {
		t.Run(mode.String(), func(t *testing.T) {
			e.ref.Exec(ctx, "ROLLBACK; RESET ALL") // after a failed mode
			for _, c := range append([]*pgx.Conn{e.ref}, e.direct...) {
				mustExec(t, c, "TRUNCATE accounts, orders, types")
			}
			pc := connect(t, e.p.AppURL("app"))
			for _, st := range insertSelectScript {
				want := scriptStmt(e.ref, mode, st.sql, st.args...)
				got := scriptStmt(pc, mode, st.sql, st.args...)
				if got != want {
					t.Fatalf("%s:\n got  %s\n want %s", abbrev(st.sql, 100), got, want)
				}
			}
			e.sameTables(t, pc)
		})
	}
}

// scriptStmt runs one statement and describes its answer.
func scriptStmt(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
	if err == nil {
		for rows.Next() {
			vals, verr := rows.Values()
			if verr != nil {
				err = verr
				break
			}
			fmt.Fprintf(&out, "%v ", vals)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		return fmt.Sprintf("error %s, tx %c", errKey(err), conn.PgConn().TxStatus())
	}
	return fmt.Sprintf("%s rows %s, tx %c", rows.CommandTag(), out.String(), conn.PgConn().TxStatus())
}

// sameTables checks that the proxy's accounts, orders and types hold exactly the
// reference's rows, each on its key's shard, and that no shard keeps a
// prepared transaction.
func (e *shardedEnv) sameTables(t *testing.T, pc *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []struct{ table, key string }{{"accounts", "id"}, {"orders", "account_id"}, {"types", "id"}} {
		sql := fmt.Sprintf("SELECT * FROM %s ORDER BY %s, id", q.table, q.key)
		want, err := runQuery(t, e.ref, sql, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		got, err := runQuery(t, pc, sql, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: the proxy's %d rows differ from the reference's %d", q.table, len(got.Rows), len(want.Rows))
		}
		total := 0
		for i, d := range e.direct {
			rows, err := d.Query(ctx, fmt.Sprintf("SELECT %s FROM %s", q.key, q.table))
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var k int64
				if err := rows.Scan(&k); err != nil {
					t.Fatal(err)
				}
				total++
				if s := shardOf(t, k, e.n); s != i {
					t.Fatalf("%s key %d on shard %d, want %d", q.table, k, i, s)
				}
			}
			rows.Close()
		}
		if total != len(want.Rows) {
			t.Fatalf("%s: %d rows on the shards, %d in the reference", q.table, total, len(want.Rows))
		}
	}
	for i, d := range e.direct {
		var n int
		if err := d.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()").Scan(&n); err != nil || n != 0 {
			t.Fatalf("shard %d: %d prepared transactions (%v)", i, n, err)
		}
	}
}

// TestShardedInsertSelectLoad loads 100000 rows the way test data is
// loaded, then doubles them from the table itself, with memory bounded
// by batches (the rows never sit in the proxy all at once).
func TestShardedInsertSelectLoad(t *testing.T) {
	e := newShardedEnv(t, 2)
	pc := connect(t, e.p.AppURL("app"))
	for _, st := range []struct{ sql, tag string }{
		{"INSERT INTO accounts (id, email, balance) SELECT g, 'user' || g || '@example.com', g % 1000 FROM generate_series(1, 100000) g", "INSERT 0 100000"},
		{"INSERT INTO accounts (id, email, balance, score) SELECT id + 100000, email, balance, id / 7.0 FROM accounts", "INSERT 0 100000"},
	} {
		start := time.Now()
		tag, err := pc.Exec(context.Background(), st.sql)
		if err != nil || tag.String() != st.tag {
			t.Fatalf("%s: %v %v", st.sql, tag, err)
		}
		through := time.Since(start)
		start = time.Now()
		if _, err := e.ref.Exec(context.Background(), st.sql); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %v through the proxy, %v on one server", tag, through, time.Since(start))
	}
	e.same(t, pc, "SELECT count(*), sum(id), sum(balance), count(score), max(email) FROM accounts", true)
	e.sameTables(t, pc)
}

// TestShardedInsertSelectRefused: what the proxy cannot run exactly is
// refused with 0A000 and a hint, and leaves the session usable.
func TestShardedInsertSelectRefused(t *testing.T) {
	e := newShardedEnv(t, 2)
	pc := connect(t, e.p.AppURL("app"))
	for _, sql := range []string{
		"INSERT INTO accounts (id, email) SELECT g, 'x' FROM generate_series(1, 3) g RETURNING id",
		"INSERT INTO accounts (id, email) SELECT g, 'x' FROM generate_series(1, 3) g ON CONFLICT (id) DO UPDATE SET email = 'y'",
		"INSERT INTO accounts (email) SELECT 'x'",
		"INSERT INTO accounts (id, email) SELECT 1.5, 'x'",
		"INSERT INTO accounts SELECT FROM generate_series(1, 3)",
		"WITH d AS (DELETE FROM orders RETURNING account_id) INSERT INTO accounts (id, email) SELECT account_id, 'x' FROM d",
	} {
		for _, mode := range execModes {
			_, err := pc.Exec(context.Background(), sql, mode)
			pe := pgErr(err)
			if pe == nil || pe.Code != "0A000" || pe.Hint == "" {
				t.Fatalf("%s [%v]: %v, want 0A000 with a hint", sql, mode, err)
			}
		}
	}
	e.same(t, pc, "SELECT count(*) FROM accounts", true)
	// A hint routes the statement to one shard as it is.
	if _, err := pc.Exec(context.Background(), "/* shard: 0 */ INSERT INTO accounts (id, email) SELECT 2, 'x' RETURNING id"); err != nil {
		t.Fatal(err)
	}
}

// insertSelectDiffScripts run INSERT … SELECT through the differential
// harness: every runner (pgx exec modes, a row-limited Execute after
// Describe of the portal), both pool modes, against one PostgreSQL, a
// one-shard and a two-shard database. They leave the data as they found
// it, and every other statement runs on one shard: the row-limited runner
// cannot fetch a cross-shard result (an INSERT … SELECT has none).
func insertSelectDiffScripts() []diffScript {
	// deletes removes ids from through to, one statement per shard of two.
	deletes := func(from, to int64) []string {
		var ids [2][]string
		for id := from; id <= to; id++ {
			s := hashShard(id, 2)
			ids[s] = append(ids[s], strconv.FormatInt(id, 10))
		}
		return []string{
			"DELETE FROM accounts WHERE id IN (" + strings.Join(ids[0], ", ") + ")",
			"DELETE FROM accounts WHERE id IN (" + strings.Join(ids[1], ", ") + ")",
		}
	}
	committed := []string{
		"INSERT INTO accounts (email, id) SELECT 'c' || g, g FROM generate_series(200, 260) g",
		"SELECT email FROM accounts WHERE id = 230",
		"INSERT INTO accounts (id, email) SELECT g, 'dup' FROM generate_series(255, 265) g ON CONFLICT (id) DO NOTHING",
		"SELECT email FROM accounts WHERE id = 255",
		"SELECT email FROM accounts WHERE id = 265",
		"INSERT INTO accounts SELECT id + 1000, upper(email) FROM accounts WHERE email LIKE 'c22_'",
		"SELECT email FROM accounts WHERE id = 1229",
	}
	committed = append(append(committed, deletes(200, 265)...), deletes(1200, 1229)...)
	return []diffScript{
		{name: "INSERT … SELECT rolled back", stmts: []string{
			"BEGIN",
			"INSERT INTO accounts (id, email) SELECT g, 'g' || g FROM generate_series(100, 140) g",
			"SELECT email FROM accounts WHERE id = 120",
			"INSERT INTO accounts SELECT id + 1000, email FROM accounts",
			"SELECT email FROM accounts WHERE id = 1120",
			"SELECT email FROM accounts WHERE id = 1003",
			"ROLLBACK",
			"SELECT email FROM accounts WHERE id = 120",
		}},
		{name: "INSERT … SELECT committed", stmts: committed},
		{name: "INSERT … SELECT errors", stmts: []string{
			"INSERT INTO accounts (id, email) SELECT g, 'x' FROM generate_series(300, 320) g UNION ALL SELECT 3, 'dup'",
			"SELECT count(*) FROM accounts WHERE id = 310",
			"INSERT INTO accounts (id, email) SELECT 'x', 'y'",
			"INSERT INTO accounts (id) SELECT 1, 2",
			"INSERT INTO accounts (id, email) SELECT NULL, 'n'",
			"INSERT INTO accounts (id, email) SELECT g, 'z' FROM generate_series(330, 340) g WHERE 1 / (g - 340) < 1",
			"SELECT count(*) FROM accounts WHERE id = 331",
			"BEGIN",
			"INSERT INTO accounts (id, email) SELECT g, 'x' FROM generate_series(300, 305) g",
			"INSERT INTO accounts (id, email) SELECT 4, 'dup'",
			"SELECT 1",
			"ROLLBACK",
			"SELECT count(*) FROM accounts WHERE id = 302",
		}},
		{name: "INSERT … SELECT refused", stmts: []string{
			"INSERT INTO accounts (id, email) SELECT 400, 'r' RETURNING id",
			"DELETE FROM accounts WHERE id = 400",
		}, refusedOnTwo: map[int]string{
			0: `ERROR 0A000 "INSERT … SELECT … RETURNING into sharded table accounts: the proxy does not return the inserted rows" detail "" hint "Read the rows back with a SELECT, or route the statement to one shard with /* shard: N */."`,
		}},
	}
}

func TestInsertSelectDifferential(t *testing.T) {
	diffAll(t, newDiffEnv(t), insertSelectDiffScripts())
}

// TestShardedInsertSelectPipeline: in a pipeline (a pgx batch: Executes up
// to one Sync) INSERT … SELECT is part of the batch's implicit
// transaction, committed at the Sync or, when a statement fails, rolled
// back with the whole batch, as PostgreSQL does.
func TestShardedInsertSelectPipeline(t *testing.T) {
	e := newShardedEnv(t, 2)
	batches := [][]string{
		{
			"INSERT INTO accounts (id, email) SELECT g, 'a' || g FROM generate_series(1, 300) g",
			"INSERT INTO accounts (id, email) SELECT id + 1000, email FROM accounts",
		},
		{
			"INSERT INTO accounts (id, email) SELECT g, 'b' || g FROM generate_series(2001, 2300) g",
			"INSERT INTO accounts (id, email) SELECT g, 'dup' FROM generate_series(3001, 3010) g UNION ALL SELECT 7, 'dup'",
			"INSERT INTO accounts (id, email) SELECT g, 'c' || g FROM generate_series(4001, 4300) g",
		},
	}
	for _, mode := range execModes {
		if mode == pgx.QueryExecModeSimpleProtocol {
			continue // a batch is one multi-statement Query, refused with INSERT … SELECT in it
		}
		t.Run(mode.String(), func(t *testing.T) {
			for _, c := range append([]*pgx.Conn{e.ref}, e.direct...) {
				mustExec(t, c, "TRUNCATE accounts")
			}
			var conns [2]*pgx.Conn // the reference and the proxy, in mode
			for k, url := range []string{e.cl.DSN("ref"), e.p.AppURL("app")} {
				c, err := tryConnect(url, mode, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close(context.Background())
				conns[k] = c
			}
			for _, stmts := range batches {
				run := func(conn *pgx.Conn) string {
					b := &pgx.Batch{}
					for _, sql := range stmts {
						b.Queue(sql)
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					br := conn.SendBatch(ctx, b)
					var out []string
					for range stmts {
						tag, err := br.Exec()
						if err != nil {
							out = append(out, errKey(err))
						} else {
							out = append(out, tag.String())
						}
					}
					if err := br.Close(); err != nil {
						out = append(out, "close: "+errKey(err))
					}
					return strings.Join(out, "; ") + fmt.Sprintf(", tx %c", conn.PgConn().TxStatus())
				}
				got, want := run(conns[1]), run(conns[0])
				if got != want {
					t.Fatalf("batch %q:\n got  %s\n want %s", stmts, got, want)
				}
				t.Logf("%s", got)
			}
			e.sameTables(t, conns[1])
		})
	}
}
