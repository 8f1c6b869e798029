package frontend

import (
	"errors"
	"fmt"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// A resharding cutover turns a one-shard database into a sharded one in
// the live configuration. A transaction-pooled client of it holds no
// server between transactions and its session state (settings, prepared
// statements) is the proxy's, so it carries on as a sharded session:
// becomeSharded moves it before it starts its next transaction. A client
// that was already past that point, waiting at the paused database's gate
// with the first message of its transaction in hand (a Query, or the
// first message of an extended batch), learns of the cutover when the gate
// opens (errBecameSharded) and serves that message again on the sharded
// path. Only a client that cannot move (session pooling; a FunctionCall)
// ends with 57P01 (errResharded); session-pooled clients are ended at the
// cutover itself.

// becomeSharded makes a one-shard, transaction-pooled client that holds
// nothing a sharded client when a reload made its database sharded. It
// runs before a Query or the first message of an extended batch.
func (c *client) becomeSharded() error {
	if !c.movable() {
		return nil
	}
	st := c.l.State()
	if st == c.st {
		return nil
	}
	if db := st.Config.Database(c.db.Name); db == nil || len(db.Shards) < 2 {
		return nil // refresh handles it at checkout
	}
	if err := c.refreshShards(); err != nil {
		return err
	}
	// The client's prepared statements, named and unnamed, become the
	// sharded path's statements.
	if c.sstmts == nil {
		c.sstmts = map[string]*sStmt{}
	}
	for name, s := range c.stmts {
		if len(s.parse) > 5 {
			if q, _, ok := parseBody(s.parse[5:]); ok {
				c.sstmts[name] = &sStmt{sql: string(q), st: s, query: q}
			}
		}
	}
	if q, tail, ok := parseBody(c.unnamed); ok {
		c.sstmts[""] = &sStmt{sql: string(q), st: c.l.stmts.get(tail), query: q}
	}
	c.stmts, c.unnamed = map[string]*stmt{}, c.unnamed[:0]
	c.log.Info("database resharded: the session continues on its shards", "shards", c.xs.Len())
	return nil
}

// parseBody returns the query text of a Parse message's body, and the
// body after the statement name (query and parameter types).
func parseBody(body []byte) (query, tail []byte, ok bool) {
	_, tail, ok = wire.CString(body)
	if !ok {
		return nil, nil, false
	}
	query, _, ok = wire.CString(tail)
	return query, tail, ok
}

// errBecameSharded tells the caller of attach that the client's database
// became sharded while it waited at the gate, and that the client can
// move (becomeSharded) and serve its message on the sharded path.
var errBecameSharded = errors.New("the database became sharded")

// movable reports whether becomeSharded can move the client now.
func (c *client) movable() bool {
	return c.xs == nil && c.server == nil && c.mode == config.PoolTransaction && !c.pipe.has(pipeUnsynced) && len(c.q) == 0 && c.tx == 'I'
}

// errResharded ends a one-shard client that meets its database sharded
// where it cannot change paths (see becomeSharded).
func errResharded(db string) error {
	return &wire.Error{Severity: "FATAL", Code: wire.AdminShutdown,
		Message: "terminating connection due to administrator command",
		Detail:  fmt.Sprintf("database %q was resharded while this session waited; reconnect", db)}
}
