// Package pool owns server connections and the pools that lend them out.
//
// # Layers
//
// A Server is one authenticated connection to a PostgreSQL server. It is
// established by pgconn (so every authentication method and sslmode that
// pgconn knows works towards servers) and then hijacked: from then on the
// proxy reads and writes frames on it directly. A Server remembers what the
// proxy needs to reuse it safely across clients: the parameters the server
// reported, the session settings applied to it (Session), and the names of
// the proxy-wide prepared statements it holds (Prepared).
//
// A Pool lends Servers of one database × user × shard × role. Checkout is
// LIFO (the warmest connection first), waiting clients are served FIFO, and
// a checkout waits at most checkout_timeout before it fails with an error
// the client sees (SQLSTATE 53300). Pools keep min_size connections open,
// close connections idle longer than idle_timeout or older than
// server_lifetime, and replace connections that broke.
//
// # Lifecycle of a Server
//
// A Server is idle (in the pool) or checked out (owned by exactly one client
// goroutine). The owner returns it with Checkin; if the owner saw the
// connection break, or could not bring it back to a clean idle state, it
// marks it Broken first and Checkin closes it. Only the owner touches a
// checked-out Server, so Server needs no locking.
//
// Registry holds every Pool of one config snapshot, keyed by Key, and
// creates pools lazily on first use.
package pool
