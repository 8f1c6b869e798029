package frontend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/metrics"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// The gate.
//
// Every checkout goes through the gate of the client's database first
// (client.checkout, called by attach when the client holds no server). The
// gate is closed while the database, or every database, is paused (admin
// PAUSE) or in maintenance (admin MAINTENANCE ON); clients that reach it then
// wait in state ClientWaiting until it opens. A client that already holds a
// server never meets the gate, so open transactions finish (and session-mode
// clients keep going).
//
// PAUSE differs from MAINTENANCE in that it also waits until the database
// is drained: no client is admitted (checking a server out or holding one).
// Admission is counted without a lock: a client increments its database's
// holders and then looks at the flags; PAUSE sets a flag and then looks at
// holders. With sequentially consistent atomics at least one of the two
// sees the other, so a client never slips past a PAUSE that reported the
// database drained.
//
// The gate lives in the Listener, not in State: pause and maintenance
// survive RELOAD. Waiting clients notice shutdown, KILL and the end of ctx
// within gateCheckInterval.

// gateCheckInterval is how often a client waiting at the gate, or a PAUSE
// waiting for clients to drain, checks for shutdown and KILL.
const gateCheckInterval = 100 * time.Millisecond

// control is the state that admin commands change: the gate, and the lock
// that serializes reloads. The zero value is ready to use.
type control struct {
	reloadMu sync.Mutex                         // serializes Reconfigure
	pausing  atomic.Int32                       // PAUSE commands waiting for their databases to drain
	gates    atomic.Pointer[map[string]*dbGate] // copy-on-write, read without mu, written under it

	mu      sync.Mutex    // guards the following, and the flags and wake channels of every dbGate
	all     dbGate        // PAUSE and MAINTENANCE without a database name
	drained chan struct{} // closed (and replaced) when holders drop to 0 while pausing
}

// dbGate is the gate of one database (or, as control.all, of all).
type dbGate struct {
	holders atomic.Int64      // clients admitted: checking a server out or holding one
	waiting atomic.Int64      // clients blocked at the gate
	paused  atomic.Bool       // written under control.mu
	maint   atomic.Bool       // written under control.mu
	wake    chan struct{}     // closed when paused and maint are both cleared; nil while open
	waited  metrics.Histogram // time clients spent in waitGate
}

func (g *dbGate) closed() bool { return g.paused.Load() || g.maint.Load() }

// gate returns the gate of database db, creating it on first use.
func (ct *control) gate(db string) *dbGate {
	if m := ct.gates.Load(); m != nil {
		if g := (*m)[db]; g != nil {
			return g
		}
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	old := ct.gates.Load()
	if old != nil {
		if g := (*old)[db]; g != nil {
			return g
		}
	}
	m := make(map[string]*dbGate, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	g := &dbGate{}
	m[db] = g
	ct.gates.Store(&m)
	return g
}

// leave undoes one admission to g.
func (ct *control) leave(g *dbGate) {
	if g.holders.Add(-1) == 0 && ct.pausing.Load() > 0 {
		ct.mu.Lock()
		if ct.drained != nil {
			close(ct.drained)
			ct.drained = nil
		}
		ct.mu.Unlock()
	}
}

// set changes the paused or maintenance flag of g (under ct.mu) and opens
// the gate when neither is left.
func (ct *control) set(g *dbGate, flag *atomic.Bool, on bool) {
	flag.Store(on)
	switch {
	case g.closed() && g.wake == nil:
		g.wake = make(chan struct{})
	case !g.closed() && g.wake != nil:
		close(g.wake)
		g.wake = nil
	}
}

// wakeChan returns the channel to wait on while the gate of g is closed,
// or nil when it is open.
func (ct *control) wakeChan(g *dbGate) chan struct{} {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.all.closed() {
		return ct.all.wake
	}
	if g.closed() {
		return g.wake
	}
	return nil
}

// admission is a client's bookkeeping for the gate and the pool counters.
// It is owned by the client goroutine.
type admission struct {
	gate      *dbGate       // the gate the client was admitted through; nil when not admitted
	xactStart time.Duration // start of the open transaction's first round trip (clock.Mono; 0: none)
	// dbGate is the gate of database dbGateName, kept from the last admit:
	// a database's gate never changes once made (control.gate only adds),
	// so a client looks its database's up once, not at every checkout.
	dbGate     *dbGate
	dbGateName string
}

// checkout admits the client through its database's gate and checks a
// server out of its pool in the current configuration. A client whose pool
// a reload replaced moves to the new pool here, between transactions.
func (c *client) checkout(ctx context.Context) (*pool.Server, error) {
	read := c.takeRead()
	for {
		if err := c.admit(ctx); err != nil {
			return nil, err
		}
		if err := c.refresh(); err != nil {
			c.release()
			return nil, err
		}
		c.setState(ClientWaiting)
		s, p, err := c.checkoutBalanced(ctx, c.pool, 0, read)
		if err == nil {
			c.lb.pool = p
			c.hotServer(s)
			if h := c.l.CheckoutHookForTest; h != nil {
				h(0, s)
			}
			return s, nil
		}
		c.release()
		if errors.Is(err, pool.ErrClosed) && c.l.State() != c.st {
			continue // a reload replaced the pool while we asked it
		}
		return nil, checkoutError(p, err)
	}
}

// checkin returns s to the client's pool and leaves the gate.
func (c *client) checkin(s *pool.Server) {
	now := c.mono() // before unhotServer: the loop's time while the client is on it
	c.unhotServer(s)
	serverPool(s, c.pool).CheckinAt(s, now)
	c.release()
}

// admit passes the gate of the client's database, waiting while it is
// closed.
func (c *client) admit(ctx context.Context) error {
	ct := &c.l.ctl
	if c.adm.dbGate == nil || c.adm.dbGateName != c.db.Name {
		c.adm.dbGate, c.adm.dbGateName = ct.gate(c.db.Name), c.db.Name
	}
	g := c.adm.dbGate
	for {
		g.holders.Add(1)
		if !ct.all.closed() && !g.closed() {
			c.adm.gate = g
			return nil
		}
		ct.leave(g)
		c.offLoop()
		if err := c.waitGate(ctx, g); err != nil {
			return err
		}
	}
}

// release undoes admit.
func (c *client) release() {
	if g := c.adm.gate; g != nil {
		c.adm.gate = nil
		c.l.ctl.leave(g)
	}
}

// waitGate waits until the gate of g opens.
func (c *client) waitGate(ctx context.Context, g *dbGate) error {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	start := time.Now()
	defer func() { g.waited.Observe(time.Since(start)) }()
	c.setState(ClientWaiting)
	tick := time.NewTicker(gateCheckInterval)
	defer tick.Stop()
	for {
		wake := c.l.ctl.wakeChan(g)
		if wake == nil {
			return nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return wire.Fatalf(wire.AdminShutdown, "terminating connection due to administrator command")
		case <-tick.C:
			if c.killed.Load() || c.l.shutting.Load() {
				return wire.Fatalf(wire.AdminShutdown, "terminating connection due to administrator command")
			}
		}
	}
}

// refresh moves the client to the current configuration when a reload
// installed a new one: it looks its pool up again (the same Pool when its
// settings did not change). A client whose user or database the reload
// removed is disconnected with 57P01.
func (c *client) refresh() error {
	st := c.l.State()
	if st == c.st {
		return nil
	}
	u, db, err := c.reloadedIdentity(st)
	if err != nil {
		return err
	}
	if len(db.Shards) > 1 {
		if c.movable() {
			return errBecameSharded
		}
		return errResharded(db.Name)
	}
	p := st.Pools.Get(db, u, 0)
	if p == nil {
		return wire.Errorf(wire.InternalError, "database %q has no shard 0 after reload", db.Name)
	}
	c.st, c.user, c.db, c.pool = st, u, db, p
	return nil
}

// reloadedIdentity finds the client's user and database in a reloaded
// configuration; a client whose user or database the reload removed (or
// whose access it revoked) gets 57P01.
func (c *client) reloadedIdentity(st *State) (*config.User, *config.Database, error) {
	u, db := st.Config.User(c.user.Name), st.Config.Database(c.db.Name)
	if u == nil || db == nil || !u.Allows(db.Name) {
		return nil, nil, &wire.Error{Severity: "FATAL", Code: wire.AdminShutdown,
			Message: "terminating connection due to administrator command",
			Detail: fmt.Sprintf("a configuration reload removed user %q or database %q, or access of the one to the other",
				c.user.Name, c.db.Name)}
	}
	return u, db, nil
}

// observeRoundTrip counts one query (a round trip that started at start)
// and, when the server reported the transaction over, one transaction.
// roundTrip defers it.
func (c *client) observeRoundTrip(start time.Duration) {
	now := c.mono()
	st := c.statsPool().Stats
	d := now - start
	st.Queries.Add(1)
	st.QueryNanos.Add(uint64(d))
	st.QueryTime.Observe(d)
	if c.adm.xactStart == 0 {
		c.adm.xactStart = start
	}
	if c.tx == 'I' {
		xd := now - c.adm.xactStart
		st.Transactions.Add(1)
		st.XactNanos.Add(uint64(xd))
		st.XactTime.Observe(xd)
		c.adm.xactStart = 0
	}
}

// countError counts an ErrorResponse sent to the client.
func (c *client) countError(sqlstate string) {
	if c.pool != nil {
		c.pool.Stats.Errors.Add(sqlstate)
	}
}

// Session-pooled clients and the gate. A session-pooled client of a
// one-shard database (and a transaction-pooled one that session objects
// pin to its server) keeps its server between transactions, but it holds
// the gate only while a transaction (or a batch) is open: it leaves the
// gate when its server reports the session idle (leaveGateIdle), and
// passes it again, waiting while it is closed, before its next statement
// (enterGateHolding). So PAUSE, and a resharding cutover, drain a
// database whose session-pooled clients are idle, and such a client meets
// a cutover at its next transaction boundary, where it can move to the new
// shards (becomeSharded) — or, if it listens, at the cutover itself,
// woken in its idle read (idlemove.go).

// leaveGateIdle releases the gate of a session-pooled one-shard client
// whose session is idle.
func (c *client) leaveGateIdle() {
	if (c.mode == config.PoolSession || c.pinned) && c.xs == nil && c.server != nil && c.tx == 'I' &&
		len(c.q) == 0 && !c.pipe.has(pipeUnsynced) && !c.loggingIn {
		c.release()
	}
}

// enterGateHolding admits a session-pooled one-shard client that holds
// its server, before its next transaction. When a cutover made the
// database sharded meanwhile, the client moves (errBecameSharded) or, if
// its session cannot move, ends (errResharded).
func (c *client) enterGateHolding(ctx context.Context) error {
	if c.mode != config.PoolSession && !c.pinned || c.xs != nil || c.adm.gate != nil {
		return nil
	}
	c.setState(ClientWaiting)
	err := c.admit(ctx)
	c.setState(ClientActive)
	if err != nil {
		return err
	}
	st := c.l.State()
	if st == c.st {
		return nil
	}
	db := st.Config.Database(c.db.Name)
	switch {
	case db != nil && len(db.Shards) > 1:
		c.release() // the sharded path admits itself
		if c.movable() {
			return errBecameSharded
		}
		return errResharded(db.Name)
	case db != nil && len(db.Shards) == 1 && len(c.db.Shards) == 1 && !sameServer(db.Shards[0], c.db.Shards[0]):
		// A cutover moved the one-shard database to another server: the
		// session's server is on the old one, fenced and being retired.
		// The session moves to the new one (moveSession).
		if !c.movable() {
			c.release()
			return errResharded(db.Name)
		}
		return c.moveSession(ctx)
	}
	return nil
}

// sameServer reports whether a and b name the same database on the same
// server.
func sameServer(a, b config.Shard) bool {
	return a.Host == b.Host && a.Port == b.Port && a.Database == b.Database
}
