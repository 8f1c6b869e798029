package frontend

import (
	"fmt"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// A resharding cutover turns a one-shard database into a sharded one in
// the live configuration. A transaction-pooled client of it holds no
// server between transactions and its session state (settings, prepared
// statements) is the proxy's, so it carries on as a sharded session:
// becomeSharded moves it before it starts its next transaction. A client
// that was already past that point, waiting at the paused database's
// gate, cannot change paths mid-message and ends with 57P01
// (errResharded); session-pooled clients are ended at the cutover itself.

// becomeSharded makes a one-shard, transaction-pooled client that holds
// nothing a sharded client when a reload made its database sharded. It
// runs before a Query or the first message of an extended batch.
func (c *client) becomeSharded() error {
	if c.shards != nil || c.server != nil || c.mode != config.PoolTransaction || c.unsynced || len(c.q) > 0 || c.tx != 'I' {
		return nil
	}
	st := c.l.State()
	if st == c.st {
		return nil
	}
	if db := st.Config.Database(c.db.Name); db == nil || len(db.Shards) < 2 {
		return nil // refresh handles it at checkout
	}
	u, db, err := c.reloadedIdentity(st)
	if err != nil {
		return err
	}
	c.st, c.user, c.db = st, u, db
	c.pool = st.Pools.Get(db, u, 0)
	if err := c.initShards(st); err != nil {
		return err
	}
	// The client's prepared statements, named and unnamed, become the
	// sharded path's statements.
	if c.sstmts == nil {
		c.sstmts = map[string]*sStmt{}
	}
	for name, s := range c.stmts {
		if q, ok := parseQuery(s.parse); ok {
			c.sstmts[name] = &sStmt{sql: string(q), st: s, query: q}
		}
	}
	if len(c.unnamed) > 0 {
		if _, tail, ok := wire.CString(c.unnamed); ok {
			if q, _, ok := wire.CString(tail); ok {
				c.sstmts[""] = &sStmt{sql: string(q), st: c.l.stmts.get(tail), query: q}
			}
		}
	}
	c.stmts, c.unnamed = map[string]*stmt{}, c.unnamed[:0]
	c.log.Info("database resharded: the session continues on its shards", "shards", len(db.Shards))
	return nil
}

// parseQuery returns the query text of a Parse message.
func parseQuery(parse []byte) ([]byte, bool) {
	if len(parse) < 5 {
		return nil, false
	}
	_, tail, ok := wire.CString(parse[5:])
	if !ok {
		return nil, false
	}
	q, _, ok := wire.CString(tail)
	return q, ok
}

// errResharded ends a one-shard client that meets its database sharded
// where it cannot change paths (see becomeSharded).
func errResharded(db string) error {
	return &wire.Error{Severity: "FATAL", Code: wire.AdminShutdown,
		Message: "terminating connection due to administrator command",
		Detail:  fmt.Sprintf("database %q was resharded while this session waited; reconnect", db)}
}
