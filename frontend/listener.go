package frontend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/internal/swapsock"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// State is one configuration snapshot with the pools built for it. It is
// swapped as a whole on reload.
type State struct {
	Config *config.Config
	Pools  *pool.Registry
	TLS    *tls.Config // nil when clients cannot use TLS

	routers routers // one router per sharded database, built on first use
}

// NewState builds the runtime state for cfg.
func NewState(cfg *config.Config, log *slog.Logger) (*State, error) {
	st := &State{Config: cfg, Pools: pool.NewRegistry(cfg, log)}
	if cfg.TLS != nil && cfg.TLS.Cert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLS.Cert, cfg.TLS.Key)
		if err != nil {
			return nil, fmt.Errorf("tls: load key pair: %w", err)
		}
		st.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return st, nil
}

// AdminHandler serves connections to the admin database. It is set by the
// caller (package admin) so that frontend does not depend on it.
type AdminHandler interface {
	Serve(ctx context.Context, cl *AdminConn) error
}

// Listener accepts clients and runs them.
type Listener struct {
	log       *slog.Logger
	state     atomic.Pointer[State]
	stmts     stmtCache
	sqlStmts  sqlStmtCache
	quiet     *quietTexts   // unnamed Parse texts with nothing to analyze (quiet.go)
	ddlGen    atomic.Uint64 // schema changes seen (see genKey)
	verifiers verifiers
	Admin     AdminHandler
	ctl       control // pause, maintenance and reload (gate.go, admin_api.go)

	// TwoPhaseHookForTest, when set, runs at each stage of a two-phase
	// commit: "prepared" (every shard prepared, no decision yet) and
	// "decided" (decision logged, COMMIT PREPARED not sent). Crash tests
	// kill the proxy there.
	TwoPhaseHookForTest func(stage string)
	// CheckoutHookForTest, when set, runs each time a client checked a
	// server out for shard (0 for a one-shard database), before anything
	// of the client's goes to it. Retry tests end the server's backend
	// there, in the window no probe covers.
	CheckoutHookForTest func(shard int, s *pool.Server)

	ids    *executor.IDGenerator // shardgate.unique_id()
	routes routeStats            // statements of sharded databases by route
	coord  *executor.Coordinator // two-phase commit: transaction ids
	// inDoubt is what the last two-phase resolver pass left (twophase.go).
	inDoubt atomic.Pointer[[]InDoubt]

	nextID     atomic.Uint64
	clientsNum atomic.Int64
	silent     atomic.Int64 // connections waiting in the evloop for their first bytes (firstbytes.go)
	shutting   atomic.Bool

	parking  parker     // idle clients without goroutines (park.go)
	startups startupSet // the clients' startup parameter sets, shared (login.go)
	hot      hotState   // the event loop of limits.event_loop (hot.go)

	mu      sync.Mutex // guards the following
	ln      net.Listener
	clients map[uint32]*client // by the pid handed out in BackendKeyData
	wg      sync.WaitGroup
}

// NewListener returns a Listener serving st.
func NewListener(st *State, log *slog.Logger) *Listener {
	l := &Listener{log: log, clients: map[uint32]*client{}, ids: executor.NewIDGenerator(st.Config.NodeID)}
	l.coord = executor.NewCoordinator(fmt.Sprintf("%08x%08x", randUint32(), randUint32()), log)
	l.coord.Knobs.AtStage = func(stage string) {
		if f := l.TwoPhaseHookForTest; f != nil {
			f(stage)
		}
	}
	l.stmts = newStmtCache(&l.ddlGen)
	l.sqlStmts = newSQLStmtCache(&l.ddlGen)
	l.quiet = newQuietTexts()
	l.state.Store(st)
	return l
}

// State returns the current state.
func (l *Listener) State() *State { return l.state.Load() }

// SetState installs a new state; clients read it at their next login or
// checkout.
func (l *Listener) SetState(st *State) { l.state.Store(st) }

// Serve accepts connections on ln until Shutdown or an accept error that
// is not transient. A connection accepted once Shutdown began is closed
// unserved.
func (l *Listener) Serve(ctx context.Context, ln net.Listener) error {
	l.mu.Lock()
	if l.shutting.Load() {
		l.mu.Unlock()
		ln.Close()
		return nil
	}
	l.ln = ln
	l.mu.Unlock()
	var backoff time.Duration // the pause after a transient accept error
	var logged time.Time      // the last such error logged: one a second
	for {
		conn, err := ln.Accept()
		if err != nil {
			if l.shutting.Load() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			if !acceptTransient(err) {
				return fmt.Errorf("accept: %w", err)
			}
			// Out of descriptors (a flood of connections, or
			// max_client_conn above the process's limit) or of
			// kernel memory: the connections already served go on, and
			// accepting resumes once some close, as PgBouncer's
			// does. Ending Serve would stop the whole proxy.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if now := time.Now(); now.Sub(logged) >= time.Second {
				logged = now
				l.log.Error("cannot accept connections; retrying", "err", err, "pause", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil
			}
			continue
		}
		backoff = 0
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
			tc.SetKeepAlive(true)
		}
		if !l.track() {
			conn.Close() // accepted as Shutdown closed ln
			return nil
		}
		l.accepted(ctx, conn)
	}
}

// acceptTransient reports whether an accept error passes by itself: a
// timeout, a lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
// ENOMEM), which closing connections cures, or a connection the peer
// aborted before it was accepted (ECONNABORTED).
func acceptTransient(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ECONNABORTED)
}

// track counts a client goroutine about to start, for Shutdown to wait
// for, unless Shutdown has begun. Both hold mu, so that no goroutine is
// added once Shutdown may be waiting (WaitGroup forbids an Add from zero
// concurrent with Wait, and the client would outlive Shutdown).
func (l *Listener) track() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shutting.Load() {
		return false
	}
	l.wg.Add(1)
	return true
}

// accepted starts serving a client that just connected. Until its first
// bytes arrive it waits in the evloop (awaitFirstBytes) with no goroutine;
// where it cannot, its own goroutine waits.
func (l *Listener) accepted(ctx context.Context, conn net.Conn) {
	n := l.clientsNum.Add(1)
	c := newBareClient(l, conn)
	st := l.State()
	c.loginDeadline(st.Config.Limits.ClientLoginTimeout)
	if l.awaitFirstBytes(ctx, c, st.Config.Limits.ClientLoginTimeout, n) {
		return
	}
	go c.serve(func() error { return c.firstBytes(ctx, n) })
}

// firstBytes waits until the client's first bytes arrive, then logs it in
// and serves it. Until then a client holds no buffers (48 KiB): connections
// that send nothing, thousands of them up to max_client_conn, cost little
// until their login times out. n is the client's number among the
// Listener's clients, for max_client_conn.
func (c *client) firstBytes(ctx context.Context, n int64) error {
	l := c.l
	err := awaitReadable(c.conn)
	c.buffers(1 << 30)
	if err != nil {
		if l.shutting.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			// Shutdown woke a connection that sent nothing yet.
			c.sendFatal(wire.Fatalf(wire.CannotConnectNow, "the database system is shutting down"))
			return err
		}
		return c.loginFailed(err)
	}
	st := l.State()
	if max := st.Config.Limits.MaxClientConn; max > 0 && n > int64(max) {
		c.refuse(wire.Fatalf(wire.TooManyConnections, "sorry, too many clients already"),
			fmt.Sprintf("max_client_conn (%d) reached", max))
		return nil
	}
	return c.run(ctx, st)
}

// serve runs fn, a part of the client's life, on the current goroutine,
// and ends the client when fn returns, unless the client parked (then its
// life goes on in a later serve, see park.go). It is the one place a
// client goroutine recovers a panic.
func (c *client) serve(fn func() error) {
	parked := false
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("client goroutine panicked", "client", c.id, "panic", r, "stack", string(debug.Stack()))
			if c.w == nil {
				c.unparked()
			}
			c.sendFatal(wire.Fatalf(wire.InternalError, "internal error in shardgate: %v", r))
			c.dropServers()
		} else if parked {
			return
		}
		c.finish()
	}()
	err := fn()
	if err == errParked || err == errOnLoop {
		parked = true
		return
	}
	if err != nil {
		c.log.Debug("client closed", "err", err)
	}
}

// finish ends the client: it leaves the table of cancel keys, its socket
// is closed, and Shutdown stops waiting for it.
func (c *client) finish() {
	c.l.unregister(c)
	c.close()
	c.l.clientsNum.Add(-1)
	c.l.wg.Done()
}

// dropServers gives back what a client whose goroutine panicked holds:
// every server (each shard's, and the one-shard server), marked broken so
// that its pool closes it instead of lending a connection in an unknown
// state (a half-sent batch, an open transaction) and frees its slot, and
// its place at the database's gate. It recovers a panic of its own: the
// client is being closed anyway, and the process must not go with it.
func (c *client) dropServers() {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("dropping the servers of a panicked client panicked", "panic", r)
		}
	}()
	c.setCancelTarget(nil) // before another client can have the servers
	if c.xs != nil {
		for i := range c.xs.Len() {
			if s := c.xs.Server(i); s != nil && s == c.server {
				c.server = nil // the shard's server, as the one the relay used
			}
		}
		c.xs.Drop()
	}
	if s := c.server; s != nil {
		c.server = nil
		s.Broken = true
		c.unhotServer(s)
		serverPool(s, c.pool).Checkin(s)
	}
	c.release()
}

func (l *Listener) register(c *client) {
	l.mu.Lock()
	for {
		if _, taken := l.clients[c.pid]; !taken && c.pid != 0 {
			break
		}
		c.pid = randUint32()
	}
	l.clients[c.pid] = c
	l.mu.Unlock()
}

func (l *Listener) unregister(c *client) {
	l.mu.Lock()
	if l.clients[c.pid] == c {
		delete(l.clients, c.pid)
	}
	l.mu.Unlock()
}

// cancel forwards a client's CancelRequest to every server it holds (one,
// or one per shard a sharded client holds), at once, and waits until each
// is sent.
func (l *Listener) cancel(pid uint32, secret []byte) {
	l.mu.Lock()
	c := l.clients[pid]
	l.mu.Unlock()
	if c == nil || !c.secretMatches(secret) {
		l.log.Debug("cancel request for unknown client", "pid", pid)
		return
	}
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	var wg sync.WaitGroup
	c.cancelMu.Lock()
	targets := c.cancelTarget.Load()
	for t := targets; t != nil; t = t.next {
		if t.srv != nil {
			t.srv.CancelStarted()
		}
	}
	c.cancelMu.Unlock()
	for t := targets; t != nil; t = t.next {
		wg.Go(func() {
			if t.srv != nil {
				defer t.srv.CancelFinished()
			}
			if err := pool.SendCancel(ctx, t.addr, t.pid, t.secret); err != nil {
				l.log.Warn("cancel failed", "client", c.id, "server", t.addr, "err", err)
			}
		})
	}
	wg.Wait()
}

// Clients returns a snapshot of connected clients, for the admin database.
func (l *Listener) Clients() []ClientInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]ClientInfo, 0, len(l.clients))
	for _, c := range l.clients {
		out = append(out, c.info())
	}
	return out
}

// Kill closes the client with the given id; it reports whether one was
// found.
func (l *Listener) Kill(id uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.clients {
		if c.id == id {
			c.kill()
			return true
		}
	}
	return false
}

// Shutdown stops accepting, lets clients finish their transactions, closes
// idle clients with 57P01, and waits until all clients are gone or ctx ends
// (then closes the rest).
func (l *Listener) Shutdown(ctx context.Context) error {
	l.mu.Lock()
	l.shutting.Store(true) // under mu: see track
	if l.ln != nil {
		l.ln.Close()
	}
	for _, c := range l.clients {
		c.wakeIfIdle()
	}
	l.mu.Unlock()
	l.closeParking() // resumes every parked client, which the nudge may have missed
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	// With every client gone, nothing plans any more: close the catalog
	// connections (the caller closes the pools).
	defer func() { l.State().retire() }()
	defer l.closeHot() // after the clients, whose coroutines it runs
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		for _, c := range l.clients {
			// The socket, under a TLS session too: crypto/tls's Close
			// would write its close_notify from this goroutine, and a
			// client's socket on the event loop may only wait in its
			// coroutine. The client's own close ends the session.
			swapsock.Under(c.conn).Close()
		}
		l.mu.Unlock()
		<-done
		return fmt.Errorf("shutdown: clients still connected after timeout: %w", ctx.Err())
	}
}
