package frontend

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/clock"
	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/pool"
)

// Clients on the event loop (limits.event_loop): see the "Event loop"
// section of doc.go, hotloop.go for the loop and fdconn.go for the
// sockets. This file is where the client loop meets them: which clients go
// to the loop, where a client leaves it for a goroutine (offLoop), and where
// it comes back (hotIdle).

var (
	errNotSocket = errors.New("not a socket")
	// errOnLoop ends the login goroutine of a client whose loop went on as
	// a coroutine of the event loop: serve does not close it.
	errOnLoop = errors.New("client moved to the event loop")
	// errNoEpoll: the system has no epoll (hotloop_other.go).
	errNoEpoll = errors.New("hot loop: needs Linux (epoll)")
)

// hotState is the Listener's event loop, made at the first eligible
// client.
type hotState struct {
	mu     sync.Mutex // guards the following
	loop   *hotLoop
	failed bool
	closed bool
}

// hotLoop returns the Listener's event loop, starting it on first use; nil
// when there is none (shutdown, or no epoll).
func (l *Listener) hotLoop() *hotLoop {
	h := &l.hot
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loop != nil || h.closed || h.failed {
		return h.loop
	}
	loop, err := newHotLoop()
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, errNoEpoll) {
			level = slog.LevelInfo // the default setting, on a system without epoll
		}
		l.log.Log(context.Background(), level, "limits.event_loop: clients keep their goroutines", "err", err)
		h.failed = true
		return nil
	}
	h.loop = loop
	return loop
}

// closeHot stops the event loop (Shutdown, once every client is gone).
func (l *Listener) closeHot() {
	h := &l.hot
	h.mu.Lock()
	loop := h.loop
	h.loop, h.closed = nil, true
	h.mu.Unlock()
	if loop != nil {
		loop.close()
	}
}

// startedHot returns the Listener's event loop if one was started, without
// starting it.
func (l *Listener) startedHot() *hotLoop {
	h := &l.hot
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loop
}

// HotClients reports how many clients run as coroutines of the event loop
// now (on it or handed to a goroutine).
func (l *Listener) HotClients() int {
	if loop := l.startedHot(); loop != nil {
		return loop.running()
	}
	return 0
}

// HotHandoffs reports how often a client of the event loop was handed to
// a goroutine (offLoop) so far.
func (l *Listener) HotHandoffs() uint64 {
	if loop := l.startedHot(); loop != nil {
		return loop.offs.Load()
	}
	return 0
}

// goHot moves a client that just logged in to a raw socket of the event
// loop if it is eligible: transaction mode, TCP or a Unix socket, not
// admin, nothing buffered either way. A TLS client keeps its session: the
// raw socket goes under its crypto/tls.Conn (swapsock, tlsconn.go), whose
// reads and writes then yield to the loop as a plain client's do; records
// it read ahead stay in it and are read first. Sharded databases' clients are
// eligible too: a shard's server they check out moves to the loop as a
// one-shard client's does (attachHeld), and the steps of the sharded
// path that wait on anything else hand the client to a goroutine first
// (the shards' catalog, columnOrders and checkEquality). The caller has
// flushed the client's writer; it starts the coroutine (startHot) once
// the client is set up.
func (c *client) goHot(st *State) bool {
	if !st.Config.Limits.EventLoop || c.admin || c.mode != config.PoolTransaction ||
		c.db == nil || c.r.Buffered() > 0 || c.w.Buffered() > 0 {
		return false
	}
	sock := swapsock.Under(c.conn)
	switch sock.(type) {
	case *net.TCPConn, *net.UnixConn:
	default:
		return false
	}
	loop := c.l.hotLoop()
	if loop == nil {
		return false
	}
	f, err := newFDConn(loop, sock)
	if err != nil {
		c.log.Warn("client stays off the event loop", "err", err)
		return false
	}
	if sc := swapsock.Of(c.conn); sc != nil {
		sc.Swap(f)
	} else {
		c.conn = f
		c.r.Reset(f)
		c.w.Reset(f)
	}
	c.setCoro(&coro{})
	return true
}

// coro returns the coroutine that runs the client on the event loop, nil
// for a client with a goroutine. It is kept in the client's socket, not
// in the client struct, whose size class is what a parked client costs
// (TestClientSizeClass).
func (c *client) coro() *coro {
	if f := fdOf(c.conn); f != nil {
		return f.co.Load()
	}
	return nil
}

// mono is the clock.Mono time for the client's statistics and its
// servers' checkouts and checkins: on the event loop, the time its turn
// began (hotLoop.now, one clock read for every client the turn serves, as
// PgBouncer's cached time); elsewhere, the clock's.
func (c *client) mono() time.Duration {
	if co := c.coro(); co != nil && co.onLoop.Load() {
		return co.loop.now
	}
	return clock.Mono()
}

// setCoro makes co the coroutine of the client (nil: none, for a client
// that parks, see park).
func (c *client) setCoro(co *coro) {
	if f := fdOf(c.conn); f != nil {
		f.co.Store(co)
	}
}

func (c *client) dropCoro() { c.setCoro(nil) }

// startHot runs the client's loop as a coroutine of the event loop; false
// means the loop is closed (shutdown) and the caller serves the client on
// its goroutine (its socket's waits block).
func (c *client) startHot() bool {
	loop := c.l.hotLoop()
	if loop != nil && loop.start(c.coro(), func() { c.serve(func() error { return c.loop(c.ctx) }) }) == nil {
		return true
	}
	c.dropCoro()
	return false
}

// offLoop hands the client's coroutine to a goroutine if the event loop
// drives it: the caller may block on something else than the client's and
// its server's sockets (a pool wait, the gate, a helper goroutine reading
// one of them). The client comes back at its next hotIdle.
func (c *client) offLoop() {
	if co := c.coro(); co != nil {
		co.off()
	}
}

// hotIdle takes the client back to the event loop before it reads its
// next message, unless what it holds needs a goroutine: a pinned server
// (its watcher reads beside the loop), or a server — its own or a shard's
// — whose socket is not the loop's.
func (c *client) hotIdle() {
	co := c.coro()
	if co == nil || co.onLoop.Load() {
		return
	}
	if c.pinned || c.mode != config.PoolTransaction || !serverOnCoro(c.server, co) {
		return
	}
	if c.xs != nil {
		for i := range c.xs.Len() {
			if !serverOnCoro(c.xs.Server(i), co) {
				return
			}
		}
	}
	// The sockets' readiness flags are still right: only reads on the
	// loop clear them (fdConn.Read), and the loop sets them at every edge
	// whoever drives the client.
	co.on()
}

// serverOnCoro reports whether s is nil or a server on a raw socket of
// the loop that belongs to co.
func serverOnCoro(s *pool.Server, co *coro) bool {
	if s == nil {
		return true
	}
	f := fdOf(s.Conn)
	return f != nil && f.co.Load() == co
}

// hotCheckout checks a server out of p without leaving the event loop:
// an idle server at once, or a place in p's queue (pool.Queued) that
// another client's checkin hands a server to, waking the coroutine
// (co.wakeFn) — on the loop without the eventfd when that client runs on
// it. ok is false when the checkout must open a connection: the caller
// does that on a goroutine. The client goes to a goroutine too before a
// step that may block: opening a connection in a slot it was handed, or
// giving up at checkout_timeout or when ctx ends (pool.Queued.Cancel may
// return a server to the pool).
func (c *client) hotCheckout(ctx context.Context, co *coro, p *pool.Pool) (s *pool.Server, ok bool, err error) {
	s, q, err := p.QueueStartupAt(c.startup, co.wakeFn, co.loop.now)
	if q == nil {
		if s != nil || err != nil {
			// An idle server (or the pool's error) at once: no wait,
			// and no clock read for it (clock.Now).
			p.Stats.WaitTime.Observe(0)
		}
		return s, s != nil || err != nil, err
	}
	start := clock.Now()
	defer func() { p.Stats.WaitTime.Observe(time.Since(start)) }()
	f := fdOf(c.conn)
	stop := context.AfterFunc(ctx, co.wakeFn)
	defer stop()
	deadline := q.Deadline()
	for !q.Ready() {
		if ctx.Err() != nil || !deadline.IsZero() && !time.Now().Before(deadline) {
			c.offLoop()
			s, err := q.Cancel(ctx)
			return s, true, err
		}
		co.pause(f, deadline)
	}
	if q.Connects() {
		c.offLoop()
	}
	s, err = q.Take(ctx)
	return s, true, err
}

// hotServer gives a server the client checked out to its coroutine:
// moved to a raw socket of the loop if it is not one yet, with its waits
// the coroutine's. A server reached over TLS keeps its session, and only
// the socket under it moves (swapsock, as a TLS client's in goHot). A
// server that cannot move keeps the client off the loop until it is
// returned.
func (c *client) hotServer(s *pool.Server) {
	co := c.coro()
	if co == nil {
		return
	}
	f := fdOf(s.Conn)
	if f == nil {
		loop := c.l.hotLoop()
		var err error
		sock := swapsock.Under(s.Conn)
		switch sock.(type) {
		case *net.TCPConn, *net.UnixConn:
			if loop == nil || s.R.Buffered() > 0 || s.W.Buffered() > 0 {
				err = errNotSocket
				break
			}
			if f, err = newFDConn(loop, sock); err != nil {
				break
			}
			f.server = true
			if sc := swapsock.Of(s.Conn); sc != nil {
				sc.Swap(f)
			} else {
				err = s.SwapConn(f)
			}
		default:
			err = errNotSocket
		}
		if err != nil {
			c.offLoop()
			return
		}
	}
	f.co.Store(co)
}

// unhotServer takes a server the client returns off its coroutine,
// handing the client to a goroutine first when the checkin may block
// (pool.Server.CheckinBlocks).
func (c *client) unhotServer(s *pool.Server) {
	co := c.coro()
	if co == nil {
		return
	}
	if s.CheckinBlocks() {
		c.offLoop()
	}
	if f := fdOf(s.Conn); f != nil && f.co.Load() == co {
		f.co.Store(nil)
	}
}
