// Package admin serves the virtual admin database: connect to the database
// named by admin.database (default "admin") as admin.user with
// admin.password, and run PgBouncer-style commands with psql or any
// driver.
//
//	SHOW POOLS | CLIENTS | SERVERS | DATABASES | SHARDS | STATS | CONFIG | VERSION | LISTS | HELP
//	RELOAD
//	PAUSE [db] / RESUME [db]
//	MAINTENANCE ON|OFF [db]
//	SET pool_size | checkout_timeout = value
//	KILL client_id
//	SHUTDOWN
//
// Commands are case-insensitive and may end with a semicolon. Results are
// ordinary result sets (text, bigint and boolean columns), so psql renders
// them as tables and drivers scan them; both the simple and the extended
// query protocol work (commands run at Execute, Describe answers from each
// command's fixed columns). docs/admin.md describes every command and
// column.
//
// The handler only reads and drives the frontend.Listener: pause and
// maintenance live in its gate, reloads go through Listener.Reconfigure,
// and numbers come from pool snapshots and counters.
package admin
