package integration

import "testing"

// diffScripts cover session state a pooler must keep per client. Every
// statement routes to one shard or is session-level, so that the two-shard
// database must answer exactly as one PostgreSQL database does. Scripts
// leave the data as they found it.
var diffScripts = []diffScript{
	{name: "session settings", stmts: []string{
		"SET work_mem = '7MB'",
		"SHOW work_mem",
		"SET search_path = pg_catalog, public",
		"SHOW search_path",
		"SELECT email FROM accounts WHERE id = 3",
		"SET application_name = 'diff'",
		"SELECT current_setting('application_name')",
		"SET DateStyle = 'German'",
		"SELECT '2024-03-01'::date::text",
		"SET TimeZone = 'Asia/Tokyo'",
		"SELECT '2024-03-01 12:00+00'::timestamptz::text",
		"SET statement_timeout = '5s'",
		"SHOW statement_timeout",
	}},
	{name: "RESET, RESET ALL, DISCARD ALL", stmts: []string{
		"SET work_mem = '7MB'",
		"RESET work_mem",
		"SHOW work_mem",
		"SET statement_timeout = '5s'",
		"SET search_path = pg_catalog",
		"RESET ALL",
		"SHOW statement_timeout",
		"SHOW search_path",
		"SET work_mem = '9MB'",
		"SET work_mem TO DEFAULT",
		"SELECT current_setting('work_mem') AS after_default",
		"SET application_name = 'x'",
		"SET work_mem = '10MB'",
		"DISCARD ALL",
		// New statement texts: DISCARD ALL dropped pgx's cached statements.
		"SELECT current_setting('application_name') AS after_discard",
		"SELECT current_setting('work_mem') AS after_discard",
	}},
	{name: "SET LOCAL and transactions", stmts: []string{
		"BEGIN",
		"SET LOCAL work_mem = '3MB'",
		"SHOW work_mem",
		"COMMIT",
		"SHOW work_mem",
		"BEGIN",
		"SET work_mem = '5MB'",
		"ROLLBACK",
		"SELECT current_setting('work_mem') AS after_rollback",
		"BEGIN",
		"SET work_mem = '6MB'",
		"SET LOCAL work_mem = '8MB'",
		"COMMIT",
		"SELECT current_setting('work_mem') AS after_commit",
		"BEGIN",
		"SET LOCAL search_path = pg_catalog",
		"SELECT email FROM accounts WHERE id = 3",
		"ROLLBACK",
		"SELECT email FROM accounts WHERE id = 4",
	}},
	// Rows 1 and 2 are on shard 0 of "two", rows 3 to 8 on shard 1: these
	// transactions span both shards and end with ROLLBACK (no two-phase
	// commit).
	{name: "settings in a transaction over two shards", stmts: []string{
		"BEGIN",
		"SELECT email FROM accounts WHERE id = 1",
		"SET work_mem = '6MB'",
		"SELECT current_setting('work_mem'), email FROM accounts WHERE id = 3",
		"SAVEPOINT a",
		"SET LOCAL work_mem = '7MB'",
		"SET statement_timeout = '9s'",
		"SELECT current_setting('work_mem'), current_setting('statement_timeout'), email FROM accounts WHERE id = 2",
		"SELECT current_setting('work_mem'), current_setting('statement_timeout'), email FROM accounts WHERE id = 4",
		"ROLLBACK TO SAVEPOINT a",
		"SELECT current_setting('work_mem'), current_setting('statement_timeout'), email FROM accounts WHERE id = 1",
		"SELECT current_setting('work_mem'), current_setting('statement_timeout'), email FROM accounts WHERE id = 5",
		"RELEASE SAVEPOINT a",
		"RELEASE SAVEPOINT a",
		"ROLLBACK",
		"SHOW work_mem",
		"BEGIN",
		"SAVEPOINT b",
		"SET search_path = pg_catalog",
		"SELECT email FROM public.accounts WHERE id = 6",
		"SELECT email FROM accounts WHERE id = 2",
		"ROLLBACK TO b",
		"SELECT email FROM accounts WHERE id = 2",
		"ROLLBACK",
		"SELECT email FROM accounts WHERE id = 7",
		"SAVEPOINT c",
	}},
	{name: "set_config", stmts: []string{
		"SELECT set_config('work_mem', '11MB', false)",
		"SHOW work_mem",
		"BEGIN",
		"SELECT set_config('work_mem', '12MB', true)",
		"SELECT current_setting('work_mem') AS local",
		"COMMIT",
		"SELECT current_setting('work_mem') AS after_commit",
		"SELECT set_config('search_path', 'pg_catalog', false)",
		"SELECT email FROM accounts WHERE id = 3",
		"SELECT set_config('search_path', '\"$user\", public', false)",
		"SELECT email FROM accounts WHERE id = 5",
	}},
	{name: "role changes", stmts: []string{
		"SET ROLE " + otherRole,
		"SELECT current_user, session_user",
		"SELECT email FROM accounts WHERE id = 3",
		"SET work_mem = '2MB'",
		"SET log_statement = 'all'",
		"RESET ROLE",
		"SELECT current_user AS after_reset",
		"SET SESSION AUTHORIZATION " + otherRole,
		"SELECT current_user AS cu, session_user AS su",
		"RESET SESSION AUTHORIZATION",
		"SELECT current_user AS cu2, session_user AS su2",
		"SHOW work_mem",
		"SET log_statement = 'all'",
		"SET ROLE " + otherRole,
		"SHOW log_statement",
		"RESET ROLE",
		"RESET log_statement",
		"SELECT current_setting('log_statement')",
	}},
	{name: "small errors", stmts: []string{
		"SELECT 1/0",
		"SELECT 1",
		"SELECT * FROM no_such_table",
		"BEGIN",
		"SELECT 1/0",
		"SELECT 2",
		"ROLLBACK",
		"SET work_mem = 'bogus'",
		"SELECT 'abc'::int",
		"SHOW work_mem",
	}},
	// lib/pq takes an ErrorResponse longer than libpq's MAX_ERRLEN (30000
	// bytes) for the plain-text error of a server that could not start a
	// backend, and reads the rest of the connection out of step (directly
	// as through the proxy; the prepared path then waits forever).
	{name: "errors larger than 32 KiB", skipRunners: []string{"lib/pq"}, stmts: []string{
		"SET work_mem = '7MB'",
		"/* shard: 0 */ DO $$BEGIN RAISE EXCEPTION '%', repeat('x', 100000); END$$",
		"SELECT r(1)",
		"BEGIN",
		"SELECT r(1)",
		"SELECT 3",
		"ROLLBACK",
		"SHOW work_mem",
	}},
	{name: "temp objects", refusedOnTwo: map[int]string{0: tempRefusal, 7: tempRefusal}, stmts: []string{
		"CREATE TEMP TABLE tt (x int)",
		"INSERT INTO tt VALUES (1), (2)",
		"SELECT x FROM tt ORDER BY x",
		"SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()",
		"SELECT to_regclass('pg_temp.tt') IS NOT NULL",
		"DROP TABLE tt",
		"SELECT to_regclass('pg_temp.tt') IS NULL",
		"CREATE TEMP TABLE tt2 AS SELECT 1 AS y",
		"SELECT y FROM tt2",
		"DISCARD TEMP",
		"SELECT to_regclass('pg_temp.tt2') IS NULL AS gone",
	}},
	{name: "PREPARE and EXECUTE", stmts: []string{
		"PREPARE p1(bigint) AS SELECT id, email FROM accounts WHERE id = $1",
		"EXECUTE p1(3)",
		"EXECUTE p1(4)",
		// pg_prepared_statements shows proxy-wide names in transaction
		// mode, by nature (see notProxyNamed): not compared here.
		"PREPARE p1 AS SELECT 1",
		"DEALLOCATE p1",
		"EXECUTE p1(3)",
		"PREPARE p2 AS SELECT 2",
		"EXECUTE p2",
		"DEALLOCATE ALL",
		// SQL-level statements only: a driver's protocol-level ones
		// have proxy-wide names on a sharded database (notProxyNamed).
		"SELECT count(*) FROM pg_prepared_statements WHERE from_sql AND name !~ '^sgq?_[0-9]+$'",
	}},
	{name: "rows on one shard", stmts: []string{
		"SELECT id, email FROM accounts WHERE id = 3",
		"SELECT email FROM accounts WHERE id = 4",
		"BEGIN",
		"UPDATE accounts SET email = 'z' WHERE id = 3",
		"SELECT email FROM accounts WHERE id = 3",
		"ROLLBACK",
		"SELECT email FROM accounts WHERE id = 3",
	}},
	// Results of many rows: the relay hands the rows buffered behind one
	// on in a run (wire.Reader.NextRun). Results over many buffers, one
	// that fails after 2 499 rows, rows around a row larger than the
	// buffer, and an empty one.
	{name: "results of many rows", stmts: []string{
		"SELECT x, repeat('r', x % 200) AS pad FROM generate_series(1, 3000) x",
		"SELECT x, 10000 / (x - 2500) AS q FROM generate_series(1, 3000) x",
		"SELECT x, repeat('w', CASE WHEN x = 50 THEN 70000 ELSE 10 END) AS pad FROM generate_series(1, 100) x",
		"SELECT x FROM generate_series(1, 0) x",
		"SELECT count(*) FROM generate_series(1, 3000) x",
	}},
}

// tempRefusal is the answer of a sharded database to a statement that
// creates a temporary table: such a table lives in one server's session,
// and a sharded client runs its statements on a server of each shard (the
// router refuses it, see router.tempRelation). A hint that routes the
// statements to one shard makes them work.
const tempRefusal = `ERROR 0A000 "temporary tables are not supported on sharded databases" detail "" hint "A temporary table lives in one server session. Use a regular table, or route the statements that use it to one shard with /* shard: N */ or SET shardgate.shard."`

// TestDiffScripts: every script answers through the proxy exactly as on
// PostgreSQL, in both pool modes, on one shard and on two.
func TestDiffScripts(t *testing.T) {
	checkGoroutines(t)
	diffAll(t, newDiffEnv(t), diffScripts)
}
