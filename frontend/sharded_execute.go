package frontend

import (
	"bytes"
	"context"
	"errors"
	"io"
	"time"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// Execute on sharded databases: a portal runs on the shards its plan
// names. One shard's answer is relayed as it comes, as bytes (execOne,
// relayAnswer); the answers of several are merged as for a simple Query
// (execMany). Each Execute is
// sent with the Parse and Bind its shard needs, after the settings sync and
// BEGIN of prefix, and followed by a Sync the client never sees, unless a
// row limit keeps the portal open (sharded_portal.go).

// sExecute runs a portal on the shards its plan names. A Bind held back
// for it (bindPending) is answered where its shard binds it (execOne),
// otherwise before anything else the Execute answers.
func (c *client) sExecute(ctx context.Context, body []byte, describe bool) error {
	err := c.sExecutePortal(ctx, body, describe)
	c.bindDone()
	return err
}

func (c *client) sExecutePortal(ctx context.Context, body []byte, describe bool) error {
	name, maxRows, err := executeMsg(body)
	if err != nil {
		return err
	}
	p := c.sportals[string(name)]
	if p == nil {
		return wire.Errorf(wire.InvalidCursorName, "portal \"%s\" does not exist", name)
	}
	if p.half || c.xs.Failed() && skipSpaceAndComments([]byte(p.stmt.sql), 0) == len(p.stmt.sql) {
		// A portal whose Bind failed (PostgreSQL made it before the
		// error, with no query), or one of the empty query in a failed
		// transaction (which the shard, failed as well, would not bind
		// again): PostgreSQL answers it as the empty query's
		// (exec_execute_message's NullCommand), aborted transaction or
		// not.
		c.bindDone()
		if describe {
			c.w.Write(wire.AppendNoData(nil))
		}
		c.w.Write(wire.AppendEmptyQueryResponse(nil))
		return nil
	}
	if describe && c.xs.Failed() {
		// The Describe that came before the Execute, answered before
		// the Execute fails, after the Bind's BindComplete (held back
		// for the Execute: a ROLLBACK's, the only Bind a failed
		// transaction accepts).
		c.bindDone()
		if err := c.describeFailedPortal(p); err != nil {
			return err
		}
		describe = false
	}
	if p.suspended && c.xs.Failed() {
		return errAborted()
	}
	if p.ran {
		if describe {
			if err := c.sDescribe(ctx, 'P', name); err != nil {
				return err
			}
		}
		return c.executeRan(p, name)
	}
	if p.suspended {
		err = c.resumePortal(ctx, p, name, maxRows, describe)
	} else {
		err = c.runPortal(ctx, p, name, maxRows, describe)
	}
	if err == nil && !p.suspended && p.chunks == nil && p.stream == nil {
		p.ran = true
	}
	return err
}

// executeRan answers an Execute of portal p (named name), which ran to
// its end before: PostgreSQL does not run a portal again. One whose
// statement returns rows answers none, with its command's tag and a count
// of 0 (PortalRunSelect past the end of its executor or its held rows:
// "SELECT 0", "UPDATE 0" of an UPDATE … RETURNING, "SHOW"); the empty
// query answers EmptyQueryResponse again; any other statement fails
// (PortalRun on a portal marked done).
func (c *client) executeRan(p *sPortal, name []byte) error {
	switch tag, rows := ranTag(p.stmt.sql); {
	case tag == "":
		c.w.Write(wire.AppendEmptyQueryResponse(nil))
	case c.xs.Failed():
		return errAborted() // exec_execute_message checks before PortalRun
	case rows:
		c.w.Write(wire.AppendCommandComplete(nil, tag))
	default:
		return wire.Errorf(wire.ObjectNotInPrerequisiteState, "portal \"%s\" cannot be run", name)
	}
	return nil
}

// ranTag is the command tag of an Execute of a portal of sql that ran to
// its end already, and whether sql returns rows (without them the portal
// cannot run again); "" for the empty query.
func ranTag(sql string) (tag string, rows bool) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return "-", false
	}
	if len(tree.Stmts) == 0 {
		return "", false
	}
	switch n := tree.Stmts[0].Stmt.Node.(type) {
	case *pg_query.Node_SelectStmt:
		return "SELECT 0", n.SelectStmt.IntoClause == nil
	case *pg_query.Node_InsertStmt:
		return "INSERT 0 0", len(n.InsertStmt.ReturningList) > 0
	case *pg_query.Node_UpdateStmt:
		return "UPDATE 0", len(n.UpdateStmt.ReturningList) > 0
	case *pg_query.Node_DeleteStmt:
		return "DELETE 0", len(n.DeleteStmt.ReturningList) > 0
	case *pg_query.Node_VariableShowStmt:
		return "SHOW", true
	case *pg_query.Node_ExplainStmt:
		return "EXPLAIN", true
	case *pg_query.Node_FetchStmt:
		return "FETCH 0", !n.FetchStmt.Ismove
	}
	return "-", false
}

// runPortal runs portal p (named name), bound and not run yet, for an
// Execute with row limit maxRows.
func (c *client) runPortal(ctx context.Context, p *sPortal, name []byte, maxRows int32, describe bool) error {
	plan := p.plan
	for attempt := 0; ; attempt++ {
		switch plan.Kind {
		case executor.RouteBegin, executor.RouteCommit, executor.RouteRollback, executor.RouteSavepoint:
			c.bindDone()
			if describe {
				// The portal's Describe, which came before the Execute.
				c.w.Write(wire.AppendNoData(nil))
			}
			return c.sTxControl(plan)
		}
		if c.xs.Failed() {
			return errAborted()
		}
		if plan.Kind == executor.RouteLocal {
			c.bindDone()
			if plan.cursorOp != nil {
				return c.cursorLocal(ctx, p, maxRows, describe)
			}
			return c.sLocal(plan, describe)
		}
		c.lb.read = c.readBalanced(&plan.Plan, p.stmt.sql)
		err := c.attachShards(ctx, plan.Shards)
		c.lb.read = false
		if err == errReplan && attempt < maxReplans {
			// Bound before a reload that changed the routing: bind again.
			if err := c.planPortal(p); err != nil {
				return err
			}
			plan = p.plan
			continue
		}
		if err == errReplan {
			return errReplansExhausted()
		}
		if err != nil {
			return err
		}
		break
	}
	if plan.Merge != nil && plan.Merge.ParseOnly {
		// The shards only parse the statement, with the client's
		// parameter types, for its error (router/probe.go).
		c.bindDone()
		plan.ParamTypes = p.stmt.tailTypes()
		_, err := c.xs.Execute(c.answer(plan, executor.DescribeNone), false)
		c.ranOn(plan.Shards)
		_, err = c.gatherMany("", err)
		return err
	}
	c.routeCounts().count(len(plan.Shards), c.xs.Len())
	c.txEff |= p.stmt.effect().eff
	if plan.Kind == executor.RouteInsertSelect || len(plan.Shards) > 1 && maxRows > 0 {
		c.bindDone()
	}
	if plan.Kind == executor.RouteInsertSelect {
		return c.execInsertSelect(p, describe)
	}
	if len(plan.Shards) == 1 {
		return c.execOne(p, maxRows, describe)
	}
	if maxRows > 0 {
		return c.execManyChunked(p, name, maxRows, describe)
	}
	tag, err := c.execMany(p, describe, clientSink{c})
	if err == nil {
		c.completeMany(p.plan, tag)
	}
	return err
}

// sLocal answers a portal the proxy runs itself: DEALLOCATE of a
// SQL-level statement.
func (c *client) sLocal(plan *routePlan, describe bool) error {
	if describe {
		// The portal's Describe, which PostgreSQL answers before the
		// Execute runs (and fails).
		c.w.Write(wire.AppendNoData(nil))
	}
	if plan.dealloc != "" && !c.deallocate(plan.dealloc) {
		return wire.Errorf(wire.InvalidSQLStatementName, "prepared statement \"%s\" does not exist", plan.dealloc)
	}
	if plan.fail != nil {
		return plan.fail
	}
	c.w.Write(wire.AppendCommandComplete(nil, plan.localTag))
	return nil
}

// execOne runs a portal on its one shard. With a row limit the server's
// batch stays open, so that the rest of the rows can follow (see
// sharded_portal.go).
//
// When the shard's server turns out dead before it answered anything of
// the portal, the portal runs on another server of the shard (retryShard).
func (c *client) execOne(p *sPortal, maxRows int32, describe bool) error {
	i := p.plan.Shards[0]
	return c.onShardOrFail(i, func() error { return c.execOneOn(p, i, maxRows, describe) })
}

// execOneOn is one try of execOne on shard i's server.
func (c *client) execOneOn(p *sPortal, i int, maxRows int32, describe bool) error {
	plan := p.plan
	c.server = c.xs.Server(i)
	if err := c.useShard(i); err != nil {
		return c.lostShard(err)
	}
	if err := c.runPrefix(i, c.prefix(i, false)); err != nil {
		return err
	}
	setting := plan.setting && c.xs.InTx()
	if setting {
		serr, err := c.xs.SetOnJoined(i, p.stmt.sql)
		if err != nil {
			return c.lostShard(err)
		}
		if serr != nil {
			return serr
		}
	}
	if err := c.ensurePrepared(c.server, plan.execs); err != nil {
		if c.server.Broken {
			return c.lostOwnStatement(err)
		}
		return err
	}
	if cr := plan.create; cr != nil {
		c.bindDone()
		if _, ok := c.server.Prepared[cr.st.name]; ok {
			// This server has the statement from another client.
			c.sqlStmts[cr.client] = cr.st
			return c.sLocal(&routePlan{localTag: "PREPARE"}, describe)
		}
	}
	out := c.appendPortal(c.execOut[:0], p, i)
	if describe {
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
	}
	out = append(out, 'E', 0, 0, 0, 9, 0)
	out = wire.AppendInt32(out, maxRows)
	var tag []byte
	var err error
	if maxRows > 0 {
		out = append(out, 'H', 0, 0, 0, 4)
		err = c.flushExchange(i, out, func(typ byte, raw []byte) {
			switch typ {
			case '1':
				return
			case '2':
				c.bindDone()
				return
			case 's':
				p.suspended, p.shard = true, i
				c.ext[i].portal = p
			case 'C':
				tag = append(c.execTag[:0], raw[5:]...)
			}
			c.toClient(raw)
		})
	} else {
		out = append(out, 'S', 0, 0, 0, 4)
		tag, err = c.relayAnswer(out)
	}
	if cap(out) <= scratchKeep {
		c.execOut = out[:0] // written to the server: reusable
	}
	c.ranOn(plan.Shards)
	if _, ok := wire.AsError(err); ok && c.bindPending {
		// The shard failed the Parse or Bind: its error answers the Bind.
		c.bindPending = false
		p.half = true
	}
	if err != nil || tag == nil {
		return err
	}
	c.completed(plan, i, p.stmt.sql, tag, setting)
	if cap(tag) <= scratchKeep {
		c.execTag = tag[:0]
	}
	return nil
}

// relayAnswer writes out, the messages of an Execute that ends with Sync,
// to c.server and relays the server's answer to the client up to its
// ReadyForQuery, which the client's own Sync answers later (sSync). It
// returns the CommandComplete's tag (nil without one) and the server's first
// error, which the caller answers in its place.
//
// The answer is relayed as bytes: each run of whole messages in the
// server's read buffer that the client gets as they are (RowDescription,
// DataRow, CommandComplete, notices, and the shard's BindComplete when it
// answers the client's held-back Bind) is copied to the client's writer in
// one piece, as PostgreSQL sent it. The messages the proxy keeps or drops
// (answerStep) end a run; a message that is not all in the buffer yet is
// read with Next.
func (c *client) relayAnswer(out []byte) ([]byte, error) {
	srv := c.server
	srv.W.Write(out)
	if err := srv.Flush(); err != nil {
		return nil, c.lostWrite(err)
	}
	a := answer{c: c, srv: srv, tag: c.execTag[:0], sent: c.mono()}
	for !a.done {
		frames := srv.R.Frames()
		if len(frames) == 0 {
			typ, raw, body, err := srv.R.Next()
			if err != nil {
				srv.Broken = true
				return nil, c.lostAnswer(err, a.deadFirst)
			}
			if a.step(typ, raw, body) {
				c.toClient(raw)
			}
			continue
		}
		run, off := 0, 0
		for rest := frames; len(rest) > 0 && !a.done; {
			var raw []byte
			raw, rest = wire.SplitFrame(rest)
			if !a.step(raw[0], raw, raw[5:]) {
				// Not the client's as it is: the run so far goes, this
				// message does not.
				if off > run {
					c.toClient(frames[run:off])
				}
				run = off + len(raw)
			}
			off += len(raw)
		}
		if off > run {
			c.toClient(frames[run:off])
		}
		srv.R.Discard(off)
	}
	if !a.completed {
		a.tag = nil
	}
	if a.serr != nil {
		return a.tag, a.serr
	}
	return a.tag, nil
}

// answer is the state of relayAnswer's read of one server answer.
type answer struct {
	c         *client
	srv       *pool.Server
	tag       []byte      // the CommandComplete's tag, once completed
	completed bool        // a CommandComplete came
	serr      *wire.Error // the server's first error
	done      bool        // ReadyForQuery came
	// sent is when the messages went out (clock.Mono); deadFirst says
	// that the first message of the answer was a FATAL that came within
	// deadServerWindow of it (see retryShard).
	sent      time.Duration
	deadFirst bool
	stepped   bool // a message of the answer was taken
}

// step takes note of one message of the server's answer (noteAnswer's
// bookkeeping and execOne's) and reports whether the client gets it as it
// is. It writes nothing to the client itself, so that the messages it
// passes keep their order in relayAnswer's runs: the client's held-back
// BindComplete is the shard's own, relayed in its place.
func (a *answer) step(typ byte, raw, body []byte) bool {
	c := a.c
	first := !a.stepped
	a.stepped = true
	switch typ {
	case 'E', 'S', 'Z':
		a.done = c.noteAnswer(a.srv, &a.serr, typ, raw, body)
		if first && typ == 'E' {
			a.deadFirst = diedIdle(a.serr, a.sent)
		}
		return false
	case '1':
		c.pendingPrepare = "" // the statement exists, whatever fails next
		return false
	case '2':
		if c.bindPending && len(raw) == len(bindComplete) {
			c.bindPending = false
			return true
		}
		return false
	case 'N':
		// A notice of the Parse the proxy added for a statement the
		// client parsed before: PostgreSQL raised it at the client's
		// Parse (stmt.noisy), not again.
		return c.pendingPrepare == ""
	case 'C':
		a.tag = append(a.tag[:0], body...)
		a.completed = true
	}
	return true
}

// scratchKeep bounds the scratch buffers a client keeps between
// statements (execOut, execTag): a bigger one was a rare statement's.
const scratchKeep = 4096

// completed records what a statement that completed on shard i (with
// CommandComplete body tag) did to the session: a PREPARE's statement, the
// statements DISCARD ALL and DEALLOCATE ALL dropped, and its session ops
// (kept with the transaction, or the open batch, until they count).
func (c *client) completed(plan *routePlan, i int, sql string, tag []byte, setting bool) {
	sc := &c.ext[i]
	if cr := plan.create; cr != nil {
		c.server.Prepared[cr.st.name] = struct{}{}
		c.sqlStmts[cr.client] = cr.st
	}
	if bytes.Equal(tag, tagDeallocateAll) || bytes.Equal(tag, tagDiscardAll) {
		// Not transactional: they are gone now.
		c.dropStatements()
	}
	switch {
	case c.xs.InTx():
		start := len(c.sess.pending)
		for _, op := range plan.ops {
			op.server = c.server
			c.sess.pending = append(c.sess.pending, op)
		}
		if setting {
			c.ranSetting(sql, start)
		}
	case sc.unsynced:
		sc.batchOps = append(sc.batchOps, plan.ops...)
	case len(plan.ops) > 0:
		c.applyOps(plan.ops)
	}
}

// runPrefix sends shard i's server pre, the internal Queries of prefix
// or settingsPrefix, in round trips of their own. A server that fails them
// is broken; the client's statement fails with the server's error.
func (c *client) runPrefix(i int, pre []string) error {
	s := c.xs.Server(i)
	for _, q := range pre {
		_, _, e, err := serverQuery(s, q, c.toClient)
		if err != nil {
			c.server = s
			return c.lostOwnStatement(err)
		}
		if e != nil {
			s.Broken = true
			c.log.Warn("restoring the session's settings on a shard failed", "server", s.Addr, "err", e.Error())
			return &wire.Error{Severity: "ERROR", Code: e.Code, Message: e.Message,
				Detail: "shardgate could not restore this session's settings on a pooled server connection",
				Hint:   e.Hint}
		}
	}
	return nil
}

// execMany runs a portal on several shards and merges their answers into
// sink as the simple protocol does, returning the command tag.
func (c *client) execMany(p *sPortal, describe bool, sink io.Writer) (string, error) {
	g, err := c.startMany(p, describe, sink)
	if err != nil {
		return "", err
	}
	tag, err := g.gather()
	return c.gatherMany(tag, err)
}

// manyExec is a portal sent to several shards whose answers are still to
// be merged.
type manyExec struct {
	xs       *executor.Session
	a        *executor.Answer
	readers  []*executor.ShardRows
	implicit bool
	firstErr *wire.Error
}

// gather merges the answers into the sink (executor.Session.Gather); it
// touches nothing of the client but its servers and the sink.
func (g *manyExec) gather() (string, error) {
	return g.xs.Gather(g.a, g.readers, g.implicit, g.firstErr)
}

// gatherMany finishes what gather returned: a broken shard is lost.
func (c *client) gatherMany(tag string, err error) (string, error) {
	var se *executor.ShardError
	if errors.As(err, &se) {
		return "", c.lostShard(err)
	}
	return tag, err
}

// startMany sends portal p to each of its shards and reads the headers of
// their answers.
func (c *client) startMany(p *sPortal, describe bool, sink io.Writer) (*manyExec, error) {
	plan := p.plan
	implicit := !c.xs.InTx() && (plan.Kind == executor.RouteWrite || plan.Kind == executor.RouteOmniWrite)
	d := executor.DescribeNone
	if describe {
		d = executor.DescribeAll
	}
	a := c.answer(plan, d)
	a.Sink = sink
	readers := make([]*executor.ShardRows, len(plan.Shards))
	notices := executor.NewNotices()
	for k, i := range plan.Shards {
		c.server = c.xs.Server(i)
		if err := c.useShard(i); err != nil {
			return nil, c.lostShard(err)
		}
		if err := c.runPrefix(i, c.prefix(i, implicit)); err != nil {
			return nil, err
		}
		out := c.appendPortal(nil, p, i)
		parsing := c.pendingPrepare
		c.pendingPrepare = ""
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
		out = append(out, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
		out = append(out, 'S', 0, 0, 0, 4)
		c.server.W.Write(out)
		if err := c.server.Flush(); err != nil {
			return nil, c.lostShard(err)
		}
		r := executor.NewShardRows(c.server, a.Sink)
		r.Extended, r.Parsing = true, parsing
		r.ShareNotices(notices)
		readers[k] = r
	}
	c.ranOn(plan.Shards)
	var firstErr *wire.Error
	for _, r := range readers {
		r.Header()
		if err := r.IOErr(); err != nil {
			c.server = r.Server()
			return nil, c.lostShard(err)
		}
		if r.Err() != nil && firstErr == nil {
			firstErr = r.Err()
			if !r.Bound && c.bindPending {
				// The shards failed the Bind: the error answers it.
				c.bindPending = false
				p.half = true
			}
		}
	}
	c.bindDone()
	return &manyExec{xs: c.xs, a: a, readers: readers, implicit: implicit, firstErr: firstErr}, nil
}

// sTxControl runs BEGIN/COMMIT/ROLLBACK/SAVEPOINT sent through the
// extended protocol.
func (c *client) sTxControl(p *routePlan) error {
	if c.xs.Failed() && !endsFailedTx(p) {
		return errAborted()
	}
	switch p.Kind {
	case executor.RouteBegin:
		c.w.Write(wire.AppendCommandComplete(nil, c.beginTx(p.SQL)))
		return nil
	case executor.RouteCommit, executor.RouteRollback:
		tag, err := c.endTxTag(p.Kind == executor.RouteCommit)
		if err != nil {
			return err
		}
		c.w.Write(wire.AppendCommandComplete(nil, tag))
		return nil
	}
	tag, serr, err := c.runSavepoint(p)
	if err != nil {
		return c.lostShard(err)
	}
	if serr != nil {
		return serr
	}
	c.w.Write(wire.AppendCommandComplete(nil, tag))
	return nil
}

// lostWrite is lostShard for a failed write of the client's statement to
// c.server: retried on another server when nothing reached the server
// (retryShard).
func (c *client) lostWrite(err error) error { return c.lostShardRetry(err, pool.NothingSent(err)) }

// lostAnswer is lostShard for a failed read of the answer to the client's
// statement on c.server: retried on another server when the server's
// first answer was a FATAL that came at once (deadFirst: a server that
// died idle in its pool, see retryShard).
func (c *client) lostAnswer(err error, deadFirst bool) error { return c.lostShardRetry(err, deadFirst) }
