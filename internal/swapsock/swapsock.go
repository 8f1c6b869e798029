// Package swapsock is the socket under a TLS session that can be
// replaced: crypto/tls cannot change the conn it encrypts over, and the
// frontend's event loop moves a client's or a server's socket to a raw
// descriptor of its own after the session is set up (frontend/hot.go). A
// Conn sits between crypto/tls and the socket from the start; Swap
// replaces the socket, and the TLS session, with its keys, sequence
// numbers and any records it read ahead, goes on over the new one.
package swapsock

import (
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"
)

// Conn is a net.Conn that forwards to its current socket.
//
// Its owner swaps the socket while nothing reads or writes it; the
// socket is atomic because other goroutines may set deadlines on the
// conn meanwhile (a Shutdown's or KILL's nudge).
type Conn struct {
	sock atomic.Pointer[net.Conn]
}

// New returns a Conn over sock.
func New(sock net.Conn) *Conn {
	c := &Conn{}
	c.sock.Store(&sock)
	return c
}

// Socket returns the current socket.
func (c *Conn) Socket() net.Conn { return *c.sock.Load() }

// Swap makes sock the socket that c reads and writes.
func (c *Conn) Swap(sock net.Conn) { c.sock.Store(&sock) }

func (c *Conn) Read(p []byte) (int, error)         { return c.Socket().Read(p) }
func (c *Conn) Write(p []byte) (int, error)        { return c.Socket().Write(p) }
func (c *Conn) Close() error                       { return c.Socket().Close() }
func (c *Conn) LocalAddr() net.Addr                { return c.Socket().LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.Socket().RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.Socket().SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.Socket().SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.Socket().SetWriteDeadline(t) }

// Under returns the socket that conn reads and writes: the current
// socket of the Conn under conn's TLS session, or of conn if it is a
// Conn; else conn itself (a TLS session over a plain socket included,
// whose socket cannot be taken from under it).
func Under(conn net.Conn) net.Conn {
	if c := Of(conn); c != nil {
		return c.Socket()
	}
	return conn
}

// Of returns the Conn under conn's TLS session, or conn itself if it is
// a Conn; nil if there is none.
func Of(conn net.Conn) *Conn {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	c, _ := conn.(*Conn)
	return c
}
