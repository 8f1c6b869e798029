// Package frontend speaks the PostgreSQL protocol to clients.
//
// # Layers
//
// Listener accepts TCP connections, enforces max_client_conn, and runs one
// goroutine per client. That goroutine negotiates the startup phase
// (SSLRequest, GSSENCRequest, CancelRequest, StartupMessage), authenticates
// the client (SCRAM-SHA-256, MD5, cleartext or trust, see auth.go), hands
// out the proxy's own BackendKeyData, and then runs the client's message
// loop (client.go).
//
// # Message loop and server attachment
//
// The loop reads one client message at a time. The first message of a
// transaction checks a server out of the pool ("attach"); messages are
// batched until Sync, Flush or a simple Query, written to the server in one
// write, and the server's answers are relayed back (relay.go) until every
// message of the batch has been answered. In transaction mode the server is
// returned to the pool when it reports ReadyForQuery with status 'I', no
// request is outstanding and no extended-protocol batch is open (a batch
// ended by Flush lasts until its Sync: it is an implicit transaction, and
// after an error the server skips to that Sync); in session mode at
// disconnect, after DISCARD ALL. A client that disconnects mid-batch has
// what it did not finish dropped, the batch closed with Sync and its
// transaction rolled back.
//
// The relay tracks one expected-response entry per message sent (see req),
// which is how it knows when a Flush has been fully answered, which
// ParseComplete/CloseComplete answers belong to messages the proxy injected
// (and must not reach the client), and when the session-restoring SETs the
// proxy prepends have finished.
//
// # Session state and prepared statements in transaction mode
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
// objects (temporary tables, advisory locks, WITH HOLD cursors, LISTEN):
// while any exists the client keeps its server (pinned). Session-mode and
// pinned servers are cleaned with ROLLBACK and DISCARD ALL when the client
// leaves; any failed undo closes the server.
//
// Named prepared statements are mapped to proxy-wide names (prepared.go)
// so that a client's statement survives moving to another server: Parse is
// sent to a server only when it lacks the statement, and a client's Close
// never closes a shared statement. SQL-level PREPARE/EXECUTE/DEALLOCATE
// are rewritten onto proxy-wide statements in the same way
// (sqlprepare.go). A client holding no server hears ParseComplete for a
// statement that a server has accepted before without checking one out
// (answerWithoutServer). The bookkeeping follows PostgreSQL: a Parse the
// server rejects or skips creates nothing, a simple Query drops the
// unnamed statement, and DEALLOCATE ALL and DISCARD ALL drop statements
// when they complete (they are not transactional).
//
// docs/pooling.md states the resulting semantics per pool mode.
//
// # Invariants
//
//   - A checked-out server is touched only by the client goroutine that owns
//     it; cancel requests read the owner's cancel targets (every server it
//     holds: one per shard on a sharded database) through an atomic
//     pointer, which the owner clears before it returns the servers.
//   - The client sees exactly one answer per message it sent, in order.
//   - Errors a client can cause are ErrorResponses with SQLSTATEs (package
//     wire); a panic in a client goroutine is recovered, logged, and only
//     that client is closed with XX000.
//
// Protocol reference: https://www.postgresql.org/docs/current/protocol.html
package frontend
