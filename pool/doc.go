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
// # Startup parameters
//
// In PostgreSQL a client's startup parameters (DateStyle, TimeZone,
// options=-c ..., search_path) are its session's reset values: RESET,
// RESET ALL and DISCARD ALL return to them, and pg_settings shows them with
// source 'client'. A SET on a pooled server cannot reproduce that, so every
// Server is opened with a Startup, a set of startup parameters, and
// CheckoutStartup lends a client only Servers opened with its own set
// (compared by Startup.Key). Checkout is CheckoutStartup with the zero
// Startup, the set min_size connections are opened with.
//
// The servers of all sets share the pool's size. A checkout takes the most
// recently used idle server of its set; else opens one if the pool has
// room; else closes the least recently used idle server of another set and
// opens one in its slot; else waits. A checkin hands its server to the
// first waiter of the server's set, so that it is not closed and replaced,
// unless an earlier waiter was passed over maxPassOver times; a waiter
// handed a server of another set closes it and opens its own in that slot.
// A slot whose connection failed goes to the next waiter. Parameter
// statuses (what a login reports without a server) are cached per set, for
// a bounded number of sets.
//
// A server that refuses a client's parameter (an unknown setting, a bad
// value, a superuser-only one) fails the connection with a FATAL
// ErrorResponse. CheckoutStartup returns it as a *StartupRejectedError
// wrapping the server's *pgconn.PgError, for the client to see unchanged;
// it frees the slot and counts neither as a connect error nor against the
// shard's health, for the server is fine.
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
