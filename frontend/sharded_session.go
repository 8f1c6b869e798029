package frontend

import (
	"strings"

	"github.com/shardgate/shardgate/config"
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

// txEntry is one entry of a sharded transaction's replay log.
type txEntry struct {
	savepoint string // SAVEPOINT savepoint; "" for a statement
	stmt      string // a SET or RESET every joined shard ran
	pending   int    // savepoint: len(c.sess.pending) when it was set
}

// prefix returns the internal Queries a shard needs before the client's
// statement, each to be sent as a Query of its own: the settings sync and,
// inside a transaction the shard has not joined yet, BEGIN with the
// transaction's log. The two are separate because a BEGIN in a
// multi-statement Query takes the statements before it into the
// transaction, so that a rollback would undo the settings sync.
func (c *client) prefix(i int, implicitTx bool) []string {
	sc := &c.shards[i]
	qs := c.settingsPrefix(i)
	if (c.stx.open || implicitTx) && !sc.inTx {
		var b strings.Builder
		if c.stx.begin != "" {
			b.WriteString(c.stx.begin)
		} else {
			b.WriteString("BEGIN")
		}
		// A newline ends a trailing comment of the client's text.
		b.WriteString("\n;")
		for _, e := range c.stx.log {
			if e.savepoint != "" {
				b.WriteString(" SAVEPOINT " + quoteIdent(e.savepoint) + ";")
			} else {
				b.WriteString(" " + e.stmt + "\n;")
			}
		}
		qs = append(qs, b.String())
		sc.inTx = true
	}
	return qs
}

// settingsPrefix is the settings sync of prefix alone.
func (c *client) settingsPrefix(i int) []string {
	s := c.shards[i].server
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

// setOnJoined runs sql, a SET or RESET of the open transaction, on every
// shard in the transaction but i, which runs it next for the client's
// answer. It returns the first error a shard answers, or the I/O error of
// a broken server (c.server then points at it).
func (c *client) setOnJoined(i int, sql string) (serr *wire.Error, ioErr error) {
	saved := c.server
	for j := range c.shards {
		sc := &c.shards[j]
		if j == i || !sc.inTx || sc.server == nil {
			continue
		}
		c.server = sc.server
		_, e, err := c.internal(j, sql)
		if err != nil {
			return nil, err
		}
		if e != nil {
			return e, nil
		}
	}
	c.server = saved
	return nil, nil
}

// ranSetting records that a SET or RESET ran, in the open transaction, on
// every joined shard: the ops it added to c.sess.pending from index start
// apply to all of them at commit (a nil server), and shards that join
// later replay it.
func (c *client) ranSetting(sql string, start int) {
	for k := start; k < len(c.sess.pending); k++ {
		c.sess.pending[k].server = nil
	}
	c.stx.log = append(c.stx.log, txEntry{stmt: sql})
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
		c.shards[i].eff |= eff
	}
}

// joinedShards lists the shards the open transaction runs on.
func (c *client) joinedShards() []int {
	var joined []int
	for i := range c.shards {
		if c.shards[i].inTx && c.shards[i].server != nil {
			joined = append(joined, i)
		}
	}
	return joined
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
				if s := c.shards[i].server; s != nil {
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
	joined := c.joinedShards()
	if !commit || c.stx.failed {
		c.endSession(false, nil)
		c.rollbackShards()
		c.releaseIfIdle()
		return "ROLLBACK", nil
	}
	err := c.commitShards(joined)
	c.endSession(err == nil, joined)
	c.stx = shardTx{}
	c.releaseIfIdle()
	if err != nil {
		return "", err
	}
	return "COMMIT", nil
}

// runSavepoint runs SAVEPOINT, RELEASE or ROLLBACK TO on every joined
// shard and records it in the transaction's log for shards joined later.
// It returns the command tag, the error a shard (or the proxy, as
// PostgreSQL would) answers, or the I/O error of a broken server.
func (c *client) runSavepoint(p *routePlan) (tag string, serr *wire.Error, ioErr error) {
	if !c.stx.open {
		what := "SAVEPOINT"
		switch {
		case p.release:
			what = "RELEASE SAVEPOINT"
		case p.rollbackTo:
			what = "ROLLBACK TO SAVEPOINT"
		}
		return "", wire.Errorf("25P01", "%s can only be used in transaction blocks", what), nil
	}
	at := -1
	if p.release || p.rollbackTo {
		for k := len(c.stx.log) - 1; k >= 0; k-- {
			if c.stx.log[k].savepoint == p.savepoint {
				at = k
				break
			}
		}
		if at < 0 {
			return "", wire.Errorf("3B001", "savepoint \"%s\" does not exist", p.savepoint), nil
		}
	}
	for i := range c.shards {
		if !c.shards[i].inTx || c.shards[i].server == nil {
			continue
		}
		c.server = c.shards[i].server
		st, e, err := c.internal(i, p.sql)
		if err != nil {
			return "", nil, err
		}
		if e != nil {
			return "", e, nil
		}
		if st == 'T' {
			c.stx.failed = false
		}
	}
	switch {
	case p.release:
		// The savepoints go; what ran after them stays.
		kept := c.stx.log[:at]
		for _, e := range c.stx.log[at:] {
			if e.savepoint == "" {
				kept = append(kept, e)
			}
		}
		c.stx.log = kept
		return "RELEASE", nil, nil
	case p.rollbackTo:
		c.stx.log = c.stx.log[:at+1]
		c.sess.pending = c.sess.pending[:c.stx.log[at].pending]
		c.stx.failed = false
		return "ROLLBACK", nil, nil
	}
	c.stx.log = append(c.stx.log, txEntry{savepoint: p.savepoint, pending: len(c.sess.pending)})
	return "SAVEPOINT", nil, nil
}

// releaseIfIdle ends the use of the client's servers between
// transactions: it settles the session (in both pool modes: a sharded
// session has a server per shard) and, in transaction mode, returns the
// servers unless session objects pin them.
func (c *client) releaseIfIdle() {
	if c.stx.open {
		return
	}
	if err := c.settleShards(); err != nil {
		c.log.Warn("session state lost", "err", err)
		c.lost = err
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
	for i := range c.shards {
		sc := &c.shards[i]
		eff := sc.eff
		sc.eff = 0
		s := sc.server
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
			pinned, probed = pinned || held, true
		}
	}
	if probed {
		c.pinned = pinned
	}
	return nil
}
