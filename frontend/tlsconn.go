package frontend

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"
)

// tlsSocket is the connection under a TLS client's crypto/tls.Conn: the
// client's TCP or Unix socket until the client moves to the event loop
// (goHot), its fdConn from then on. crypto/tls cannot change the conn it
// encrypts over, so the TLS session, with its keys, sequence numbers and
// any records read ahead, stays where it is and only the socket under it
// changes: the client's bytes go through the same crypto/tls.Conn before
// and after, on the loop its reads and writes of the socket yield to the
// loop like a plain client's.
//
// The socket is swapped once, by the login goroutine before anything else
// knows the client; it is atomic because Shutdown's and KILL's deadlines
// (nudge) may reach it from other goroutines once the client is
// registered.
type tlsSocket struct {
	conn atomic.Pointer[net.Conn]
}

func newTLSSocket(c net.Conn) *tlsSocket {
	s := &tlsSocket{}
	s.conn.Store(&c)
	return s
}

func (s *tlsSocket) get() net.Conn { return *s.conn.Load() }

// swap makes c the socket under the TLS session.
func (s *tlsSocket) swap(c net.Conn) { s.conn.Store(&c) }

func (s *tlsSocket) Read(p []byte) (int, error)         { return s.get().Read(p) }
func (s *tlsSocket) Write(p []byte) (int, error)        { return s.get().Write(p) }
func (s *tlsSocket) Close() error                       { return s.get().Close() }
func (s *tlsSocket) LocalAddr() net.Addr                { return s.get().LocalAddr() }
func (s *tlsSocket) RemoteAddr() net.Addr               { return s.get().RemoteAddr() }
func (s *tlsSocket) SetDeadline(t time.Time) error      { return s.get().SetDeadline(t) }
func (s *tlsSocket) SetReadDeadline(t time.Time) error  { return s.get().SetReadDeadline(t) }
func (s *tlsSocket) SetWriteDeadline(t time.Time) error { return s.get().SetWriteDeadline(t) }

// socketOf returns the socket a client's conn reads and writes: the conn
// itself, or the one under its TLS session.
func socketOf(c net.Conn) net.Conn {
	if tc, ok := c.(*tls.Conn); ok {
		if s, ok := tc.NetConn().(*tlsSocket); ok {
			return s.get()
		}
	}
	return c
}

// fdConn returns the client's raw socket of the event loop, under its TLS
// session if it has one; nil for a client off the loop's sockets.
func (c *client) fdConn() *fdConn {
	if f, ok := c.conn.(*fdConn); ok {
		return f
	}
	f, _ := socketOf(c.conn).(*fdConn)
	return f
}
