package frontend

import (
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Session state of a sharded client.
//
// A sharded client holds a server per shard it uses, in both pool modes,
// and each must look like the one session the client believes it has. The
// client's settings (c.sess.sets) change as on any client: a SET outside a
// transaction runs on one shard and changes that server's record when it
// completes; every other server catches up when it is next used, by the
// diff prefix sends first. Session-mode clients keep their servers until
// they leave; transaction-mode clients return them when a transaction
// ends, unless a session object pins them.
//
// Inside a transaction every shard in it shares the transaction's
// settings. A SET or RESET runs on every shard that has joined (first on
// the others, then, for the client's answer, on the one it routes to),
// and shardTx.log keeps it with the savepoints, in order, for the shards
// that join later: they replay the log after BEGIN. The ops of a SET in a
// transaction therefore apply, at commit, to every joined server's record;
// ROLLBACK TO SAVEPOINT drops those made after the savepoint, as it drops
// the log's statements. Settings changed in ways the proxy does not parse
// (set_config) are read back, when the transaction ends, from the servers
// that ran such statements (shardConn.eff).

// prefix returns the internal Queries shard i needs before the client's
// statement (executor.Session.Prefix).
func (c *client) prefix(i int, implicitTx bool) []string { return c.xs.Prefix(i, implicitTx) }

// settingsPrefix is the settings sync of prefix alone: the Query that
// brings shard i's server to the client's settings.
func (c *client) settingsPrefix(i int) []string {
	s := c.xs.Server(i)
	if len(c.sess.sets) == 0 && len(s.Session) == 0 {
		// The usual case, at every routed statement: nothing set on
		// either side, nothing to sort, compare or copy.
		return nil
	}
	d := c.sess.diff(s.Session)
	c.sess.syncTo(s.Session)
	if d == "" {
		return nil
	}
	return []string{d}
}

// changesSettings reports whether a statement of the router's kind
// Session is a SET or RESET: inside a transaction every shard in it must
// run it.
func changesSettings(sql string) bool {
	b := []byte(sql)
	i := skipSpaceAndComments(b, 0)
	return hasKeyword(b[i:], "set") || hasKeyword(b[i:], "reset")
}

// ranSetting records that a SET or RESET ran, in the open transaction, on
// every joined shard: the ops it added to c.sess.pending from index start
// apply to all of them at commit (a nil server), and shards that join
// later replay it.
func (c *client) ranSetting(sql string, start int) {
	for k := start; k < len(c.sess.pending); k++ {
		c.sess.pending[k].server = nil
	}
	c.xs.LogSetting(sql)
}

// ranOn attributes the effects of the statement that just ran (c.txEff and
// a resync the relay asked for) to the shards it ran on, so that the end
// of the transaction reads settings back and probes for session objects
// only there.
func (c *client) ranOn(shards []int) {
	eff := c.txEff
	if c.sess.resync {
		eff |= effResync
		c.sess.resync = false
	}
	c.txEff = 0
	for _, i := range shards {
		c.ext[i].eff |= eff
	}
}

// endSession settles tracked SETs at the end of the client's transaction:
// kept on commit, dropped on rollback. An op with a server changes that
// server's record; one without (a SET every joined shard ran) changes the
// record of every server in joined.
func (c *client) endSession(commit bool, joined []int) {
	c.hints.localShard, c.hints.localKey = nil, nil
	if commit && len(c.sess.pending) > 0 {
		if c.sess.sets == nil {
			c.sess.sets = map[string]string{}
		}
		for _, op := range c.sess.pending {
			apply(c.sess.sets, op)
			if op.server != nil {
				apply(op.server.Session, op)
				continue
			}
			for _, i := range joined {
				if s := c.xs.Server(i); s != nil {
					apply(s.Session, op)
				}
			}
		}
	}
	c.sess.pending = c.sess.pending[:0]
}

// finishTx commits (or rolls back) the client's transaction on every shard
// it joined and returns the command tag, COMMIT or ROLLBACK (a COMMIT of a
// failed transaction rolls back, as in PostgreSQL).
func (c *client) finishTx(commit bool) (string, error) {
	// The transaction's portals end with it, as PostgreSQL's do.
	clear(c.sportals)
	cursorsKept := commit && !c.xs.Failed()
	c.endCursorMerges(cursorsKept)
	tag, committed, err := c.xs.End(commit)
	c.endSession(err == nil && tag == "COMMIT", committed)
	// The proxy's cursors end with the transaction, implicit ones too.
	c.endCursors(cursorsKept && err == nil)
	c.releaseIfIdle()
	return tag, err
}

// runSavepoint runs SAVEPOINT, RELEASE or ROLLBACK TO on every joined
// shard (executor.Session.Savepoint); a ROLLBACK TO also drops the session
// changes made after its savepoint.
func (c *client) runSavepoint(p *routePlan) (tag string, serr *wire.Error, ioErr error) {
	kind := executor.SavepointSet
	switch {
	case p.release:
		kind = executor.SavepointRelease
	case p.rollbackTo:
		kind = executor.SavepointRollbackTo
	}
	tag, restore, serr, ioErr := c.xs.Savepoint(kind, p.savepoint, p.SQL, len(c.sess.pending))
	if restore >= 0 {
		c.sess.pending = c.sess.pending[:restore]
	}
	if serr == nil && ioErr == nil {
		c.savepointDone(kind, p.savepoint)
	}
	return tag, serr, ioErr
}

// releaseIfIdle ends the use of the client's servers between
// transactions: it settles the session (in both pool modes: a sharded
// session has a server per shard) and, in transaction mode, returns the
// servers unless session objects pin them.
func (c *client) releaseIfIdle() {
	if c.xs.InTx() {
		return
	}
	if err := c.settleShards(); err != nil {
		c.log.Warn("session state lost", "err", err)
		c.lost = err
	}
	if (c.mode == config.PoolSession || c.pinned) && len(c.q) == 0 && !c.pipe.has(pipeUnsynced) {
		// A session-pooled (or pinned) client keeps its servers but
		// leaves the gate between transactions, so that PAUSE and a
		// resharding cutover drain the database (see leaveSessionShards).
		c.release()
	}
	if c.mode == config.PoolSession || c.pinned {
		return
	}
	c.detachShards()
}

// settleShards is settle for a sharded session: settings are read back
// from the servers whose statements changed them in ways the proxy does
// not follow, and in transaction mode the client keeps all its servers
// while any of them holds session objects. With several servers to read
// back (a set_config on each of two shards), the last one read wins.
func (c *client) settleShards() error {
	resync := c.sess.resync // not attributed to a shard
	c.sess.resync = false
	c.txEff = 0
	probe := c.mode == config.PoolTransaction
	pinned, probed := false, false
	saved := c.server
	defer func() { c.server = saved }()
	for i := range c.ext {
		eff := c.ext[i].eff
		c.ext[i].eff = 0
		s := c.xs.Server(i)
		if s == nil || s.Broken {
			continue
		}
		c.server = s
		if resync || eff&effResync != 0 {
			if err := c.readBack(s); err != nil {
				return err
			}
		}
		if probe && (c.pinned || eff&effObjects != 0) {
			held, err := c.probe(s)
			if err != nil {
				return err
			}
			pinned, probed = pinned || held != 0, true
		}
	}
	if probed {
		c.pinned = pinned
	}
	return nil
}
