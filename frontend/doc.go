// Package frontend speaks the PostgreSQL protocol to clients: it is the
// one place a client's connection is read and written.
//
// # Layers and files
//
//   - listener.go: Listener accepts TCP connections, enforces
//     max_client_conn, and runs one goroutine per client (serve); it routes
//     CancelRequests to the client that owns the key, and shuts down
//     gracefully (Shutdown).
//   - park.go, evloop.go: idle clients without goroutines. A client of a
//     non-sharded transaction-mode database (plain TCP, not admin) that
//     holds nothing and has nothing buffered parks: its buffers go back to
//     the Listener's pools, its socket into the evloop's epoll set, and its
//     goroutine returns; the socket becoming readable (or hung up) resumes
//     the client loop on a new goroutine. limits.client_park_after says
//     when (0: at every idle point).
//   - startup.go, auth.go, login.go: the startup phase (SSLRequest,
//     GSSENCRequest, CancelRequest, StartupMessage), authentication
//     (SCRAM-SHA-256, MD5, cleartext, trust), the proxy's own
//     BackendKeyData.
//   - client.go, query.go, relay.go: the message loop. A simple Query, or
//     extended-protocol messages up to Sync or Flush, are written to the
//     client's server in one write (query.go); relay.go relays the answers
//     back until every message sent has been answered. state.go names the
//     loop's states.
//   - session.go, settle.go, prepared.go, sqlprepare.go, watch.go:
//     transaction pooling made invisible — the client's settings, role
//     and prepared statements follow it from server to server.
//   - route.go, sharded*.go, shardinit.go, fanout.go, copy.go, resharded.go,
//     sessionmove.go, idlemove.go: sharded databases, and sessions a
//     resharding cutover moves. route.go turns the router's decision into an
//     executor.Plan; the shards' servers and the transaction over them are
//     an executor.Session (c.xs), which runs fan-out, COPY split and
//     two-phase commit; sharded_ext.go runs the extended protocol over it.
//   - gate.go, balance.go, admin.go, admin_api.go: the pause/maintenance
//     gate a transaction passes before it checks out a server, replica
//     balancing, and the admin database's connection (answered by
//     package admin through AdminHandler).
//
// docs/architecture.md follows one query through these files.
//
// # Lifecycle of a client
//
// A client is ClientLogin until it is authenticated, then ClientIdle
// between transactions (with or without a goroutine: parked clients are
// idle ones), ClientWaiting while
// the pool has no server for it, ClientActive while it holds one, and
// ClientClosed (state.go). What it holds is its binding: nothing, one
// server (c.server), servers of several shards (c.xs), or the admin
// database. In transaction mode the server is returned to the pool when it
// reports ReadyForQuery with status 'I', no answer is outstanding and no
// extended-protocol batch is open (a batch ended by Flush lasts until its
// Sync: it is an implicit transaction, and after an error the server skips
// to that Sync); in session mode, and while session objects pin it, at
// disconnect after ROLLBACK and DISCARD ALL. Any failed reset or restore
// closes the server instead. A client that disconnects mid-batch has what
// it did not finish dropped, the batch closed with Sync and its
// transaction rolled back.
//
// The relay keeps one expected answer per message sent (req, reqKind),
// which is how it knows when a Flush has been fully answered, which
// ParseComplete/CloseComplete answers belong to messages the proxy injected
// (and must not reach the client), and when the session-restoring
// statements the proxy sends first have finished. The pipeline's
// conditions — the server is inside a batch, skipping to Sync after an
// error, the proxy dropping to Sync after failing a message itself, an
// error since the last ReadyForQuery — are one pipe value (state.go).
//
// # Session state in transaction mode
//
// Servers are opened with the client's startup parameters (the pool lends
// a server only to clients with the same set), so PostgreSQL knows them as
// reset values. SET/RESET/DISCARD are tracked per client in every protocol
// path (session.go: a cheap word scan, then pg_query for the statements
// that need it); on attach the proxy brings the server's settings to the
// client's in a round trip of its own, role and session authorization
// last. When a transaction ends, settle.go reads settings back from the
// server where the proxy could not follow them (set_config, ROLLBACK TO,
// a reported setting changed by a function), and probes for session
// objects (temporary tables, advisory locks, WITH HOLD cursors, LISTEN,
// SQL-level prepared statements of the client's own): while any exists
// the client keeps its server (pinned). A resharding cutover moves a
// session with its settings, prepared statements (SQL-level ones too) and
// LISTEN channels to the new servers; the other session objects cannot
// move, and end the session with 57P01 (resharded.go, sessionmove.go). A
// session that listens moves at the cutover itself, woken in its idle
// read (idlemove.go), so that it does not miss notifications on the new
// servers while it sends nothing.
//
// Named prepared statements are mapped to proxy-wide names (prepared.go)
// so that a client's statement survives moving to another server: Parse is
// sent to a server only when it lacks the statement, and a client's Close
// never closes a shared statement. SQL-level PREPARE/EXECUTE/DEALLOCATE
// are rewritten onto proxy-wide statements in the same way
// (sqlprepare.go). The bookkeeping follows PostgreSQL: a Parse the server
// rejects or skips creates nothing, a simple Query drops the unnamed
// statement, and DEALLOCATE ALL and DISCARD ALL drop statements when they
// complete (they are not transactional). docs/pooling.md states the
// resulting semantics per pool mode.
//
// # Invariants
//
//   - A client is served by at most one goroutine at a time: the one
//     that parks it returns without touching it again, and only the evloop
//     starts the next (park.go). Everything the client loop needs between
//     messages lives in the client struct, not in goroutine locals.
//   - A checked-out server is touched only by the client goroutine that owns
//     it; cancel requests read the owner's cancel targets (every server it
//     holds: one per shard on a sharded database) through an atomic
//     pointer, which the owner clears before it returns the servers, and a
//     cancel in flight is absorbed before the server can serve another
//     client (pool.Server.AbsorbCancels).
//   - The client sees exactly one answer per message it sent, in order.
//   - Errors a client can cause are ErrorResponses with PostgreSQL's
//     SQLSTATEs (package wire); server errors are classified by SQLSTATE,
//     never by message text. A panic in a client goroutine is recovered,
//     logged, its servers are closed, and only that client is closed with
//     XX000.
//
// Protocol reference: https://www.postgresql.org/docs/current/protocol.html
package frontend
