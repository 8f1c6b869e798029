package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// Idle listeners at a resharding cutover.
//
// A session moves to the servers a cutover gave its database at its next
// statement (resharded.go). A session that listens and sends nothing — a
// driver's listener waiting for notifications — would keep listening on
// the old server, where no NOTIFY comes any more, and miss every one sent
// on the new servers until it spoke. So a reload that changes a
// database's servers wakes every session that holds servers and waits
// idle for its next message (nudgeMoved): the woken client probes its
// servers and, when one of them listens, moves at once (moveIdle), as it
// would at its next statement, and goes back to waiting. A session that
// does not listen stays as it is and moves when it speaks.
//
// The wake-up is a read deadline on the client's socket, set under wakeMu
// only while the loop is in that idle read (idleHeld); the loop clears
// both before it does anything else, so that the deadline cannot cut a
// read elsewhere (COPY data, the rest of a batch).

// nudgeMoved wakes the idle sessions that hold servers when the reload
// from old to cfg changed the servers of one of their databases.
func (l *Listener) nudgeMoved(old, cfg *config.Config) {
	if !serversChanged(old, cfg) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.clients {
		c.nudgeMove()
	}
}

// serversChanged reports whether a database of old has other shards in
// cfg, or is gone.
func serversChanged(old, cfg *config.Config) bool {
	for i := range old.Databases {
		o := &old.Databases[i]
		n := cfg.Database(o.Name)
		if n == nil || len(n.Shards) != len(o.Shards) {
			return true
		}
		for k := range o.Shards {
			if !sameServer(o.Shards[k], n.Shards[k]) {
				return true
			}
		}
	}
	return false
}

// nudgeMove interrupts the client's idle read if it waits holding servers
// (idleHeld).
func (c *client) nudgeMove() {
	c.wakeMu.Lock()
	defer c.wakeMu.Unlock()
	if c.idleHeld && !c.moveNudge {
		c.moveNudge = true
		c.conn.SetReadDeadline(time.Now())
	}
}

// waitIdle marks the start of the loop's read of the client's next
// message: idleHeld when the client holds servers between transactions
// (session pooling, or pinned), which a cutover may have to move
// (nudgeMove). It reports whether it did, for doneWaiting; other clients
// (most: transaction pooling) take no lock.
func (c *client) waitIdle() bool {
	held := !c.admin && !c.loggingIn && (c.mode == config.PoolSession || c.pinned) && c.tx == 'I' &&
		len(c.q) == 0 && !c.pipe.has(pipeUnsynced) && c.r.Buffered() == 0 &&
		(c.xs == nil && c.server != nil || c.xs != nil && c.holdsShards() && !c.xs.InTx())
	if !held {
		return false
	}
	c.wakeMu.Lock()
	c.idleHeld = true
	c.wakeMu.Unlock()
	return true
}

// doneWaiting ends waitIdle, when it reported the client held, once the
// read returned; it reports whether a cutover's nudge interrupted (or
// raced) the read, whose deadline it then lifts, unless a kill set it too.
func (c *client) doneWaiting() bool {
	c.wakeMu.Lock()
	nudged := c.moveNudge
	c.idleHeld, c.moveNudge = false, false
	c.wakeMu.Unlock()
	if nudged && !c.killed.Load() && !c.l.shutting.Load() {
		c.conn.SetReadDeadline(time.Time{})
	}
	return nudged
}

// moveIdle moves an idle session woken by a cutover (nudgeMoved) to its
// database's new servers if it listens; a session that cannot move ends
// with its 57P01, sent at once as PostgreSQL sends an administrator's
// termination. It returns an error when the session is over. A failure
// that leaves the session as it was (a checkout that timed out) only
// leaves the move to the session's next statement.
func (c *client) moveIdle(ctx context.Context) error {
	c.offLoop()
	shard, listens, err := c.heldListens()
	if err != nil {
		c.sendFatal(&wire.Error{Severity: "FATAL", Code: wire.ConnectionFailure,
			Message: "server connection lost", Detail: err.Error()})
		return err
	}
	if !listens {
		return c.flushClient() // a NOTIFY that arrived during the probe
	}
	if c.xs == nil {
		switch err := c.enterGateHolding(ctx); {
		case errors.Is(err, errBecameSharded):
			if err := c.becomeSharded(); err != nil {
				return c.endIdle(err)
			}
		case err != nil:
			return c.endIdle(err)
		default:
			c.leaveGateIdle()
			return c.flushClient()
		}
	}
	// A sharded session (or one just become sharded): the start of a
	// transaction leaves the old shards and listens again (attachShard,
	// listenAgain); its end settles the session and leaves the gate.
	if db := c.l.State().Config.Database(c.db.Name); db == nil || shard >= len(db.Shards) {
		shard = 0
	}
	for range maxReplans {
		err := c.attachShard(ctx, shard)
		if err == errReplan {
			continue
		}
		var sent *fatalSent
		if errors.As(err, &sent) {
			return err
		}
		if err != nil {
			return c.endIdle(err)
		}
		c.releaseIfIdle()
		return c.flushClient()
	}
	return nil
}

// heldListens reports whether a server the client holds is on a database
// whose servers a cutover changed and listens (probe), and the shard of
// the first that does.
func (c *client) heldListens() (int, bool, error) {
	if c.xs == nil {
		st := c.l.State()
		if st == c.st {
			return 0, false, nil
		}
		db := st.Config.Database(c.db.Name)
		if db != nil && len(db.Shards) == 1 && sameServer(db.Shards[0], c.db.Shards[0]) {
			return 0, false, nil
		}
		held, err := c.probe(c.server)
		return 0, held&objListen != 0, err
	}
	if !c.shardsMoved() {
		return 0, false, nil
	}
	saved := c.server
	defer func() { c.server = saved }()
	for i := range c.ext {
		s := c.xs.Server(i)
		if s == nil || s.Broken {
			continue
		}
		c.server = s
		held, err := c.probe(s)
		if err != nil {
			return 0, false, err
		}
		if held&objListen != 0 {
			return i, true, nil
		}
	}
	return 0, false, nil
}

// endIdle ends a woken session that could not move, with err as a FATAL;
// an error that is no FATAL (the gate or a pool refused it for now) leaves
// the move to the session's next statement.
func (c *client) endIdle(err error) error {
	e, ok := wire.AsError(err)
	if !ok || !e.Fatal() {
		c.log.Warn("a listening session could not move to its database's new servers yet", "err", err)
		return c.flushClient()
	}
	c.sendFatal(e)
	return err
}
