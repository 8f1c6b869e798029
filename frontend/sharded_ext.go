package frontend

import (
	"context"
	"errors"
	"iter"
	"sync"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/router"
	"github.com/shardgate/shardgate/wire"
)

// The extended protocol on sharded databases.
//
// Where a statement goes is known only at Bind (its parameters carry the
// sharding key), so the proxy answers Parse, Bind and Close itself and
// sends each Execute — with the Parse and Bind it needs — to the shards
// the bound statement routes to, followed by a Sync that the client never
// sees (sharded_execute.go; with a row limit, Flush: sharded_portal.go).
// A Bind that its Execute follows is answered when the shards bind it
// (deferBind), so that errors PostgreSQL raises at Bind answer the Bind.
// Describe of a statement asks any shard (schemas are the same
// everywhere). A batch is read whole (up to Sync or Flush) before it runs,
// so that a Describe of a portal travels with its Execute. A statement
// that uses SQL-level prepared statements is planned as in a simple Query
// (shardedSQLPrep).

// sStmt is a client's prepared statement on a sharded database.
type sStmt struct {
	sql   string
	st    *stmt // proxy-wide statement (name and Parse message)
	query []byte

	effOnce sync.Once
	eff     stmtEffect
	spOnce  sync.Once
	sp      *sqlPrep
	// analysis is the router's analysis of sql, made at the first Bind
	// (routerPlanner.planBound).
	analysis stmtAnalysis
}

// stmtAnalysis is the router's analysis of a statement's text, with the
// router and the standard_conforming_strings it was made for.
type stmtAnalysis struct {
	stmt     *router.Statement
	router   *router.Router
	standard bool
}

// params returns how many parameters a Bind of the statement must supply
// (stmt.params).
func (st *sStmt) params() int {
	if st.st == nil {
		return -1
	}
	return st.st.params()
}

// effect returns what executing the statement does to the session.
func (st *sStmt) effect() stmtEffect {
	st.effOnce.Do(func() { st.eff = analyze([]byte(st.sql)) })
	return st.eff
}

// sqlPrep returns what the statement does with SQL-level prepared
// statements (PREPARE, EXECUTE, DEALLOCATE), nil if nothing.
func (st *sStmt) sqlPrep() *sqlPrep {
	st.spOnce.Do(func() {
		if st.effect().eff&effSQLPrepare != 0 {
			st.sp = parseSQLPrep(st.sql)
		}
	})
	return st.sp
}

// sPortal is a bound statement.
type sPortal struct {
	stmt    *sStmt
	params  [][]byte
	formats []int16
	tail    []byte // Bind body after the statement name
	plan    *routePlan
	// suspended: an Execute with a row limit stopped before the last row
	// (PortalSuspended); the rest waits in the unnamed portal of shard's
	// server (see sharded_portal.go).
	suspended bool
	shard     int
	// ran: an Execute ran the portal to its end (executeRan answers the
	// next).
	ran bool
	// half: the portal's Bind failed on its shard (a parameter that does
	// not convert, a planning error). PostgreSQL made the portal before
	// the error, without a query: until the transaction ends it exists,
	// describes as NoData and executes as the empty query.
	half bool
	// chunks are the merged rows of a portal on several shards that an
	// Execute with a row limit has not fetched yet (sharded_chunks.go).
	chunks *bufferedRows
	// stream is the paused merge of a cross-shard read fetched in chunks
	// (sharded_stream.go).
	stream *portalStream
	// The portal's own room for the usual few parameters and for its
	// plan, so that a Bind makes one allocation, not four.
	paramsBuf  [2][]byte
	formatsBuf [2]int16
	planBuf    routePlan
}

type batchMsg struct {
	typ  byte
	body []byte
}

// shardedExtended buffers one extended-protocol message; at Sync or Flush
// the batch runs.
func (c *client) shardedExtended(ctx context.Context, typ byte, body []byte) error {
	if c.shardedState == nil {
		// Only setShards makes it, and a becomeSharded that left the
		// client as it was (not movable) comes here all the same.
		c.shardedState = &shardedState{}
	}
	if c.batchBuf == nil {
		c.batchBuf = make([]byte, 0, max(c.batchHint, len(body), 64))
	}
	// A body's slice has no room past it: nothing appended later can
	// write into it. A buffer that grows leaves the earlier bodies in the
	// array they were copied to, which they keep alive (a portal's
	// parameters stay in its Bind's body).
	n := len(c.batchBuf)
	c.batchBuf = append(c.batchBuf, body...)
	c.batch = append(c.batch, batchMsg{typ: typ, body: c.batchBuf[n:len(c.batchBuf):len(c.batchBuf)]})
	if typ != 'S' && typ != 'H' {
		return nil
	}
	batch := c.batch
	buf := c.batchBuf
	c.batch = nil
	c.batchHint, c.batchBuf = len(c.batchBuf), nil // the portals may keep this one
	defer c.recycleBatch(batch)
	implicit := batchIsImplicit(batch)
	c.batchReads = false
	if c.balanced() {
		// Decided before the batch's first message takes a server. A
		// batch of reads with several Executes is an implicit
		// transaction that may span shards: on replicas it commits on
		// each shard on its own (executor.Session.Commit), as a standby
		// refuses PREPARE TRANSACTION.
		unnamed, _ := c.sstmtText(nil)
		c.batchReads = c.readBatch(batchMessages(batch), c.sstmtText, unnamed, false, false)
	}
	first := true // the batch's first Execute is still to come
	for k := 0; k < len(batch); k++ {
		m := batch[k]
		if c.stream != nil {
			c.streamNext(m.typ, m.body)
		}
		if c.pipe.has(pipeDropping) && m.typ != 'S' {
			if m.typ == 'H' {
				// The error that started the skip reaches the client now,
				// as PostgreSQL's does.
				if err := c.flushClient(); err != nil {
					return err
				}
			}
			continue
		}
		var err error
		switch m.typ {
		case 'P':
			err = c.sParse(ctx, m.body)
		case 'B':
			err = c.sBind(ctx, m.body, deferBind(batch[k:]))
		case 'D':
			kind, name, derr := describeMsg('D', m.body)
			switch {
			case derr != nil:
				err = derr
			case kind == 'P' && k+1 < len(batch) && batch[k+1].typ == 'E' && executesPortal(batch[k+1].body, name):
				k++
				if implicit {
					c.beginImplicit(batch[k].body, first)
				}
				first = false
				err = c.sExecute(ctx, batch[k].body, true)
			default:
				err = c.sDescribe(ctx, kind, name)
			}
		case 'E':
			if implicit {
				c.beginImplicit(m.body, first)
			}
			first = false
			err = c.sExecute(ctx, m.body, false)
		case 'C':
			err = c.sClose(m.body)
		case 'H':
			err = c.flushClient()
		case 'S':
			err := c.sSync()
			if c.batchBuf == nil && batchKeepsNothing(batch) && c.keepsNoBodies() && cap(buf) <= batchKeep {
				c.batchBuf = buf[:0] // nothing of this batch's bodies survives it
			}
			return err
		}
		if err != nil {
			var lost *shardLost
			if errors.As(err, &lost) {
				c.server = lost.server
				if err := c.failShard(lost.err, false); err != nil {
					return err
				}
				continue
			}
			e, ok := wire.AsError(err)
			if !ok || e.Fatal() {
				return err
			}
			if c.xs.InTx() {
				c.xs.Abort()
			}
			c.w.Write(wire.AppendError(nil, e))
			c.pipe.set(pipeDropping, true)
		}
	}
	return nil
}

// recycleBatch keeps batch's slice for the next batch (its messages'
// bodies stay with the buffer they were copied to).
func (c *client) recycleBatch(batch []batchMsg) {
	if c.shardedState != nil && c.batch == nil {
		clear(batch)
		c.batch = batch[:0]
	}
}

// batchKeep bounds the batch buffer a client keeps for its next batch:
// enough for the usual Bind, Describe, Execute and Sync of a few
// parameters. A client that parks drops it (shed).
const batchKeep = 256

// batchKeepsNothing reports whether no message of batch is of a kind whose
// body something may keep after the batch: a Parse's statement keeps its
// text (sStmt.query), a Close and a Flush end the batch with portals
// open. Bind, Describe and Execute keep bodies only in portals, which
// keepsNoBodies checks.
func batchKeepsNothing(batch []batchMsg) bool {
	for _, m := range batch {
		switch m.typ {
		case 'B', 'D', 'E', 'S':
		default:
			return false
		}
	}
	return true
}

// keepsNoBodies reports whether, after a Sync, the client holds nothing
// that may point into the bodies of the batch: no portal (their
// parameters and Bind tails are slices of the Bind's body), no paused
// merge and no cursor of the proxy's (a DECLARE's parameters). The
// batch's buffer can then take the next batch.
func (c *client) keepsNoBodies() bool {
	return len(c.sportals) == 0 && c.stream == nil && len(c.cursors) == 0
}

// batchIsImplicit reports whether a batch (up to Sync or Flush) runs in an
// implicit transaction of its own: when it executes more than one
// statement, or executes one and ends with Flush (more may follow before
// the Sync). PostgreSQL commits the statements of a batch together at the
// Sync; a batch that executes one statement and syncs needs nothing more
// than that statement's own transaction — unless a message that may fail
// follows its Execute (a Parse, Bind or Describe), whose error rolls the
// statement back, as in PostgreSQL.
func batchIsImplicit(batch []batchMsg) bool {
	executes := 0
	for _, m := range batch {
		switch m.typ {
		case 'E':
			executes++
		case 'P', 'B', 'D':
			if executes > 0 {
				return true
			}
		}
	}
	return executes > 1 || executes == 1 && batch[len(batch)-1].typ == 'H'
}

// beginImplicit opens the batch's implicit transaction before an Execute
// (body), unless it is the batch's first and runs a statement PostgreSQL
// refuses inside a transaction block (VACUUM, DISCARD ALL, …): PostgreSQL
// runs the first statement of a pipeline before the pipeline counts as a
// transaction block, and such a statement cannot be undone anyway. The
// transaction then begins at the next Execute.
func (c *client) beginImplicit(body []byte, first bool) {
	if first {
		if name, _, err := executeMsg(body); err == nil {
			if p := c.sportals[string(name)]; p != nil && outsideTxOnly(p.stmt.sql) {
				return
			}
		}
	}
	c.xs.BeginImplicit()
}

// sSync answers the client's Sync: servers left inside the batch are
// synced, the batch's implicit transaction commits (or, after an error,
// rolls back) on every shard it touched, and outside a transaction block
// the batch's portals are gone (the client's portals are the proxy's, so
// it drops them itself).
func (c *client) sSync() error {
	c.pipe.set(pipeDropping, false)
	if err := c.syncShards(); err != nil {
		return c.shardFailed(err) // answers the Sync
	}
	if err := c.endImplicit(); err != nil {
		return err
	}
	if !c.xs.InTx() {
		if p := c.sportals[""]; p != nil && len(c.sportals) == 1 {
			c.recyclePortal(p)
		}
		clear(c.sportals)
		c.releaseIfIdle()
	}
	c.tx = c.shardedStatus()
	c.readyForQuery(c.tx)
	return c.flushClient()
}

func (c *client) sParse(ctx context.Context, body []byte) error {
	name, query, tail, err := parseMsg(body)
	if err != nil {
		return err
	}
	if len(name) == 0 {
		// PostgreSQL drops the unnamed statement before it parses the
		// new one (exec_parse_message): a Parse of it that fails leaves
		// none.
		delete(c.sstmts, "")
	}
	if err := uniqueIDInParse(query); err != nil {
		return err
	}
	sql := string(query)
	plan, err := c.rt.plan(sql, c)
	if err != nil {
		if e, ok := wire.AsError(err); ok && e.Code == wire.SyntaxError {
			return err
		}
		// Other routing errors depend on parameters or are reported at
		// Execute.
	}
	if plan != nil && plan.statements > 1 {
		return wire.Errorf(wire.SyntaxError, "cannot insert multiple commands into a prepared statement")
	}
	if c.xs.Failed() && (plan == nil || !endsFailedTx(plan)) && skipSpaceAndComments(query, 0) < len(query) {
		// As PostgreSQL's exec_parse_message: an aborted transaction
		// accepts only the statements that end it, and the empty query.
		return errAborted()
	}
	st := &sStmt{sql: sql, st: c.l.stmts.get(tail), query: query}
	if err := c.validateParse(ctx, st, plan); err != nil {
		return err
	}
	if _, ok := c.sstmts[string(name)]; len(name) > 0 && (ok || c.sqlStmts[string(name)] != nil) {
		// As PostgreSQL's StorePreparedStatement, after the statement's
		// own errors: a name in use is not replaced.
		return duplicateStatement(name)
	}
	if c.sstmts == nil {
		c.sstmts = map[string]*sStmt{}
	}
	c.sstmts[string(name)] = st
	c.w.Write(parseComplete)
	return nil
}

// validateParse parses a statement no server has accepted yet (since the
// last schema change) on one shard, so that its errors — a column or
// table that does not exist, a type mismatch — answer the client's Parse,
// as PostgreSQL's do. The shard keeps the statement for the Execute that
// usually follows. Statements the proxy answers or plans itself
// (transaction control, SQL-level EXECUTE) are not sent.
func (c *client) validateParse(ctx context.Context, st *sStmt, plan *routePlan) error {
	if st.st.valid.Load() && !st.st.noisy.Load() && !c.ownSearchPath() || plan == nil || st.sqlPrep() != nil {
		return nil
	}
	if c.proxyCursorOp(st.sql) != nil {
		return nil // a FETCH, MOVE or CLOSE of the proxy's own cursor
	}
	switch plan.Kind {
	case executor.RouteOne, executor.RouteRead, executor.RouteWrite, executor.RouteOmniWrite, executor.RouteInsertSelect:
	default:
		return nil
	}
	// The first shard the statement runs on (where it is needed next).
	shard := 0
	if len(plan.Shards) > 0 {
		shard = plan.Shards[0]
	}
	if ok, err := c.attachChecking(ctx, &plan.Plan, st.sql, shard); !ok {
		return err
	}
	return c.onShardOrFail(shard, func() error { return c.validateOn(st, shard) })
}

// attachChecking attaches shard's server for a check the shard makes
// before a statement with plan and text sql runs (validateParse,
// validateBind), balanced to a replica as the statement would be. ok false
// with a nil error: a reload changed the routing, and the statement's
// Execute reports its errors.
func (c *client) attachChecking(ctx context.Context, plan *executor.Plan, sql string, shard int) (ok bool, err error) {
	c.lb.read = c.readBalanced(plan, sql)
	err = c.attachShard(ctx, shard)
	c.lb.read = false
	if err == errReplan {
		return false, nil
	}
	return err == nil, err
}

// readBalanced reports whether the servers a statement with plan and text
// sql checks out may be its shards' replicas' (checkoutBalanced): a read
// outside a transaction block (the batch's implicit one aside), in a
// batch of reads (batchReads), on a database with replicas. The message
// that first takes a shard's server may be the Execute, or before it the
// Parse that a shard validates (validateParse) or the Describe a shard
// answers (describeShard), as drivers send Parse, Bind, Describe, Execute
// and Sync together; a statement on another shard later in the batch is
// balanced again as long as the batch holds only replicas' servers. Once
// it holds a primary's (a read that was not balanced), the rest of the
// batch goes to primaries. A nil plan (a statement's Describe, before any
// Bind) goes by the text alone.
func (c *client) readBalanced(plan *executor.Plan, sql string) bool {
	if !c.batchReads || c.xs.InTx() && !c.xs.Implicit() || c.holdsPrimary() {
		return false
	}
	if plan != nil && (plan.Write || plan.Kind != executor.RouteOne && plan.Kind != executor.RouteRead) {
		return false
	}
	return c.readStatement(sql, false)
}

// validateOn is validateParse on shard's server, attached.
func (c *client) validateOn(st *sStmt, shard int) error {
	c.server = c.xs.Server(shard)
	if err := c.useShard(shard); err != nil {
		return c.lostShard(err)
	}
	// search_path decides what the statement's names resolve to: the
	// session's, and the open transaction's when it changed it (SET
	// LOCAL): then the shard joins the transaction now, as its Execute
	// would, so that the Parse sees what PostgreSQL's would.
	pre := c.settingsPrefix(shard)
	if c.xs.InTx() && !c.xs.InTxOn(shard) && c.ownSearchPath() {
		if q := c.xs.TxPrefix(shard, false); q != "" {
			pre = append(pre, q)
		}
	}
	if err := c.runPrefix(shard, pre); err != nil {
		return err
	}
	out := c.ensureParsed(nil, st)
	if len(out) == 0 {
		if !c.ownSearchPath() && !st.st.noisy.Load() {
			return nil // the server has it
		}
		// The server has it, parsed in another session's search_path or
		// with notices PostgreSQL raises at every Parse: parse the text
		// again, unnamed, in this session.
		_, tail, _ := wire.CString(st.st.parse[5:])
		out = appendUnnamedParse(nil, tail)
		c.server.Unnamed = append(c.server.Unnamed[:0], unknownUnnamed...) // not a client's
	}
	out = append(out, 'S', 0, 0, 0, 4)
	c.clientParse, c.parseNotices = true, 0
	err := c.serverExchange(out, func(byte, []byte) {})
	c.clientParse = false
	if c.parseNotices > 0 {
		st.st.noisy.Store(true)
	}
	if err != nil {
		return err
	}
	st.st.valid.Store(true)
	return nil
}

func (c *client) sBind(ctx context.Context, body []byte, deferred bool) error {
	d := wire.NewBody(body)
	portal := d.CString()
	name := d.CString()
	if err := d.Err(); err != nil {
		return err
	}
	tail := d.Rest()
	st := c.sstmts[string(name)]
	if st == nil {
		return noSuchStatement(name)
	}
	p := c.sparePortal
	if p != nil {
		c.sparePortal = nil
		p.stmt, p.tail = st, tail // recyclePortal zeroed the rest
	} else {
		p = &sPortal{stmt: st, tail: tail}
	}
	formats, params, err := parseBindParams(tail, p.paramsBuf[:0], p.formatsBuf[:0])
	if err != nil {
		return err
	}
	if n := st.params(); n >= 0 && len(params) != n {
		return wire.Errorf(wire.ProtocolViolation, "bind message supplies %d parameters, but prepared statement \"%s\" requires %d", len(params), name, n)
	}
	p.params, p.formats = params, formats
	// A named portal that exists already is an error (the unnamed one is
	// replaced), after the aborted-transaction check and before the
	// parameters are read: exec_bind_message's order.
	dup := len(portal) > 0 && c.sportals[string(portal)] != nil
	if dup && !c.xs.Failed() {
		return duplicatePortal(portal)
	}
	if err := c.planPortal(p); err != nil {
		if c.xs.Failed() {
			return errAborted()
		}
		return err
	}
	if c.xs.Failed() && !endsFailedTx(p.plan) {
		return errAborted() // as PostgreSQL's exec_bind_message
	}
	if dup {
		return duplicatePortal(portal)
	}
	if c.sportals == nil {
		c.sportals = map[string]*sPortal{}
	}
	if !deferred {
		if err := c.validateBind(ctx, p); err != nil {
			if p.half {
				c.sportals[string(portal)] = p
			}
			return err
		}
	}
	c.sportals[string(portal)] = p
	if deferred {
		c.bindPending = true
		return nil
	}
	c.w.Write(bindComplete)
	return nil
}

// validateBind binds portal p on the first shard it runs on, for a Bind
// that its Execute does not follow (deferBind), so that the errors
// PostgreSQL raises at Bind answer it there and stop the batch: a
// parameter that does not convert to its type, and what planning finds (a
// constant 1/0). The shard binds its unnamed portal and syncs; the portal
// runs at its Execute as any other. A portal the proxy runs itself, one
// whose Execute does more than bind and run it (transaction control,
// INSERT … SELECT, SQL-level prepared statements, a parse-only probe) or
// one whose shard holds a suspended portal (in the server's unnamed
// portal, which the Bind would replace) is not bound here; its errors come
// at its Execute. A portal the shard fails to bind is left half made (see
// sPortal.half).
func (c *client) validateBind(ctx context.Context, p *sPortal) error {
	plan := p.plan
	switch plan.Kind {
	case executor.RouteOne, executor.RouteRead, executor.RouteWrite, executor.RouteOmniWrite:
	default:
		return nil
	}
	if len(plan.Shards) == 0 || plan.cursorOp != nil || plan.create != nil || len(plan.execs) > 0 ||
		plan.Merge != nil && plan.Merge.ParseOnly || c.xs.Failed() {
		return nil
	}
	shard := plan.Shards[0]
	inBatch := false
	if shard < len(c.ext) {
		if c.ext[shard].portal != nil {
			return nil
		}
		inBatch = c.ext[shard].unsynced
	}
	if ok, err := c.attachChecking(ctx, &plan.Plan, p.stmt.sql, shard); !ok {
		return err
	}
	return c.onShardOrFail(shard, func() error {
		c.server = c.xs.Server(shard)
		var err error
		if inBatch {
			// The server is inside the client's batch (an Execute
			// ended with Flush): it binds there, answered up to its
			// BindComplete, without the Sync that would end the batch.
			out := append(c.appendPortal(nil, p, shard), 'H', 0, 0, 0, 4)
			err = c.flushExchangeTo(shard, out, '2', func(byte, []byte) {})
		} else {
			if err := c.useShard(shard); err != nil {
				return c.lostShard(err)
			}
			if err := c.runPrefix(shard, c.prefix(shard, false)); err != nil {
				return err
			}
			out := append(c.appendPortal(nil, p, shard), 'S', 0, 0, 0, 4)
			err = c.serverExchange(out, func(byte, []byte) {})
		}
		if _, ok := err.(*wire.Error); ok {
			p.half = true // the shard's own error (see half)
		}
		return err
	})
}

var bindComplete = []byte{'2', 0, 0, 0, 4}

// duplicatePortal is PostgreSQL's error for a Bind to a named portal that
// is open already.
func duplicatePortal(name []byte) error {
	return wire.Errorf(wire.DuplicateCursor, "cursor \"%s\" already exists", name)
}

// recyclePortal keeps p, which the Sync that ends it is about to drop, as
// the client's spare for its next Bind. Only a portal nothing else
// points to is kept: one routed to a single shard by the router's plan in
// the portal's own room (not a cursor's, an SQL-level statement's or
// transaction control's), run to its end (not suspended on a server, no
// chunks or paused merge kept). It is zeroed, so that it keeps no Bind
// body alive.
func (c *client) recyclePortal(p *sPortal) {
	if p.plan != &p.planBuf || p.plan.Kind != executor.RouteOne || len(p.plan.Shards) != 1 ||
		p.suspended || p.chunks != nil || p.stream != nil || c.stream != nil || c.sparePortal != nil {
		return
	}
	for i := range c.ext {
		if c.ext[i].portal == p {
			return
		}
	}
	*p = sPortal{}
	c.sparePortal = p
}

// deferBind reports whether the Bind that starts batch is executed by the
// next message, or by the one after a Describe of its portal: that Execute
// then binds it on its shard first, and the client's BindComplete waits for
// the shard's (bindDone). PostgreSQL plans an unnamed or custom-planned
// statement at Bind, so that planning errors (a constant 1/0, a cast of a
// parameter that fails) answer the Bind; every driver sends Bind right
// before its Execute. A Bind executed later, after other messages, is
// answered at once, and its planning errors come at its Execute.
func deferBind(batch []batchMsg) bool {
	d := wire.NewBody(batch[0].body)
	portal := d.CString()
	if d.Err() != nil || len(batch) < 2 {
		return false
	}
	next := batch[1]
	if next.typ == 'D' && len(batch) > 2 {
		kind, name, err := describeMsg('D', next.body)
		if err != nil || kind != 'P' || string(name) != string(portal) {
			return false
		}
		next = batch[2]
	}
	return next.typ == 'E' && executesPortal(next.body, portal)
}

// bindDone answers a held-back Bind (bindPending) with BindComplete: the
// shard bound the portal, or the Execute runs where nothing binds at a
// shard.
func (c *client) bindDone() {
	if c.bindPending {
		c.bindPending = false
		c.toClient(bindComplete)
	}
}

func (c *client) sClose(body []byte) error {
	kind, name, err := describeMsg('C', body)
	if err != nil {
		return err
	}
	if kind == 'S' {
		delete(c.sstmts, string(name))
	} else {
		delete(c.sportals, string(name))
	}
	c.w.Write([]byte{'3', 0, 0, 0, 4})
	return nil
}

// sDescribe answers Describe of a statement (from any shard) or of a
// portal (from its first target shard).
func (c *client) sDescribe(ctx context.Context, kind byte, name []byte) error {
	var st *sStmt
	var p *sPortal
	if kind == 'S' {
		st = c.sstmts[string(name)]
		if st == nil {
			return noSuchStatement(name)
		}
		if op := c.proxyCursorOp(st.sql); op != nil {
			c.w.Write([]byte{'t', 0, 0, 0, 6, 0, 0}) // no parameters
			c.w.Write(c.cursorDescription(op))
			return nil
		}
	} else {
		p = c.sportals[string(name)]
		if p == nil {
			e := wire.Errorf(wire.InvalidCursorName, "portal \"%s\" does not exist", name)
			e.At = wire.AtDescribePortal
			return e
		}
		if p.half {
			c.w.Write(wire.AppendNoData(nil))
			return nil
		}
		if c.xs.Failed() {
			return c.describeFailedPortal(p)
		}
		if p.plan.Kind == executor.RouteLocal {
			c.w.Write(c.portalCursorDescription(p))
			return nil
		}
		st = p.stmt
	}
	shard, err := c.describeShard(ctx, st, p)
	if err != nil {
		return err
	}
	return c.onShardOrFail(shard, func() error { return c.describeOn(shard, st, p) })
}

// describeOn is sDescribe of statement st or portal p (when not nil) on
// shard's server, attached.
func (c *client) describeOn(shard int, st *sStmt, p *sPortal) error {
	s := c.xs.Server(shard)
	c.server = s
	if err := c.useShard(shard); err != nil {
		return c.lostShard(err)
	}
	// The client's settings (search_path) decide what the statement
	// means. A shard does not join the client's transaction to describe.
	if err := c.runPrefix(shard, c.settingsPrefix(shard)); err != nil {
		return err
	}
	// An EXECUTE of the client's SQL-level statement describes the
	// proxy-wide statement it runs, which the server must have.
	var execs []*sqlStmt
	if p != nil {
		execs = p.plan.execs
	} else if sp := st.sqlPrep(); sp != nil && len(sp.execs) > 0 {
		var sql string
		if sql, execs = c.rewriteExecs(st.sql, sp); execs != nil {
			st = st.derived(c, sql)
		}
	}
	if err := c.ensurePrepared(s, execs); err != nil {
		if s.Broken {
			return c.lostOwnStatement(err)
		}
		return err
	}
	var out []byte
	switch {
	case p != nil && len(execs) > 0:
		out = c.appendPortal(out, p, shard) // the rewritten EXECUTE
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
	case p != nil:
		// The client's statement, not a rewrite with hidden columns.
		out = c.ensureParsed(out, st)
		out = c.appendBind(out, p)
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
	default:
		out = c.ensureParsed(out, st)
		out = append(out, 'D', 0, 0, 0, 0, 'S')
		out = append(out, st.st.name...)
		out = append(out, 0)
		out = wire.FinishMessage(out, len(out)-len(st.st.name)-7)
	}
	out = append(out, 'S', 0, 0, 0, 4)
	if c.xs.Failed() {
		return c.describeFailed(out)
	}
	return c.serverExchange(out, func(typ byte, raw []byte) {
		switch typ {
		case 't', 'T', 'n':
			c.toClient(raw)
		}
	})
}

// describeFailedPortal answers a Describe of portal p in a failed
// transaction, where a shard would not bind it again: PostgreSQL refuses
// to describe a portal that returns rows there (25P02) and answers NoData
// for the others.
func (c *client) describeFailedPortal(p *sPortal) error {
	if _, rows := ranTag(p.stmt.sql); rows {
		return errAborted()
	}
	c.w.Write(wire.AppendNoData(nil))
	return nil
}

// describeFailed is describeOn's exchange of out in an aborted
// transaction, which the shard does not share: PostgreSQL refuses to
// describe a statement that returns rows there (25P02, before its
// ParameterDescription), and describes the others. (A portal's Describe
// in a failed transaction is describeFailedPortal's: the shard would not
// bind it again.)
func (c *client) describeFailed(out []byte) error {
	var answer []byte
	rows := false
	err := c.serverExchange(out, func(typ byte, raw []byte) {
		switch typ {
		case 't', 'n':
			answer = append(answer, raw...)
		case 'T':
			rows = true
		}
	})
	switch {
	case err != nil:
		return err
	case rows:
		return errAborted()
	}
	c.toClient(answer)
	return nil
}

// batchMessages is batch as a sequence of its messages' types and bodies.
func batchMessages(batch []batchMsg) iter.Seq2[byte, []byte] {
	return func(yield func(byte, []byte) bool) {
		for _, m := range batch {
			if !yield(m.typ, m.body) {
				return
			}
		}
	}
}

// sstmtText returns the text of the sharded client's prepared statement
// name (the unnamed one for an empty name); false for none.
func (c *client) sstmtText(name []byte) (string, bool) {
	st := c.sstmts[string(name)]
	if st == nil {
		return "", false
	}
	return st.sql, true
}

// holdsPrimary reports whether the client holds a shard's server that is
// not a replica's.
func (c *client) holdsPrimary() bool {
	for i := range c.xs.Len() {
		if s := c.xs.Server(i); s != nil && !s.OfReplica() {
			return true
		}
	}
	return false
}

// describeShard attaches the shard that answers a Describe: any shard for
// statement st (p nil), the first shard of portal p's plan.
func (c *client) describeShard(ctx context.Context, st *sStmt, p *sPortal) (int, error) {
	pick := func() int {
		switch {
		case p == nil:
			return c.freeShard()
		case len(p.plan.Shards) > 0:
			return p.plan.Shards[0]
		}
		return 0
	}
	shard := pick()
	for attempt := 0; ; attempt++ {
		if p != nil {
			c.lb.read = c.readBalanced(&p.plan.Plan, p.stmt.sql)
		} else {
			c.lb.read = c.readBalanced(nil, st.sql)
		}
		err := c.attachShard(ctx, shard)
		c.lb.read = false
		if err != errReplan {
			return shard, err
		}
		if attempt >= maxReplans {
			return 0, errReplansExhausted()
		}
		// Chosen before a reload that changed the routing: choose again.
		if p != nil {
			if err := c.planPortal(p); err != nil {
				return 0, err
			}
		}
		shard = pick()
	}
}

// derived returns the statement with the client's parameter types and
// text sql: what a shard runs in the client's statement's place.
func (st *sStmt) derived(c *client, sql string) *sStmt {
	tail := append(append([]byte(sql), 0), st.typesPart()...)
	return &sStmt{sql: sql, st: c.l.stmts.get(tail)}
}

// anyShard is the shard that answers shard-independent questions: one the
// client already holds, else a random one.
func (c *client) anyShard() int {
	for i := range c.ext {
		if c.xs.Server(i) != nil {
			return i
		}
	}
	return pickShard(c.xs.Len())
}

// freeShard is anyShard for the Describe of a statement, which any shard
// answers alike: an attached shard whose server is not inside a batch that
// a row-limited Execute left open (the Describe would end it, and the
// suspended portal with it), else a shard not attached, else anyShard's.
func (c *client) freeShard() int {
	n := min(len(c.ext), c.xs.Len())
	for i := range n {
		if c.xs.Server(i) != nil && !c.ext[i].unsynced {
			return i
		}
	}
	for i := range n {
		if c.xs.Server(i) == nil {
			return i
		}
	}
	return c.anyShard()
}

// ensureParsed appends the Parse of st if the current server lacks it.
// The server is taken to have the statement from then on, unless it
// answers an error before the Parse's ParseComplete: an error after it
// (a failed Bind or Execute) leaves the statement in place
// (serverExchange, and shardRows.parsing for a fan-out).
func (c *client) ensureParsed(out []byte, st *sStmt) []byte {
	s := c.server
	if _, ok := s.Prepared[st.st.name]; !ok {
		out = append(out, st.st.parse...)
		s.Prepared[st.st.name] = struct{}{}
		c.pendingPrepare = st.st.name
	}
	return out
}

func (c *client) appendBind(out []byte, p *sPortal) []byte {
	start := len(out)
	out = append(out, 'B', 0, 0, 0, 0, 0)
	out = append(out, p.stmt.st.name...)
	out = append(out, 0)
	out = append(out, p.tail...)
	return wire.FinishMessage(out, start)
}

// serverExchange writes out (which ends with Sync) to c.server and hands
// every answer up to ReadyForQuery to fn; it returns the first server
// error.
func (c *client) serverExchange(out []byte, fn func(typ byte, raw []byte)) error {
	srv := c.server
	srv.W.Write(out)
	if err := srv.Flush(); err != nil {
		return c.lostWrite(err)
	}
	sent := c.mono()
	var serr *wire.Error
	deadFirst := false // see relayAnswer
	for first := true; ; first = false {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			srv.Broken = true
			return c.lostAnswer(err, deadFirst)
		}
		switch typ {
		case 'E', 'S', 'Z':
			if first && typ == 'E' {
				deadFirst = diedIdle(wire.ParseError(body), sent)
			}
			if c.noteAnswer(srv, &serr, typ, raw, body) {
				if serr != nil {
					return serr
				}
				return nil
			}
		case '1':
			c.pendingPrepare = "" // the statement exists, whatever fails next
			fn(typ, raw)
		case 'N':
			switch {
			case c.clientParse:
				c.parseNotices++
				c.toClient(raw)
			case c.pendingPrepare != "":
				// Raised by the Parse the proxy added for a statement
				// the client parsed before: PostgreSQL raised it at
				// the client's Parse (stmt.noisy), not again.
			default:
				c.toClient(raw)
			}
		default:
			fn(typ, raw)
		}
	}
}

// noteAnswer keeps the books on an ErrorResponse, ParameterStatus or
// ReadyForQuery of a shard's answer, for serverExchange and relayAnswer
// alike; none of them reaches the client as it is. It keeps the server's
// first error in *serr, forgets the statement whose Parse the proxy added
// when the answer fails, keeps a reported setting the statement changed
// (SET TimeZone) for the client's ReadyForQuery, as PostgreSQL reports it,
// and reports whether typ is the ReadyForQuery that ends the answer.
func (c *client) noteAnswer(srv *pool.Server, serr **wire.Error, typ byte, raw, body []byte) (ready bool) {
	switch typ {
	case 'E':
		if *serr == nil {
			*serr = wire.ParseError(body)
			srv.NoteError(*serr)
		}
		if c.pendingPrepare != "" {
			delete(srv.Prepared, c.pendingPrepare) // the Parse failed
			c.pendingPrepare = ""
		}
	case 'S':
		srv.NoteParameter(body)
		c.report(raw)
	case 'Z':
		c.pendingPrepare = ""
		return true
	}
	return false
}

// appendPortal appends the Parse (if the server lacks the statement) and
// Bind that recreate portal p on shard i's server: the client's statement,
// the router's rewrite of it, or — for a multi-row INSERT split between
// shards — the INSERT with shard i's rows and their parameters.
func (c *client) appendPortal(out []byte, p *sPortal, i int) []byte {
	st := p.stmt
	plan := p.plan
	sql := plan.SQLFor(i)
	tail := p.tail
	if sql != st.sql {
		// The original Parse tail is query NUL, int16 count, OIDs.
		types := st.tailTypes()
		var newTail []byte
		if pm, ok := plan.PerShardParams[i]; ok {
			newTail = append([]byte(sql), 0)
			newTail = wire.AppendInt16(newTail, int16(len(pm)))
			for _, k := range pm {
				oid := uint32(0)
				if k < len(types) {
					oid = types[k]
				}
				newTail = wire.AppendInt32(newTail, int32(oid))
			}
			tail = rebindParams(p, pm)
		} else {
			newTail = append(append([]byte(sql), 0), st.typesPart()...)
			if plan.Merge != nil && plan.Merge.HiddenColumns > 0 {
				tail = widenResultFormats(tail, plan.Merge.HiddenColumns, plan.Merge.HiddenFormats)
			}
		}
		st = &sStmt{sql: sql, st: c.l.stmts.get(newTail)}
	}
	out = c.ensureParsed(out, st)
	start := len(out)
	out = append(out, 'B', 0, 0, 0, 0, 0)
	out = append(out, st.st.name...)
	out = append(out, 0)
	out = append(out, tail...)
	return wire.FinishMessage(out, start)
}

// typesPart is the parameter-type part of the statement's Parse tail.
func (s *sStmt) typesPart() []byte {
	tail := s.st.parse[5:]
	_, tail, _ = wire.CString(tail) // name
	_, tail, _ = wire.CString(tail) // query
	return tail
}

// tailTypes returns the parameter type OIDs given at Parse.
func (s *sStmt) tailTypes() []uint32 {
	b := s.typesPart()
	n, b, ok := wire.Uint16(b)
	if !ok {
		return nil
	}
	out := make([]uint32, 0, n)
	for i := 0; i < int(n); i++ {
		v, rest, ok := wire.Uint32(b)
		if !ok {
			break
		}
		out = append(out, v)
		b = rest
	}
	return out
}

// rebindParams builds a Bind tail (formats, values, result formats) that
// passes the client's parameters pm[0], pm[1], … as $1, $2, ….
func rebindParams(p *sPortal, pm []int) []byte {
	out := wire.AppendInt16(nil, int16(len(pm)))
	for _, k := range pm {
		out = wire.AppendInt16(out, p.formats[k])
	}
	out = wire.AppendInt16(out, int16(len(pm)))
	for _, k := range pm {
		v := p.params[k]
		if v == nil {
			out = wire.AppendInt32(out, -1)
			continue
		}
		out = wire.AppendInt32(out, int32(len(v)))
		out = append(out, v...)
	}
	return append(out, resultFormats(p.tail)...)
}

// attachShards attaches every shard in shards, stopping at the first error.
//
// For a statement fanned out to several shards, each server that carries
// nothing of the client's yet is probed first (liveShard).
func (c *client) attachShards(ctx context.Context, shards []int) error {
	for _, i := range shards {
		if err := c.attachShard(ctx, i); err != nil {
			return err
		}
		if len(shards) > 1 {
			if err := c.liveShard(ctx, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// planPortal routes a bound statement with its parameters. A statement
// that uses SQL-level prepared statements is planned as a simple Query's
// is (shardedSQLPrep): an EXECUTE goes where its constant arguments
// route the prepared query. A DEALLOCATE drops the client's statement when
// it executes, not when it is bound.
func (c *client) planPortal(p *sPortal) error {
	var plan *routePlan
	var err error
	if sp := p.stmt.sqlPrep(); sp != nil {
		switch {
		case sp.dealloc:
			plan = &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, localTag: "DEALLOCATE", dealloc: sp.prepName}
		case sp.prepare && c.duplicateSQLName(sp.prepName):
			plan = &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, fail: duplicateStatement([]byte(sp.prepName))}
		default:
			plan, err = c.shardedSQLPrep(p.stmt.sql, sp)
			if e, ok := wire.AsError(err); ok && e.Code == wire.InvalidSQLStatementName {
				// EXECUTE of a statement that does not exist:
				// PostgreSQL describes its portal as NoData and fails
				// its Execute.
				plan, err = &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, fail: e}, nil
			}
		}
	}
	if plan == nil && err == nil && cursorStatement(p.stmt.sql) {
		if op := c.proxyCursorOp(p.stmt.sql); op != nil {
			plan = &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, cursorOp: op}
		} else {
			plan = c.declarePlan(p.stmt.sql, p.params, p.formats)
		}
	}
	if plan == nil && err == nil {
		plan, err = c.rt.planBound(&p.planBuf, p.stmt, p.params, p.formats, c)
	}
	if err == nil && plan.CopyOut != nil {
		// Drivers send COPY … TO STDOUT as a simple Query.
		err = &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "COPY of a query whose rows must be merged across shards is supported in the simple query protocol only",
			Hint:    "Send the COPY as a simple Query (as psql's \\copy and the drivers' COPY APIs do), or route it to one shard with /* shard: N */."}
	}
	if err != nil {
		return err
	}
	// Ops in both pool modes: a sharded session has a server per shard.
	plan.ops = p.stmt.effect().ops
	p.plan = plan
	return nil
}

// endImplicit ends the implicit transaction of an extended-protocol batch,
// if one is open: it commits unless a statement of the batch failed. A
// failed commit reaches the client as an ErrorResponse, as PostgreSQL's
// does at Sync.
func (c *client) endImplicit() error {
	if !c.xs.Implicit() {
		return nil
	}
	_, err := c.finishTx(!c.xs.Failed())
	if err == nil {
		return nil
	}
	var se *executor.ShardError
	if errors.As(err, &se) {
		return c.shardFailed(err)
	}
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	c.w.Write(wire.AppendError(nil, e))
	return nil
}

// outsideTxOnly reports whether sql is a statement PostgreSQL refuses
// inside a transaction block (it calls PreventInTransactionBlock): VACUUM,
// CLUSTER of every table, CREATE/DROP DATABASE, ALTER DATABASE … SET
// TABLESPACE, CREATE/DROP TABLESPACE, ALTER SYSTEM, REINDEX DATABASE/SYSTEM
// or CONCURRENTLY, CREATE/DROP INDEX CONCURRENTLY, DISCARD ALL, COMMIT
// PREPARED and ROLLBACK PREPARED. A word scan rules out most statements
// before the parser runs.
func outsideTxOnly(sql string) bool {
	b := []byte(sql)
	w := b[skipSpaceAndComments(b, 0):]
	switch {
	case hasKeyword(w, "vacuum"), hasKeyword(w, "cluster"), hasKeyword(w, "create"), hasKeyword(w, "drop"),
		hasKeyword(w, "alter"), hasKeyword(w, "reindex"), hasKeyword(w, "discard"), hasKeyword(w, "commit"),
		hasKeyword(w, "rollback"):
	default:
		return false
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return false
	}
	switch n := tree.Stmts[0].Stmt.Node.(type) {
	case *pg_query.Node_VacuumStmt:
		return n.VacuumStmt.IsVacuumcmd
	case *pg_query.Node_ClusterStmt:
		return n.ClusterStmt.Relation == nil
	case *pg_query.Node_CreatedbStmt, *pg_query.Node_DropdbStmt, *pg_query.Node_CreateTableSpaceStmt,
		*pg_query.Node_DropTableSpaceStmt, *pg_query.Node_AlterSystemStmt:
		return true
	case *pg_query.Node_AlterDatabaseStmt:
		for _, o := range n.AlterDatabaseStmt.Options {
			if d := o.GetDefElem(); d != nil && d.Defname == "tablespace" {
				return true
			}
		}
	case *pg_query.Node_ReindexStmt:
		r := n.ReindexStmt
		if r.Kind == pg_query.ReindexObjectType_REINDEX_OBJECT_DATABASE || r.Kind == pg_query.ReindexObjectType_REINDEX_OBJECT_SYSTEM {
			return true
		}
		for _, o := range r.Params {
			if d := o.GetDefElem(); d != nil && d.Defname == "concurrently" {
				return true
			}
		}
	case *pg_query.Node_IndexStmt:
		return n.IndexStmt.Concurrent
	case *pg_query.Node_DropStmt:
		return n.DropStmt.Concurrent
	case *pg_query.Node_DiscardStmt:
		return n.DiscardStmt.Target == pg_query.DiscardMode_DISCARD_ALL
	case *pg_query.Node_TransactionStmt:
		k := n.TransactionStmt.Kind
		return k == pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED || k == pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED
	}
	return false
}
