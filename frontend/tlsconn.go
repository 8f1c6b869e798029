package frontend

import (
	"net"

	"github.com/shardgate/shardgate/internal/swapsock"
)

// TLS on the event loop: a client's TLS session runs over a swapsock.Conn
// (negotiate), and a server's too (pool.Dial), so that moving a client or
// a server to the loop (goHot, hotServer) swaps only the socket under the
// session for an fdConn; the session, with any records it read ahead,
// stays.

// fdOf returns the raw socket of the event loop that a client's or a
// server's conn reads and writes, under its TLS session if it has one;
// nil for a conn off the loop's sockets.
func fdOf(conn net.Conn) *fdConn {
	if f, ok := conn.(*fdConn); ok {
		return f // without TLS: the one assertion on the hot path
	}
	f, _ := swapsock.Under(conn).(*fdConn)
	return f
}
