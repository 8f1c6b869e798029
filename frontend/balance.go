package frontend

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"slices"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/internal/clock"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// Read load balancing.
//
// On a database with replicas, a transaction-mode client decides at the
// start of each transaction (before it checks a server out) where the
// transaction runs: a transaction whose first statement is a read
// (router Plan.Write false, not transaction control or a session
// statement) outside an explicit transaction, or that starts with BEGIN
// READ ONLY, runs on a replica the database's load_balancing strategy
// picks (pool.Registry.ReadPools); everything else on the primary. A
// replica that fails to connect is banned and the checkout moves on to the
// next candidate and finally the primary, so the client sees no error.

// lbState is a client's routing decision for its next checkout.
type lbState struct {
	read bool       // the transaction about to start may run on a replica
	pool *pool.Pool // the pool of the last checkout, which counts its queries
}

// statsPool returns the pool whose counters the client's current (or
// just finished) transaction goes to.
func (c *client) statsPool() *pool.Pool {
	if c.lb.pool != nil && c.lb.pool.Key.Database == c.pool.Key.Database {
		return c.lb.pool
	}
	return c.pool
}

// lbView returns the configuration and database entry that a transaction
// starting now runs under: the running ones when a reload installed a
// configuration that the client meets only at its checkout (refresh).
func (c *client) lbView() (*State, *config.Database) {
	if st := c.l.State(); st != c.st {
		if db := st.Config.Database(c.db.Name); db != nil {
			return st, db
		}
	}
	return c.st, c.db
}

// balanced reports whether the client's transactions may use replicas.
func (c *client) balanced() bool {
	if c.mode != config.PoolTransaction || c.db == nil {
		return false
	}
	_, db := c.lbView()
	for i := range db.Shards {
		if len(db.Shards[i].Replicas) > 0 {
			return true
		}
	}
	return false
}

// chooseRead decides, before a client of a single-shard database attaches
// for the Query sql, whether the transaction may run on a replica.
func (c *client) chooseRead(sql []byte) {
	c.lb.read = c.server == nil && c.balanced() && c.readStatement(string(sql), true)
}

// chooseReadExt is chooseRead for an extended-protocol message: a Parse,
// or a Bind of a statement the client prepared. Other messages starting a
// transaction go to the primary.
func (c *client) chooseReadExt(typ byte, body []byte) {
	c.lb.read = false
	if c.server != nil || !c.balanced() {
		return
	}
	if _, ok := c.extendedSQL(typ, body); !ok {
		return
	}
	// Batches the client pipelined behind this one go out with it, to
	// the same server (extended): all of them count, and all must be
	// here, whole.
	frames := c.r.Frames()
	if len(frames) != c.r.Buffered() {
		return
	}
	c.lb.read = c.readBatch(bufferedBatch(typ, body, frames), c.stmtText, string(parseText(c.unnamedTail())), true, true)
}

// bufferedBatch is the message typ, body that the client is handling
// followed by frames, the whole messages it sent after it as far as they
// are in its read buffer (wire.Reader.Frames).
func bufferedBatch(typ byte, body, frames []byte) iter.Seq2[byte, []byte] {
	return func(yield func(byte, []byte) bool) {
		if !yield(typ, body) {
			return
		}
		for len(frames) > 0 {
			var raw []byte
			raw, frames = wire.SplitFrame(frames)
			if !yield(raw[0], raw[5:]) {
				return
			}
		}
	}
}

// stmtText returns the text of the client's prepared statement name.
func (c *client) stmtText(name []byte) (string, bool) {
	st := c.stmts[string(name)]
	if st == nil || len(st.parse) < 5 {
		return "", false
	}
	_, tail, ok := wire.CString(st.parse[5:])
	return string(parseText(tail)), ok
}

// unnamedTail is the client's unnamed statement's Parse body past its
// (empty) name: its text and parameter types; nil for none.
func (c *client) unnamedTail() []byte {
	if len(c.unnamed) == 0 {
		return nil
	}
	return c.unnamed[1:]
}

// readBatch reports whether every statement that the extended-protocol
// batch msgs runs is a read (readStatement), up to its Sync, which msgs
// must reach. PostgreSQL runs a batch as one implicit transaction, and the
// proxy on one server per shard: a read at its start that took a
// replica's server would make a write later in the batch fail (25006,
// read-only transaction) where PostgreSQL runs it. A batch whose Sync is
// not in msgs (the rest not read yet, or a Flush before it) is not a read,
// nor one with a Query or a FunctionCall in it. named returns the text of
// the client's prepared statement of a name, unnamed the text of its
// unnamed statement before the batch. With through, msgs are batches
// pipelined one after the other that run on one server: every one counts,
// and the last message must be a Sync.
func (c *client) readBatch(msgs iter.Seq2[byte, []byte], named func(name []byte) (string, bool), unnamed string,
	readOnlyBegin, through bool) bool {
	var parsed [][]byte // names of statements the batch parses, each a read
	synced := false     // the last message was a Sync
	for typ, body := range msgs {
		synced = typ == 'S'
		switch typ {
		case 'S':
			if !through {
				return true
			}
		case 'P':
			name, tail, ok := wire.CString(body)
			if !ok {
				return false
			}
			text := string(parseText(tail))
			if !c.readsInBatch(text, readOnlyBegin) {
				return false
			}
			if len(name) == 0 {
				unnamed = text
			} else {
				parsed = append(parsed, name)
			}
		case 'B':
			_, rest, ok := wire.CString(body)
			if !ok {
				return false
			}
			name, _, ok := wire.CString(rest)
			switch {
			case !ok:
				return false
			case len(name) == 0:
				if !c.readsInBatch(unnamed, readOnlyBegin) {
					return false
				}
			case slices.ContainsFunc(parsed, func(p []byte) bool { return bytes.Equal(p, name) }):
			default:
				text, ok := named(name)
				if !ok || !c.readsInBatch(text, readOnlyBegin) {
					return false
				}
			}
		case 'D', 'E', 'C':
		default:
			return false
		}
	}
	return synced
}

// extendedSQL returns the statement text a Parse or Bind message runs.
func (c *client) extendedSQL(typ byte, body []byte) (string, bool) {
	var parse []byte // a Parse body: name, text, …
	switch typ {
	case 'P':
		parse = body
	case 'B':
		_, rest, ok := wire.CString(body)
		if !ok {
			return "", false
		}
		name, _, ok := wire.CString(rest)
		switch {
		case !ok:
			return "", false
		case len(name) == 0:
			parse = c.unnamed
		default:
			st := c.stmts[string(name)]
			if st == nil || len(st.parse) < 5 {
				return "", false
			}
			parse = st.parse[5:]
		}
	default:
		return "", false
	}
	_, tail, ok := wire.CString(parse)
	if !ok {
		return "", false
	}
	sql, _, ok := wire.CText(tail)
	return string(sql), ok
}

// readStatement reports whether sql only reads: the router plans it as
// neither a write nor transaction control nor a session statement. With
// readOnlyBegin, BEGIN READ ONLY counts as a read. Anything the router
// cannot plan is not a read (the primary reports its errors).
func (c *client) readStatement(sql string, readOnlyBegin bool) bool {
	return c.reads(sql, readOnlyBegin, false)
}

// readsInBatch reports whether the statement text may run on a replica
// in a batch of reads: a read, or a statement that ends or marks a
// transaction (txStatementReads).
func (c *client) readsInBatch(text string, readOnlyBegin bool) bool {
	return c.reads(text, readOnlyBegin, true)
}

// reads is readStatement, and with txEnds readsInBatch.
func (c *client) reads(sql string, readOnlyBegin, txEnds bool) bool {
	st, db := c.lbView()
	rp, err := st.planner(db)
	if err != nil {
		return false
	}
	r, ok := rp.(*routerPlanner)
	if !ok {
		return false
	}
	stmt, err := r.r.Analyze(sql)
	if err != nil {
		return false
	}
	p, err := stmt.Route(nil, nil, router.Hints{})
	if err != nil {
		return false
	}
	switch p.Kind {
	case router.Parts:
		// Several statements that run one at a time (a write among
		// them, for one): a read only if each is.
		for _, part := range p.Parts {
			if !c.reads(part, readOnlyBegin, false) {
				return false
			}
		}
		return true
	case router.Transaction:
		return txStatementReads(sql, readOnlyBegin, txEnds)
	case router.Session, router.OmniWrite:
		return false
	}
	return !p.Write
}

// isReadOnlyBegin reports whether sql is one BEGIN or START TRANSACTION
// with READ ONLY (and not SERIALIZABLE, which a standby refuses).
func isReadOnlyBegin(sql string) bool { return txStatementReads(sql, true, false) }

// txStatementReads reports whether sql, one transaction statement, may
// run on a replica: with readOnlyBegin a BEGIN or START TRANSACTION with
// READ ONLY (and not SERIALIZABLE, which a standby refuses); with txEnds a
// COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE or ROLLBACK TO, which
// write nothing, so that in a batch of reads (a pipelined BEGIN READ ONLY,
// SELECT, COMMIT) they run on a replica as well as the reads do. COMMIT
// AND CHAIN keeps the ended transaction's access mode; PREPARE TRANSACTION
// and COMMIT PREPARED are never among them (a standby refuses both).
func txStatementReads(sql string, readOnlyBegin, txEnds bool) bool {
	if !readOnlyBegin && !txEnds {
		return false
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	ts := tree.Stmts[0].Stmt.GetTransactionStmt()
	if ts == nil {
		return false
	}
	switch ts.Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_BEGIN, pg_query.TransactionStmtKind_TRANS_STMT_START:
		return readOnlyBegin && beginsReadOnly(ts)
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT, pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK,
		pg_query.TransactionStmtKind_TRANS_STMT_SAVEPOINT, pg_query.TransactionStmtKind_TRANS_STMT_RELEASE,
		pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		return txEnds
	}
	return false
}

// beginsReadOnly reports whether the options of a BEGIN or START
// TRANSACTION ask for READ ONLY and not SERIALIZABLE.
func beginsReadOnly(ts *pg_query.TransactionStmt) bool {
	readOnly := false
	for _, o := range ts.Options {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "transaction_read_only":
			if a := d.Arg.GetAConst(); a != nil && a.GetIval() != nil {
				readOnly = a.GetIval().Ival != 0
			}
		case "transaction_isolation":
			if a := d.Arg.GetAConst(); a != nil && a.GetSval() != nil && a.GetSval().Sval == "serializable" {
				return false
			}
		}
	}
	return readOnly
}

// takeRead returns and clears the decision of chooseRead.
func (c *client) takeRead() bool {
	read := c.lb.read
	c.lb.read = false
	return read
}

// checkoutBalanced checks a server out for a transaction on shard: with
// read, from the replicas ReadPools lists, banning each that fails to
// connect and falling back to the primary; else from primary. It returns
// the pool the server (or the error) came from.
func (c *client) checkoutBalanced(ctx context.Context, primary *pool.Pool, shard int, read bool) (*pool.Server, *pool.Pool, error) {
	var cands []*pool.Pool
	if read {
		cands = c.st.Pools.ReadPools(c.db, c.user, shard)
	}
	if co := c.coro(); co != nil && co.onLoop.Load() {
		// On the event loop a checkout of the primary that needs no new
		// connection stays there, waiting for a server if it must.
		if len(cands) == 0 {
			if s, ok, err := c.hotCheckout(ctx, co, primary); ok {
				return s, primary, err
			}
		}
		c.offLoop()
	}
	for _, p := range cands {
		if p.Key.Role != pool.RoleReplica {
			break // the primary's turn (include_primary), or the fallback
		}
		s, err := observeCheckout(ctx, p, c.startup)
		for tries := 0; err == nil && !s.Alive() && tries <= p.Config.Size; tries++ {
			// An idle server of a replica that went away (a restart, a
			// failover): drop it rather than fail the client's read.
			s.Broken = true
			p.Checkin(s)
			s, err = observeCheckout(ctx, p, c.startup)
		}
		if err == nil {
			return s, p, nil
		}
		if ctx.Err() != nil {
			return nil, p, err
		}
		if connectFailed(err) {
			c.st.Pools.Ban(p, err)
		}
		c.log.Debug("replica checkout failed; trying the next server", "pool", p.Key.String(), "err", err)
	}
	s, err := observeCheckout(ctx, primary, c.startup)
	return s, primary, err
}

func observeCheckout(ctx context.Context, p *pool.Pool, st pool.Startup) (*pool.Server, error) {
	start := clock.Now()
	s, err := p.CheckoutStartup(ctx, st)
	p.Stats.WaitTime.Observe(time.Since(start))
	return s, err
}

// connectFailed reports whether a checkout error means the server could
// not be connected to (rather than the pool being exhausted or closed).
func connectFailed(err error) bool {
	if errors.Is(err, pool.ErrClosed) || pool.IsStartupRejected(err) {
		return false
	}
	_, proxyErr := wire.AsError(err)
	return !proxyErr
}

// serverPool returns the pool s belongs to: a replica's or the primary's.
func serverPool(s *pool.Server, fallback *pool.Pool) *pool.Pool {
	if p := s.Pool(); p != nil {
		return p
	}
	return fallback
}
