package frontend

import (
	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/pool"
)

// TLS on the event loop: a client's TLS session runs over a swapsock.Conn
// (negotiate), and a server's too (pool.Dial), so that moving a client or
// a server to the loop (goHot, hotServer) swaps only the socket under the
// session for an fdConn; the session, with any records it read ahead,
// stays.

// fdConn returns the client's raw socket of the event loop, under its TLS
// session if it has one; nil for a client off the loop's sockets.
func (c *client) fdConn() *fdConn {
	if f, ok := c.conn.(*fdConn); ok {
		return f
	}
	f, _ := swapsock.Under(c.conn).(*fdConn)
	return f
}

// serverFD returns s's raw socket of the event loop, under its TLS session
// if it has one; nil for a server off the loop's sockets.
func serverFD(s *pool.Server) *fdConn {
	if f, ok := s.Conn.(*fdConn); ok {
		return f
	}
	f, _ := swapsock.Under(s.Conn).(*fdConn)
	return f
}
