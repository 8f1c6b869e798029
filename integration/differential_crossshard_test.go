package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// crossShardScripts need both shards of the two-shard database (reads
// merged from both, transactions that touch both) and must still answer
// exactly as one PostgreSQL database does: command tags, result types,
// errors and transaction status. Ids 1 to 8 are spread over both shards.
var crossShardScripts = []diffScript{
	{name: "avg result types", stmts: []string{
		"SELECT avg(id::int) AS i, avg(id) AS b, avg(id::float4) AS f, avg(id::numeric) AS n FROM accounts",
		"SELECT avg(id::int2) FROM accounts WHERE id < 0",
		"SELECT length(email) AS len, avg(id::int) FROM accounts GROUP BY 1 ORDER BY 1",
	}},
	{name: "transaction command tags", stmts: []string{
		"START TRANSACTION",
		"SELECT count(*) FROM accounts",
		"COMMIT",
		"START TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"ROLLBACK",
		"BEGIN WORK",
		"END",
	}},
	{name: "multi-statement queries over both shards", stmts: []string{
		"SELECT email FROM accounts WHERE id = 1; SELECT email FROM accounts WHERE id = 2",
		"UPDATE accounts SET email = 'm' WHERE id = 1; UPDATE accounts SET email = 'm' WHERE id = 2; SELECT count(*) FROM accounts WHERE email = 'm'",
		"UPDATE accounts SET email = 'f' WHERE id = 3; SELECT 1 / (id - 4) FROM accounts WHERE id = 4; UPDATE accounts SET email = 'f' WHERE id = 5",
		"SELECT count(*) FROM accounts WHERE email = 'f'",
		"BEGIN; UPDATE accounts SET email = 'b' WHERE id = 6; UPDATE accounts SET email = 'b' WHERE id = 7",
		"SELECT count(*) FROM accounts WHERE email = 'b'",
		"ROLLBACK",
		"UPDATE accounts SET email = 'c' WHERE id = 6; COMMIT; UPDATE accounts SET email = 'c' WHERE id = 7; SELECT 1 / 0",
		"SELECT id FROM accounts WHERE email = 'c' ORDER BY id",
		"SELECT count(*) FROM accounts; SELECT email FROM accounts WHERE id = 8",
	}},
	{name: "subqueries in FROM and WITH queries over both shards", stmts: []string{
		"SELECT count(*) FROM (SELECT id FROM accounts WHERE id > 2) s",
		"SELECT * FROM (SELECT id, email, id * 2 AS d FROM accounts) s ORDER BY d DESC LIMIT 3",
		"WITH a AS (SELECT id, email FROM accounts WHERE id <> 4) SELECT count(*), max(email), sum(id) FROM a",
		"WITH a AS (SELECT id FROM accounts) SELECT id % 3 AS k, count(*) FROM a GROUP BY 1 ORDER BY 1",
		"SELECT s.email FROM (SELECT * FROM (SELECT id, email FROM accounts WHERE id IN (1, 2, 7)) a) s ORDER BY 1",
		"SELECT count(*), min(id) FROM (SELECT id FROM accounts WHERE id = 3) s",
		"SELECT s.id, g FROM (SELECT id FROM accounts WHERE id < 4) s, generate_series(1, 2) g ORDER BY 1, 2",
	}},
	{name: "count of a subquery, as ORMs count", stmts: []string{
		`SELECT COUNT(*) AS "__count" FROM (SELECT DISTINCT length(email) FROM accounts) subquery`,
		"SELECT count(*) FROM (SELECT id FROM accounts ORDER BY id LIMIT 5 OFFSET 2) s",
		"select count(*) as aggregate from (select id % 3 AS k from accounts group by id % 3) as aggregate_table",
		"SELECT count(*) FROM (SELECT DISTINCT email, id % 2 FROM accounts WHERE id > 2) s",
		"SELECT count(*) FROM (SELECT id % 2, count(*) FROM accounts GROUP BY 1 HAVING count(*) > 3) s",
		"SELECT count(*) FROM (SELECT DISTINCT email FROM accounts WHERE id < 0) s",
		"SELECT count(*) FROM (SELECT id % 2 AS p, length(email) + 1 AS l, count(*) FROM accounts GROUP BY ROLLUP (p, length(email) + 1)) s",
		"SELECT count(*) FROM (SELECT DISTINCT email FROM accounts WHERE id = 3) s",
		"SELECT EXISTS (SELECT 1 FROM accounts WHERE email = 'a7') AS anon_1",
		"SELECT EXISTS (SELECT * FROM accounts WHERE email = 'nobody')",
		"SELECT EXISTS (SELECT id FROM accounts ORDER BY email DESC LIMIT 1 OFFSET 7)",
		"SELECT EXISTS (SELECT id FROM accounts ORDER BY email DESC LIMIT 1 OFFSET 8)",
	}},
	{name: "UNION ALL over both shards", stmts: []string{
		"SELECT email FROM accounts WHERE id = 1 UNION ALL SELECT email FROM accounts WHERE id = 2 UNION ALL SELECT email FROM accounts WHERE id = 7",
		"SELECT id, 'low' AS k FROM accounts WHERE id = 6 UNION ALL SELECT id, 'high' FROM accounts WHERE id = 3",
		"SELECT count(*) FROM (SELECT id FROM accounts WHERE id < 4 UNION ALL SELECT id FROM accounts WHERE id > 5) s",
		"SELECT id FROM accounts WHERE id = 8 UNION ALL SELECT id FROM accounts WHERE id = 8",
		"SELECT id, email FROM accounts WHERE id < 5 UNION ALL SELECT id, email FROM accounts WHERE id > 5 ORDER BY 1 DESC LIMIT 3 OFFSET 1",
		"SELECT email AS e FROM accounts WHERE id <= 3 UNION ALL SELECT email FROM accounts WHERE id >= 6 ORDER BY e",
		"SELECT id FROM accounts UNION ALL SELECT id FROM accounts ORDER BY id NULLS FIRST OFFSET 13",
		"SELECT id % 3 AS k FROM accounts UNION ALL SELECT id % 2 FROM accounts ORDER BY 1 FETCH FIRST 3 ROWS WITH TIES",
		"SELECT id % 3 AS k FROM accounts UNION ALL SELECT id % 2 FROM accounts ORDER BY k DESC OFFSET 2 ROWS FETCH FIRST 1 ROW WITH TIES",
	}},
	// UNION (without ALL): each shard deduplicates and sorts by every
	// column, the proxy drops the rows equal to the one before.
	{name: "UNION over both shards", stmts: []string{
		// Rows tied by ORDER BY come in an order PostgreSQL leaves open
		// (a hash aggregate's, for UNION): without one, it sorts them by
		// every column, as the merge does.
		"SET enable_hashagg = off",
		"SELECT id % 3 AS k FROM accounts UNION SELECT id % 2 FROM accounts ORDER BY 1",
		"SELECT id % 3 AS k, 'x' AS t FROM accounts UNION SELECT id % 2, 'x' FROM accounts ORDER BY k DESC LIMIT 2 OFFSET 1",
		"SELECT email FROM accounts WHERE id < 6 UNION SELECT email FROM accounts WHERE id > 2 ORDER BY email DESC",
		"SELECT id % 4 AS k, NULL::text AS n FROM accounts UNION ALL SELECT id % 4, NULL FROM accounts UNION SELECT 1, email FROM accounts WHERE id = 5 ORDER BY 1, 2 NULLS FIRST",
		"SELECT 1 AS one FROM accounts WHERE id = 1 UNION SELECT 1 FROM accounts WHERE id = 2",
		"SELECT id % 2 AS p, id % 3 AS q FROM accounts UNION SELECT id % 3, id % 2 FROM accounts ORDER BY q, p OFFSET 3",
		"SELECT id % 3 FROM accounts UNION SELECT id % 5 FROM accounts ORDER BY 1 DESC OFFSET 1 FETCH FIRST 2 ROWS WITH TIES",
		"SELECT id % 3 AS k, length(email) AS l FROM accounts UNION SELECT id % 2, 2 FROM accounts ORDER BY l OFFSET 1 FETCH FIRST 1 ROW WITH TIES",
		"SELECT id FROM accounts WHERE id < 3 UNION SELECT id FROM accounts WHERE id > 100 ORDER BY 1 LIMIT 5",
		"SELECT id, '{}'::json AS j FROM accounts UNION SELECT id, '{}'::json FROM accounts ORDER BY 1",
	}},
	// INTERSECT and EXCEPT: shards send both queries' rows, numbered,
	// sorted by every column; the proxy counts the runs (union.go).
	{name: "INTERSECT and EXCEPT over both shards", stmts: []string{
		"SELECT id % 3 AS k FROM accounts WHERE id < 6 INTERSECT SELECT id % 4 FROM accounts WHERE id > 2 ORDER BY 1",
		"SELECT id % 3 FROM accounts INTERSECT ALL SELECT id % 2 FROM accounts ORDER BY 1",
		"SELECT id % 4 AS k FROM accounts EXCEPT SELECT id % 3 FROM accounts WHERE id > 4 ORDER BY k DESC",
		"SELECT id % 3 AS k FROM accounts EXCEPT ALL SELECT id % 2 FROM accounts WHERE id < 5 ORDER BY 1",
		"SELECT id % 2 AS p, length(email) AS l FROM accounts INTERSECT SELECT id % 3, length(email) FROM accounts ORDER BY l, p LIMIT 2 OFFSET 1",
		"SELECT NULLIF(id % 3, 0) AS n FROM accounts INTERSECT SELECT NULLIF(id % 2, 1) FROM accounts ORDER BY 1 NULLS FIRST",
		"SELECT email FROM accounts WHERE id < 5 EXCEPT SELECT email FROM accounts WHERE id = 2 ORDER BY 1",
		"SELECT id % 3 AS k FROM accounts INTERSECT ALL SELECT id % 3 FROM accounts WHERE id > 3 ORDER BY 1 FETCH FIRST 1 ROW WITH TIES",
		"SELECT id FROM accounts INTERSECT SELECT g FROM generate_series(2, 4) g ORDER BY 1",
		"SELECT id::numeric / 2 AS h FROM accounts EXCEPT SELECT id::numeric FROM accounts ORDER BY 1 DESC LIMIT 3",
		"SELECT id % 3 AS k FROM accounts WHERE id < 0 INTERSECT SELECT id FROM accounts ORDER BY 1",
	}},
	// Set operations of more than two queries, and a UNION under a UNION
	// ALL: the shards send every query's rows, numbered, and the proxy
	// computes the client's tree of operations from each run's counts.
	{name: "set operations of several queries", stmts: []string{
		"SELECT id % 3 FROM accounts INTERSECT SELECT id % 4 FROM accounts EXCEPT SELECT id % 2 FROM accounts ORDER BY 1",
		"SELECT id % 5 FROM accounts EXCEPT ALL SELECT id % 3 FROM accounts WHERE id > 4 INTERSECT ALL SELECT id % 2 FROM accounts ORDER BY 1",
		"SELECT id % 3 FROM accounts UNION ALL SELECT id % 2 FROM accounts INTERSECT ALL SELECT id % 4 FROM accounts ORDER BY 1",
		"(SELECT id % 3 AS k FROM accounts UNION SELECT id % 5 FROM accounts) EXCEPT ALL (SELECT id % 2 FROM accounts UNION ALL SELECT id % 2 FROM accounts) ORDER BY k",
		"SELECT id % 3 FROM accounts UNION ALL (SELECT id % 2 FROM accounts UNION SELECT id % 4 FROM accounts) ORDER BY 1",
		"SELECT id FROM accounts UNION SELECT id FROM accounts UNION ALL SELECT id FROM accounts WHERE id < 3 ORDER BY 1",
		"SELECT id % 2 AS p, length(email) AS l FROM accounts INTERSECT SELECT id % 3, length(email) FROM accounts EXCEPT SELECT 0, 2 FROM accounts ORDER BY l, p LIMIT 2",
		"SELECT NULLIF(id % 3, 0) AS n FROM accounts INTERSECT ALL SELECT NULLIF(id % 2, 1) FROM accounts UNION ALL SELECT NULL::int FROM accounts WHERE id = 1 ORDER BY 1 NULLS FIRST",
		"SELECT id % 3 FROM accounts INTERSECT SELECT (id % 4)::numeric FROM accounts EXCEPT SELECT 1.0 FROM accounts WHERE id = 1 ORDER BY 1",
		"SELECT email FROM accounts EXCEPT SELECT email FROM accounts WHERE id = 2 EXCEPT SELECT email FROM accounts WHERE id > 6 INTERSECT SELECT email FROM accounts ORDER BY 1 DESC",
		"SELECT id % 4 AS k FROM accounts INTERSECT ALL SELECT id % 4 FROM accounts INTERSECT ALL SELECT id % 2 FROM accounts ORDER BY 1 FETCH FIRST 1 ROW WITH TIES",
		"SELECT id % 3 FROM accounts WHERE id < 0 EXCEPT SELECT id FROM accounts INTERSECT SELECT id FROM accounts ORDER BY 1",
		"SELECT id % 3 FROM accounts INTERSECT SELECT id % 2 FROM accounts UNION SELECT g FROM generate_series(5, 6) g ORDER BY 1",
		"SELECT id % 3 FROM accounts INTERSECT SELECT id % 2 FROM accounts UNION SELECT '7' FROM accounts ORDER BY 1",
	}},
	{name: "a set operation with ALL over a query that reads no sharded table", refusedOnTwo: map[int]string{
		0: `ERROR 0A000 "a query of a set operation with ALL that reads no sharded table would count its rows once per shard" detail "" hint "Constrain the sharding key to one shard, or route the statement with /* shard: N */ or SET shardgate.shard."`,
	}, stmts: []string{
		"SELECT id % 3 FROM accounts INTERSECT SELECT id % 2 FROM accounts UNION ALL SELECT g FROM generate_series(5, 6) g",
	}},
	// A first query with *: the shards sort by the whole row. Without
	// hash aggregation PostgreSQL sorts the rows by every column too, so
	// that a statement without ORDER BY has one order to compare.
	{name: "set operations of SELECT *", stmts: []string{
		"SET enable_hashagg = off",
		"SELECT * FROM accounts WHERE id < 4 UNION SELECT * FROM accounts WHERE id > 2",
		"SELECT * FROM accounts WHERE id < 4 UNION SELECT id, 'x' || id FROM accounts WHERE id > 5 LIMIT 4 OFFSET 1",
		"SELECT * FROM accounts INTERSECT SELECT * FROM accounts WHERE id % 2 = 0",
		"SELECT * FROM accounts EXCEPT SELECT * FROM accounts WHERE id % 2 = 0",
		"SELECT *, id % 2 AS odd FROM accounts INTERSECT ALL SELECT id, email, 1 FROM accounts",
		"SELECT * FROM accounts WHERE id < 0 UNION SELECT * FROM accounts WHERE id < 0",
	}},
	{name: "INTERSECT ALL of a query that reads no sharded table", refusedOnTwo: map[int]string{
		0: `ERROR 0A000 "a query of INTERSECT ALL that reads no sharded table would count its rows once per shard" detail "" hint "Constrain the sharding key to one shard, or route the statement with /* shard: N */ or SET shardgate.shard."`,
	}, stmts: []string{
		"SELECT id FROM accounts INTERSECT ALL SELECT g FROM generate_series(2, 4) g",
	}},
	{name: "FETCH FIRST … WITH TIES over both shards", stmts: []string{
		"SELECT id % 3 AS k FROM accounts ORDER BY 1 FETCH FIRST 1 ROWS WITH TIES",
		"SELECT id % 3 AS k, length(email) FROM accounts ORDER BY 1 OFFSET 2 FETCH FIRST 2 ROWS WITH TIES",
		"SELECT id % 3 AS k FROM accounts ORDER BY id % 3 DESC FETCH FIRST 0 ROWS WITH TIES",
		"SELECT length(email) FROM accounts ORDER BY id % 2 FETCH FIRST 5 ROWS WITH TIES",
		"SELECT id FROM accounts ORDER BY id OFFSET 6 FETCH FIRST 5 ROWS WITH TIES",
		"SELECT id FROM accounts ORDER BY id FETCH FIRST NULL ROWS WITH TIES",
		"SELECT count(*) FROM accounts GROUP BY id % 3 ORDER BY 1 DESC FETCH FIRST 1 ROWS WITH TIES",
		"SELECT count(*) AS n, max(id) - max(id) AS z FROM accounts GROUP BY id % 3 ORDER BY 1 DESC, 2 OFFSET 1 FETCH FIRST 1 ROW WITH TIES",
		"SELECT id % 2 AS p, count(*) FROM accounts GROUP BY ROLLUP (1) ORDER BY 2 FETCH FIRST 1 ROW WITH TIES",
		"SELECT DISTINCT id % 3 AS k FROM accounts ORDER BY 1 OFFSET 1 FETCH FIRST 1 ROW WITH TIES",
		"SELECT DISTINCT length(email) AS l FROM accounts ORDER BY 1 FETCH FIRST 1 ROW WITH TIES",
	}},
	// Grouping sets: shards group by each set, and a hidden GROUPING()
	// keeps the sets' groups apart in the merge (router/groupingsets.go).
	{name: "GROUPING SETS, ROLLUP and CUBE over both shards", stmts: []string{
		"SELECT id % 2 AS p, id % 3 AS q, count(*), sum(id), avg(id) FROM accounts GROUP BY ROLLUP (1, 2) ORDER BY 1, 2",
		"SELECT id % 2 AS p, length(email) AS l, count(*), min(email) FROM accounts GROUP BY CUBE (p, l) ORDER BY 1 NULLS FIRST, 2 NULLS FIRST",
		"SELECT id % 2 AS p, NULLIF(id % 3, 0) AS q, count(*), sum(id) FROM accounts GROUP BY ROLLUP (1, 2) ORDER BY 1, 2, 3",
		"SELECT id % 2, GROUPING(id % 2) AS g, max(email) FROM accounts GROUP BY GROUPING SETS ((id % 2), ()) HAVING count(*) > 1 ORDER BY 2, 1",
		"SELECT count(*), min(id) FROM accounts WHERE id < 0 GROUP BY ROLLUP (id % 2)",
		"SELECT CASE WHEN GROUPING(id % 3) = 1 THEN 'all' ELSE (id % 3)::text END AS k, sum(id) * 2 AS s2 FROM accounts GROUP BY ROLLUP (id % 3) ORDER BY 1",
		"SELECT id % 2 AS p, id % 3 AS q, count(*) FROM accounts GROUP BY DISTINCT ROLLUP (p, q), ROLLUP (p) ORDER BY 1, 2, 3",
		"SELECT id % 2 AS p, string_agg(email, ',') IS NOT NULL, max(DISTINCT email) FROM accounts WHERE id < 0 GROUP BY ROLLUP (1)",
		"SELECT id % 2 AS p, id % 4 AS q, count(*) FROM accounts GROUP BY GROUPING SETS ((p, q), (q), ()) ORDER BY count(*) DESC, 1, 2 LIMIT 4",
	}},
	// The shards' statement is deparsed: a COLLATE operand stays as
	// written, so PostgreSQL's grouping check sees what it would in the
	// client's (found by TestRndDifferential seed 6).
	{name: "HAVING over a collated group expression", stmts: []string{
		`SELECT (email COLLATE "C") AS e, count(*) FROM accounts GROUP BY (email COLLATE "C") HAVING (email COLLATE "C") = 'a1'`,
		`SELECT (email COLLATE "C") AS e, count(*) FROM accounts GROUP BY 1 HAVING count(*) > 0 AND (email COLLATE "C") || 'x' <> 'y' ORDER BY 1`,
		`SELECT max(email COLLATE "C") || 'x' FROM accounts`,
	}},
	{name: "a grouping set repeated", refusedOnTwo: map[int]string{
		0: `ERROR 0A000 "a GROUP BY that repeats a grouping set is not supported across shards" detail "" hint "Name each grouping set once (GROUP BY DISTINCT drops the repeated ones), or constrain the sharding key to one shard."`,
	}, stmts: []string{
		"SELECT id % 2, count(*) FROM accounts GROUP BY GROUPING SETS ((id % 2), (id % 2))",
	}},
	{name: "outer join that would repeat replicated rows", refusedOnTwo: map[int]string{
		0: `ERROR 0A000 "an outer join that keeps the rows of generate_series(), which every shard holds, and NULL-extends rows of sharded tables would repeat them once per shard" detail "" hint "Constrain the sharding key to one shard in WHERE, or route the statement to one shard."`,
	}, stmts: []string{
		"SELECT g, a.id FROM generate_series(1, 3) g LEFT JOIN accounts a ON a.id = g ORDER BY 1",
		"SELECT g, a.id FROM generate_series(1, 3) g LEFT JOIN accounts a ON a.id = g WHERE a.id = 2",
	}},
	// Cursors over both shards: the proxy holds their merged rows and
	// answers FETCH, MOVE and CLOSE itself (frontend/sharded_cursor.go).
	{name: "cursors over both shards", stmts: []string{
		"BEGIN",
		"DECLARE c SCROLL CURSOR FOR SELECT id, email FROM accounts ORDER BY id",
		"FETCH 3 FROM c",
		"FETCH NEXT FROM c",
		"FETCH PRIOR FROM c",
		"FETCH ABSOLUTE -1 FROM c",
		"FETCH FORWARD 2 FROM c",
		"FETCH BACKWARD 3 FROM c",
		"MOVE FORWARD ALL IN c",
		"FETCH RELATIVE -2 FROM c",
		"FETCH 0 FROM c",
		"MOVE BACKWARD ALL FROM c",
		"FETCH FIRST FROM c",
		"FETCH ABSOLUTE 20 FROM c",
		"FETCH BACKWARD ALL FROM c",
		"DECLARE c CURSOR FOR SELECT 1",
		"FETCH 1 FROM c",
		"ROLLBACK",
		"FETCH 1 FROM c",
		"BEGIN",
		"DECLARE n NO SCROLL CURSOR FOR SELECT id FROM accounts ORDER BY id DESC",
		"FETCH 2 FROM n",
		"FETCH PRIOR FROM n",
		"ROLLBACK",
		"DECLARE w CURSOR FOR SELECT id FROM accounts",
		"DECLARE h CURSOR WITH HOLD FOR SELECT count(*), max(email) FROM accounts",
		"FETCH ALL FROM h",
		"FETCH ALL FROM h",
		"CLOSE h",
		"BEGIN",
		"DECLARE h2 CURSOR WITH HOLD FOR SELECT id FROM accounts ORDER BY id LIMIT 5",
		"COMMIT",
		"FETCH 2 FROM h2",
		"MOVE 10 FROM h2",
		"FETCH 1 FROM h2",
		"BEGIN",
		"DECLARE h3 CURSOR WITH HOLD FOR SELECT id FROM accounts ORDER BY id",
		"FETCH 1 FROM h3",
		"ROLLBACK",
		"FETCH 1 FROM h3",
		"CLOSE h2",
	}},
	// A multi-statement Query is a transaction block for DECLARE: its
	// cursors end with its implicit transaction (WITH HOLD ones outlive a
	// commit), and an error in a later statement takes them away.
	{name: "cursors inside one multi-statement Query", stmts: []string{
		"DECLARE m CURSOR FOR SELECT id FROM accounts ORDER BY id; FETCH 2 FROM m; FETCH 1 FROM m",
		"FETCH 1 FROM m",
		"DECLARE mh CURSOR WITH HOLD FOR SELECT id, email FROM accounts ORDER BY id; FETCH 1 FROM mh",
		"FETCH 2 FROM mh",
		"CLOSE mh; SELECT 1",
		"FETCH 1 FROM mh",
		"DECLARE e CURSOR WITH HOLD FOR SELECT id FROM accounts ORDER BY id; FETCH 1 FROM e; SELECT 1 / 0",
		"FETCH 1 FROM e",
		"BEGIN; DECLARE b CURSOR FOR SELECT id FROM accounts ORDER BY id DESC; FETCH 1 FROM b",
		"FETCH 1 FROM b; COMMIT",
		"FETCH 1 FROM b",
	}},
	// Statements between FETCHes park a cursor's merge (the shards'
	// batches under way are read, their servers run the statement) and
	// the next FETCH goes on from there; several cursors take turns; a
	// ROLLBACK TO ends the cursors declared after its savepoint; a WITH
	// HOLD cursor parked in its transaction is computed whole at COMMIT.
	{name: "cursors parked while other statements run", stmts: []string{
		"BEGIN",
		"DECLARE a CURSOR FOR SELECT id, email FROM accounts ORDER BY id",
		"DECLARE b NO SCROLL CURSOR FOR SELECT id FROM accounts ORDER BY id DESC",
		"FETCH 2 FROM a",
		"FETCH 1 FROM b",
		"UPDATE accounts SET email = 'p' || id WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8)",
		"SELECT count(*), max(email) FROM accounts",
		"FETCH 2 FROM a",
		"FETCH 2 FROM b",
		"SAVEPOINT s",
		"DECLARE c CURSOR FOR SELECT id, email FROM accounts ORDER BY email DESC",
		"FETCH 1 FROM c",
		"FETCH 1 FROM a",
		"ROLLBACK TO SAVEPOINT s",
		"FETCH 1 FROM c",
		"ROLLBACK TO SAVEPOINT s",
		"FETCH 1 FROM a",
		"FETCH 1 FROM b",
		"RELEASE s",
		"DECLARE h CURSOR WITH HOLD FOR SELECT id, email FROM accounts ORDER BY id",
		"FETCH 1 FROM h",
		"SELECT email FROM accounts WHERE id = 3",
		"COMMIT",
		"FETCH ALL FROM h",
		"FETCH 1 FROM a",
		"CLOSE h",
		"BEGIN",
		"DECLARE d CURSOR FOR SELECT id FROM accounts ORDER BY id",
		"FETCH 1 FROM d",
		"SELECT 1 / 0",
		"FETCH 1 FROM d",
		"ROLLBACK",
		"BEGIN",
		"SAVEPOINT x",
		"DECLARE e CURSOR FOR SELECT id FROM accounts ORDER BY id",
		"DECLARE f CURSOR FOR SELECT id FROM accounts ORDER BY id DESC",
		"FETCH 2 FROM e",
		"RELEASE x",
		"SAVEPOINT y",
		"FETCH 1 FROM f",
		"SELECT 1 / 0",
		"ROLLBACK TO y",
		"FETCH 1 FROM e",
		"FETCH 1 FROM f",
		"COMMIT",
	}},
	{name: "COMMIT of an aborted transaction", stmts: []string{
		"BEGIN",
		"UPDATE accounts SET email = 'changed' WHERE id IN (1, 2, 3, 4, 5, 6, 7, 8)",
		"SELECT 1 / (id - 3) FROM accounts WHERE id = 3",
		"SELECT 1",
		"COMMIT",
		"SELECT count(*) FROM accounts WHERE email = 'changed'",
		"START TRANSACTION",
		"SELECT 1 / 0",
		"END",
	}},
}

// TestDiffCrossShard: statements that need both shards answer as on one
// PostgreSQL, in every exec mode and both pool modes.
func TestDiffCrossShard(t *testing.T) {
	checkGoroutines(t)
	diffAll(t, newDiffEnv(t), crossShardScripts)
}

// TestShardedPipelineIsOneTransaction: a pipeline of statements with one
// Sync is one implicit transaction, as PostgreSQL runs it: when a later
// statement fails, the earlier ones' writes are rolled back on every shard
// they reached; when none fails, all of them commit together.
func TestShardedPipelineIsOneTransaction(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	for _, mode := range []string{"transaction", "session"} {
		t.Run(mode, func(t *testing.T) {
			p := startProxy(t, e.proxyConfig(mode, 2))
			for _, db := range []string{"ref", "two"} {
				url := e.cl.DSN("ref")
				if db == "two" {
					url = p.AppURL("two")
				}
				t.Run(db, func(t *testing.T) {
					e.resetData(t)
					ctx := context.Background()
					conn := connectConfig(t, url, pgx.QueryExecModeCacheStatement, nil)
					batch := &pgx.Batch{}
					for id := 1; id <= 8; id++ {
						batch.Queue("UPDATE accounts SET email = $1 WHERE id = $2", fmt.Sprintf("p%d", id), id)
					}
					batch.Queue("SELECT 1 / (id - 5) FROM accounts WHERE id = $1", 5)
					err := conn.SendBatch(ctx, batch).Close()
					if pe := pgErr(err); pe == nil || pe.Code != "22012" {
						t.Fatalf("the batch answered %v, want 22012 division by zero", err)
					}
					var changed int
					if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE email LIKE 'p%'").Scan(&changed); err != nil {
						t.Fatal(err)
					}
					if changed != 0 {
						t.Fatalf("%d rows kept the writes of a batch whose last statement failed, want 0", changed)
					}
					batch = &pgx.Batch{}
					for id := 1; id <= 8; id++ {
						batch.Queue("UPDATE accounts SET email = $1 WHERE id = $2", fmt.Sprintf("p%d", id), id)
					}
					if err := conn.SendBatch(ctx, batch).Close(); err != nil {
						t.Fatal(err)
					}
					if err := conn.QueryRow(ctx, "SELECT count(*) FROM accounts WHERE email LIKE 'p%'").Scan(&changed); err != nil {
						t.Fatal(err)
					}
					if changed != 8 {
						t.Fatalf("%d rows written by a batch that succeeded, want 8", changed)
					}
					var prepared int
					if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts").Scan(&prepared); err != nil {
						t.Fatal(err)
					}
					if prepared != 0 {
						t.Fatalf("%d prepared transactions left behind", prepared)
					}
				})
			}
		})
	}
}

// TestShardedBeginInsideMultiStatement: a Query that opens a transaction
// among other statements ("BEGIN; UPDATE …") opens the client's
// transaction, not only one server's: the server stays the client's until
// the transaction ends, and another client never runs inside it.
func TestShardedBeginInsideMultiStatement(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	p := startProxy(t, e.proxyConfig("transaction", 2))
	a := simpleConn(t, p.AppURL("two"))
	execIn(t, a, simple, "BEGIN; UPDATE accounts SET email = 'x' WHERE id = 3")
	if st := a.PgConn().TxStatus(); st != 'T' {
		t.Fatalf("after BEGIN; UPDATE: transaction status %c, want T", st)
	}
	b := simpleConn(t, p.AppURL("two"))
	if got := value(t, b, simple, "SELECT txid_current_if_assigned() IS NULL AND (SELECT email FROM accounts WHERE id = 3) = 'a3'"); got != "true" {
		t.Fatalf("another client runs inside the first one's transaction (or sees its write): %s", got)
	}
	execIn(t, a, simple, "ROLLBACK")
	if got := value(t, b, simple, "SELECT email FROM accounts WHERE id = 3"); got != "a3" {
		t.Fatalf("after ROLLBACK: email %q, want a3", got)
	}
}

// TestDiffUnionParams: LIMIT and OFFSET parameters of a UNION ALL and a
// UNION across shards, and of FETCH … WITH TIES, answer as one PostgreSQL
// does in pgx's protocol modes (the scripts hold no parameters). The
// shards' statement keeps every parameter of the client's, an OFFSET
// without LIMIT too.
func TestDiffUnionParams(t *testing.T) {
	checkGoroutines(t)
	e := newDiffEnv(t)
	p := startProxy(t, e.proxyConfig("transaction", 2))
	queries := []struct {
		sql  string
		args []any
	}{
		{"SELECT id FROM accounts UNION ALL SELECT id FROM accounts ORDER BY 1 OFFSET $1", []any{13}},
		{"SELECT id FROM accounts UNION ALL SELECT id FROM accounts ORDER BY 1 DESC LIMIT $1", []any{3}},
		{"SELECT id FROM accounts UNION ALL SELECT id FROM accounts ORDER BY 1 LIMIT $1 OFFSET $2", []any{3, 5}},
		{"SELECT id % 3 AS k FROM accounts UNION SELECT id % 5 FROM accounts ORDER BY 1 OFFSET $1", []any{2}},
		{"SELECT id % 3 AS k FROM accounts UNION SELECT id % 5 FROM accounts ORDER BY 1 DESC LIMIT $1 OFFSET $2", []any{2, 1}},
		{"SELECT id % 3 AS k, 2 AS l FROM accounts UNION SELECT id % 2, 2 FROM accounts ORDER BY l OFFSET $2 FETCH FIRST $1 ROWS WITH TIES", []any{1, 1}},
		{"SELECT id % 3 AS k FROM accounts ORDER BY 1 OFFSET $2 FETCH FIRST $1 ROWS WITH TIES", []any{1, 2}},
		{"SELECT id % 3 AS k FROM accounts WHERE id > $1 UNION SELECT id % 2 FROM accounts ORDER BY 1 LIMIT $2", []any{4, 10}},
	}
	modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeCacheStatement}
	rowsOf := func(conn *pgx.Conn, sql string, args []any) string {
		rows, err := conn.Query(context.Background(), sql, args...)
		if err != nil {
			return "error: " + err.Error()
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				return "error: " + err.Error()
			}
			out = append(out, fmt.Sprint(v...))
		}
		if err := rows.Err(); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("%q %s", out, rows.CommandTag())
	}
	for _, mode := range modes {
		ref := connectConfig(t, e.cl.DSN("ref"), mode, nil)
		for _, db := range []string{"two", "three"} {
			conn := connectConfig(t, p.AppURL(db), mode, nil)
			for _, q := range queries {
				want, got := rowsOf(ref, q.sql, q.args), rowsOf(conn, q.sql, q.args)
				if strings.HasPrefix(want, "error") {
					t.Fatalf("%v %s %v: PostgreSQL answers %s", mode, q.sql, q.args, want)
				}
				if got != want {
					t.Errorf("%v %s: %s %v:\n got %s\nwant %s", mode, db, q.sql, q.args, got, want)
				}
			}
		}
	}
}
