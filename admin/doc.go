// Package admin serves the virtual admin database: connect to the database
// named by admin.database (default "admin") as admin.user with
// admin.password, and run PgBouncer-style commands with psql or any
// driver. docs/admin.md describes every command and column.
//
//	SHOW POOLS | CLIENTS | SERVERS | DATABASES | SHARDS | STATS | CONFIG | VERSION | LISTS | HELP
//	SHOW TASKS | TABLE_COPIES | REPLICATION
//	RELOAD
//	PAUSE [db] / RESUME [db]
//	MAINTENANCE ON|OFF [db]
//	SET pool_size | checkout_timeout | reshard_* = value
//	KILL client_id
//	SHUTDOWN
//	RESHARD | SCHEMA_SYNC | COPY_DATA source_db destination_db [publication [slot]]
//	CUTOVER [task_id] / STOP_TASK task_id
//
// The handler answers an admin session's statements itself: they never
// reach the router or a server. The proxy's listener authenticates the
// admin login and hands the session to Handler.Serve, which runs it in the
// client's own goroutine until the client leaves, is killed, or the proxy
// shuts down (then with FATAL 57P01). One Handler serves every admin
// session of a process.
//
// # Layers
//
//   - handler.go and protocol.go speak the frontend/backend protocol as a
//     server would, with both the simple and the extended query protocol
//     (commands take no parameters). A command runs at Execute; Describe
//     answers from the command's fixed columns without running it, so that
//     drivers can prepare; Execute ignores the row limit (results are small
//     and complete). After an extended-protocol error the session skips to
//     Sync, as a server does. Answers are buffered and flushed at
//     ReadyForQuery or Flush; a command may ask for something to run once
//     its answer was flushed (SHUTDOWN answers first, then shuts down).
//   - command.go tokenizes a statement (keywords in any case, quoted
//     arguments, one command with an optional trailing semicolon) and
//     matches it against a table of specs: keywords, argument counts,
//     usage, result columns and tag. An unknown command or a wrong argument
//     count is 42601 with the usage as hint.
//   - result.go encodes rows: every column is text, bigint or boolean, in
//     the format Bind asked for, so psql renders tables and drivers scan
//     typed values.
//   - show.go reads: pool snapshots and counters, client and server lists,
//     shard health, and the effective configuration with passwords
//     redacted, flattened to one row per option path.
//   - control.go changes the running proxy. RELOAD runs the reload function
//     the proxy was started with (the one SIGHUP runs); a file that does
//     not load is F0000 with every problem in Detail, and the old
//     configuration stays. PAUSE waits until no client of the database (of
//     every database, without one) holds a server and then holds new
//     transactions until RESUME;
//     MAINTENANCE holds new transactions without waiting and survives
//     RELOAD. SET derives a new snapshot from the running one (Clone, change,
//     Validate) and installs it like a reload, until the next RELOAD; the
//     settings drivers send on connect are accepted and ignored. KILL closes
//     one client, SHUTDOWN starts the graceful shutdown.
//   - reshard.go runs the resharding commands through a replication.Manager,
//     made on first use unless the caller set Handler.Tasks. Gate adapts the
//     running proxy to what a cutover needs (pause, resume, install a
//     configuration, disconnect session-pooled clients).
//
// # Invariants
//
//   - Every error is an ErrorResponse with PostgreSQL's SQLSTATE: 42601 for
//     bad commands, 08P01 for malformed messages, 26000 and 34000 for
//     unknown statements and portals, 22023 for bad values, 42704 for
//     unknown settings and clients, 0A000 for what the admin database does
//     not offer (function calls, SHUTDOWN without a shutdown hook).
//   - SHOW commands only read (snapshots, counters, shard probes) and are
//     not logged; every other command is logged with its arguments, at Info
//     when it succeeds and at Warn when it fails.
package admin
