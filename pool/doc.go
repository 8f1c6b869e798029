// Package pool owns the proxy's connections to PostgreSQL servers and the
// pools that lend them to clients.
//
// # Layers
//
//   - Server (server.go) is one authenticated connection. Dial opens it with
//     pgconn, so every authentication method and sslmode pgconn knows works
//     towards servers, then hijacks it: from then on the proxy reads and
//     writes frames itself, through a 32 KiB wire.Reader and bufio.Writer
//     that count the bytes. A Server carries what reusing it across clients
//     needs: the parameters the server reported (Params), the SETs applied
//     for clients (Session), the proxy-wide prepared statements it holds
//     (Prepared, Unnamed), and the Startup it was opened with. Connect opens
//     an ordinary pgconn connection instead, for the proxy's catalog queries.
//   - Pool (pool.go) lends the Servers of one Key: database × user × shard ×
//     role, a replica also by its index. Startup (startup.go) and the
//     parameter cache (params.go) let one pool serve clients with different
//     startup parameters.
//   - Registry (registry.go) holds every Pool of one config snapshot, made on
//     first use by Get (primaries) and Replica. ReadPools (balance.go) orders
//     a shard's replicas for a read by the database's strategy (random,
//     round_robin, least_connections, include_primary), the primary last.
//     health.go bans failing replicas; Registry.Health reports every shard
//     server for /healthz and the admin database.
//
// # Checkout and checkin
//
// A checkout takes the most recently used idle server of its Startup (LIFO:
// warm connections first). A server idle for more than a second is probed
// first (Server.Alive: one non-blocking MSG_PEEK recv on a TCP socket),
// because an idle server sends nothing unless it is going away; expired or
// dead ones are closed. A server that died within that second is lent as
// it is: its first write fails with NothingSent, or its first answer is
// the FATAL it sent while idle, and the frontend runs the round trip again
// on another server after CloseDeadIdle probed the rest of the idle stack
// (frontend/retry.go). With no idle server of its set, the checkout opens one if fewer
// than size are open; else it closes the least recently used idle server of
// another set and opens one in that slot; else it waits in a FIFO queue, at
// most checkout_timeout, and then fails with a *wire.Error 53300 whose Hint
// says what to raise. Checkout is CheckoutStartup with the zero Startup.
//
// Checkin hands the server to the first waiter of the server's set, unless
// an earlier waiter was passed over maxPassOver times (with a single set
// this is strict FIFO); a waiter handed a server of another set closes it
// and connects in its slot. A broken or expired server, or one returned to
// a closed pool, is closed and its slot goes to the first waiter. Before
// any of this Checkin runs AbsorbCancels and, for a server that reported
// "cached plan must not change result type" (StalePlans), DEALLOCATE ALL,
// both with Server's own statements (exec).
//
// One maintenance goroutine per Pool wakes every second: it closes idle
// servers past idle_timeout (keeping min_size) or past server_lifetime, and
// opens servers with the zero Startup up to min_size, at the cold end of
// the idle stack.
//
// # Startup parameters
//
// In PostgreSQL a client's startup parameters (DateStyle, TimeZone,
// options=-c ..., search_path) are its session's reset values: RESET,
// RESET ALL and DISCARD ALL return to them, and pg_settings shows them with
// source 'client'. A SET on a pooled server cannot reproduce that, so every
// Server is opened with a Startup, and CheckoutStartup lends a client only
// Servers opened with its own set (compared by Startup.Key). The sets share
// the pool's size. The ParameterStatus values of the first server of each
// set are cached (CachedParamsFor: the zero set's for the pool's life, 64
// others evicted least recently used), so that a login can answer without
// a server.
//
// A server that refuses a client's parameter fails the connection with a
// FATAL ErrorResponse. CheckoutStartup returns it as a *StartupRejectedError
// wrapping the server's *pgconn.PgError, for the client to see unchanged;
// it frees the slot, and counts neither as a connect error nor against the
// shard's health or a replica's bans, for the server is fine.
//
// # Server lifecycle and ownership
//
// A Server is ServerIdle (in the pool), ServerActive (checked out, owned by
// exactly one client goroutine) or ServerClosed. Only the owner touches a
// checked-out Server, so its fields need no lock; it marks the Server
// Broken when the connection failed or could not be brought back to a
// clean idle state, and Checkin then closes it. The exceptions are the
// cancel counters, which the goroutines forwarding a client's cancel
// request update atomically (CancelStarted, CancelFinished).
//
// Cancel requests go out of band, on a new connection (SendCancel), and
// SendCancel waits until the server hangs up, which it does once it has
// signalled the backend. A cancel forwarded for one client must not cancel
// the next client's statement: AbsorbCancels waits until every forwarded
// cancel has landed, then runs a statement of its own that takes a cancel
// still pending (SELECT 1, tolerating 57014), or marks the server broken.
//
// # Concurrency
//
// Pool.mu guards the idle stack, the waiters, the counts and the parameter
// cache; Stats are atomic counters, updated by the pool and by its clients.
// Close stops the maintenance goroutine and waits for it, closes idle
// servers and fails waiters with ErrClosed; servers checked out meanwhile
// are closed at checkin. A checkout's context bounds its wait and its
// connection attempt (with connect_timeout).
//
// # Reload
//
// Registry.Next derives the registry of a new config: a pool whose Target
// and pool settings did not change moves over with its servers, so clients
// notice nothing; a changed one is replaced by a new Pool that shares its
// Stats. The caller closes the pools Next returns once the new registry is
// in use. A superseded registry hands out only closed pools, whose
// checkouts fail with ErrClosed, which tells a client to look at the
// current configuration. Replica bans and round_robin positions are shared
// across reloads.
//
// # Replica health
//
// A replica is banned for ban_time when a health check fails (SELECT 1 on a
// connection of its own, every health_check_interval) or when a client's
// checkout cannot connect to it (Registry.Ban); a ban ends at the first
// passed check after ban_time. Bans belong to the replica server of one
// shard, for every user. The primary is never banned. Registry.Health
// probes each shard server with an SSLRequest (no authentication; cached
// for a second) and counts a pool's connect error of the last ten seconds.
//
// Protocol references: https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-START-UP
// and https://www.postgresql.org/docs/current/protocol-flow.html#PROTOCOL-FLOW-CANCELING-REQUESTS.
package pool
