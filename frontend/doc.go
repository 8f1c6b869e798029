// Package frontend speaks the PostgreSQL protocol to clients: it is the
// one place a client's connection is read and written.
//
// # Layers and files
//
//   - listener.go: Listener accepts TCP connections, enforces
//     max_client_conn, and runs one goroutine per client (serve); it routes
//     CancelRequests to the client that owns the key, and shuts down
//     gracefully (Shutdown).
//   - park.go, evloop.go, parkconn.go: idle clients without goroutines. A
//     client of a non-sharded transaction-mode database (TCP or a Unix
//     socket, TLS on the event loop included, not admin) that holds
//     nothing and has nothing buffered parks: its buffers
//     go back to the Listener's pools (dropped when no client takes one for
//     a sweep period), its socket, reduced to a bare descriptor (parkedConn;
//     c.conn changes under the Listener's mu), into the evloop's epoll set,
//     and its goroutine returns; the socket becoming readable (or hung up)
//     resumes the client loop on a new goroutine, with a net.Conn made
//     again. limits.client_park_after says when (0: at every idle point;
//     during a login burst the sweep that parks idle clients runs every
//     100 ms, so that the burst's goroutines do not pile up).
//   - hot.go, hotloop.go, fdconn.go: the event loop (limits.event_loop,
//     on by default): eligible clients' loops run as coroutines of one
//     goroutine blocked in epoll_wait over raw sockets; see "Event loop"
//     below.
//   - startup.go, auth.go, login.go: the startup phase (SSLRequest,
//     GSSENCRequest, CancelRequest, StartupMessage), authentication
//     (SCRAM-SHA-256, MD5, cleartext, trust), the proxy's own
//     BackendKeyData. Clients that sent the same startup parameters
//     share one set (startupSet, login.go): an idle client keeps it for
//     its whole life.
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
// # Event loop
//
// With limits.event_loop, a client of a transaction-mode database, sharded
// or not, over TCP or a Unix socket, not admin, is moved after login
// (goHot, before it is registered and sees ReadyForQuery, with nothing
// buffered either way) to an fdConn: its descriptor duplicated and the
// net.Conn closed, which takes the socket out of Go's netpoller; it is
// registered once, edge-triggered, in the hotLoop's epoll set. A TLS
// client keeps its crypto/tls session, and only the socket under it
// changes (internal/swapsock, tlsconn.go): records the session read ahead
// are read before the socket, and a goroutine other than the client's
// closes such a client's socket, not its session, whose close_notify
// would be a write from outside the coroutine (Shutdown's timeout). A
// server reached over TLS moves the same way (hotServer). Its client
// loop — the same code as every client's, from c.loop down — then runs as
// an iter.Pull coroutine (coro) that the hotLoop goroutine resumes. A
// server it checks out is moved to an fdConn the same way (hotServer,
// pool.Server.SwapConn) and stays one for its life, whoever uses it next;
// on a sharded database every shard's server the executor.Session holds
// (attachHeld), taken off the coroutine again when the session lets it go
// (executor.Session.Releasing, at Detach). The sharded path runs on the
// loop as it is: it reads and writes only the client's and the held
// servers' sockets, one after the other, with no goroutine of its own.
//
// An fdConn reads and writes with raw system calls (recvfrom and sendto
// by syscall.RawSyscall6, up to 64 KiB; internal/sockio): the socket is
// non-blocking, so the call never waits, and the runtime's
// entersyscall/exitsyscall around it are pure cost (docs/benchmarks.md,
// issue 13, second step).
//
// The loop goroutine yields its P every few milliseconds
// (loopYieldEvery): to the runtime it never stops running, and sysmon
// would otherwise preempt it every 10 ms and take its P, which sets sysmon
// polling every 20 µs (issue 13, ninth step). For the same reason a loop
// that is idle (a wait of loopIdleAfter or more in the last loopIdleHold)
// waits in Go's netpoller rather than in epoll_wait (idleWait): its epoll
// instance sits inside a second one that the netpoller watches.
//
// A coroutine is in one of two places:
//
//   - on the loop (co.onLoop): the loop goroutine runs it. A read or write
//     of its client's or its server's socket that would block yields
//     (coroWait, with the conn in co.waiting); the loop resumes it when
//     epoll reports that socket, when a deadline the wait armed passes, or
//     when another goroutine sets a deadline on or closes the conn
//     (fdConn.nudge: Shutdown's and KILL's SetReadDeadline(time.Now()), a
//     cutover's nudge, a forced Close). Nothing else may block there: the
//     loop serves every other client meanwhile.
//   - on a goroutine: before anything that may block on something else
//     than its two sockets, the coroutine calls offLoop, which yields
//     coroOff; the loop starts a goroutine (coro.drive) that resumes it,
//     and it goes on exactly where it was, on that goroutine, with its
//     sockets' waits blocking (on a channel the loop signals at each edge,
//     or a deadline's timer). The places: a checkout that must open a
//     connection, or give up at checkout_timeout, or that reads from
//     replicas (a checkout of the primary that only has to wait for a
//     server waits on the loop: hotCheckout queues it with
//     pool.QueueStartup, and the checkin that hands it a server wakes the
//     coroutine; a checkin on the loop queues the wake for the loop's
//     current turn, without the eventfd), a closed gate
//     (admit), COPY FROM STDIN (copyIn's watcher reads the server beside
//     the client), a batch over 256 KiB (its writer goroutine), a pinned
//     session's server watcher, a checkin that must absorb a cancel or
//     reset stale plans (pool.Server.CheckinBlocks), a cutover moving an
//     idle or pinned session, a database that became sharded, a merge
//     that reads the shards' catalog over connections of its own
//     (columnOrders, checkEquality), a server that cannot move to an
//     fdConn (one whose TLS session is not over a swapsock.Conn; the
//     pool's are).
//
// The coroutine returns to the loop at the top of the client loop, before
// it reads the next message (hotIdle, coroOn), unless what it holds needs
// its goroutine: a pinned server (its watcher), a server — its own or a
// shard's — that is not an fdConn of the coroutine. Invariants:
//
//   - Exactly one driver runs a coroutine at a time: the loop between
//     coroOff and the end of the goroutine's resume is not its driver, and
//     the goroutine hands it back (adopt) only after it yielded coroOn.
//     co.onLoop changes only at those two points.
//   - A conn's co is set only while the client owns it (the client socket
//     for its life; a server from checkout to checkin, cleared before the
//     server goes back to the pool), and a conn yields to the loop only
//     while that coroutine is on the loop, so that helper goroutines (the
//     COPY and session watchers, the big-batch writer, pool goroutines
//     probing or closing idle servers) always block instead.
//   - Readiness flags are only ever too optimistic: the loop sets them at
//     every edge, whoever drives the client, and only a read or write on
//     the loop clears them, so a coroutine coming back never misses data.
//   - A waiter publishes what it waits on (co.waiting, blockWait.waiting)
//     before its last look at the deadline and the conn's state, and a
//     nudger changes those before it looks at the waiter: one of the two
//     sees the other.
//   - A descriptor is closed only when no call uses it any more (fdConn's
//     reference count) and after it left the loop's table, so that a
//     number reused by a new socket never gets the old one's events.
//   - A client on the loop parks as others do (park.go): its coroutine
//     ends with errParked, its socket stays registered with the loop (whose
//     edges find no coroutine waiting), and the evloop's wake starts a new
//     coroutine on the loop (resume). A TLS client parks with its session,
//     after tlsDrained read what crypto/tls held of the client's into its
//     reader. The loop stops in Shutdown after the last client ended.
//
// # Invariants
//
//   - A client is served by at most one goroutine (or coroutine driver,
//     see Event loop) at a time: the one
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
