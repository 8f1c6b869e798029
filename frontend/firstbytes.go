package frontend

import (
	"context"
	"sync/atomic"
	"syscall"
	"time"
)

// A connection that has sent nothing yet waits for its first bytes in the
// evloop (park.go), as a parked client does: no goroutine, no buffers,
// only the bare client and a timer for client_login_timeout. Its first
// bytes (or its end) start a goroutine that logs it in (firstBytes); the
// timer starts it at the login's deadline, which then fails the login
// with client_login_timeout's FATAL as before; Shutdown (closeParking)
// starts it too, and it is refused as PostgreSQL refuses a connection
// during shutdown. Where the evloop cannot take it (no epoll, or during
// Shutdown) the connection's own goroutine waits (awaitReadable).

// firstWait is a connection waiting in the evloop for its first bytes: the
// park's resumer.
type firstWait struct {
	c       *client
	ctx     context.Context
	n       int64 // the client's number, for max_client_conn
	e       *evloop
	timer   *time.Timer // client_login_timeout; nil when there is none
	expired atomic.Bool // the timer fired
}

// awaitFirstBytes parks c's socket in the evloop until it is readable or
// login passes, and reports whether it did; if not, the caller serves c
// on a goroutine of its own.
func (l *Listener) awaitFirstBytes(ctx context.Context, c *client, login time.Duration, n int64) bool {
	sc, ok := c.conn.(syscall.Conn)
	if !ok {
		return false
	}
	e := l.evloop()
	if e == nil {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil || readableNow(rc) {
		return false // most clients: their startup packet came with the connection
	}
	w := &firstWait{c: c, ctx: ctx, n: n, e: e}
	if login > 0 {
		w.timer = time.AfterFunc(login, w.timeout)
	}
	l.silent.Add(1)
	key, err := e.park(rc, &c.parkArmed, &c.parkKey, w, false)
	if err != nil {
		l.silent.Add(-1)
		if w.timer != nil {
			w.timer.Stop()
		}
		return false
	}
	// A timer that fired before the park was stored woke nothing.
	if w.expired.Load() {
		e.wake(key)
	}
	return true
}

// timeout wakes the park at the login's deadline.
func (w *firstWait) timeout() {
	w.expired.Store(true)
	w.e.wake(unpackParkKey(w.c.parkKey.Load()))
}

// resume serves the connection, on the evloop's new goroutine.
func (w *firstWait) resume() {
	c := w.c
	c.l.silent.Add(-1)
	if w.timer != nil {
		w.timer.Stop()
	}
	if c.l.shutting.Load() {
		c.conn.SetReadDeadline(time.Now()) // refused at once (firstBytes)
	}
	c.serve(func() error { return c.firstBytes(w.ctx, w.n) })
}

// readableNow reports whether the socket of rc has bytes to read (or is at
// its end, or failed) now, without reading them.
func readableNow(rc syscall.RawConn) bool {
	ready := false
	rc.Control(func(fd uintptr) { ready = peekReady(fd) })
	return ready
}
