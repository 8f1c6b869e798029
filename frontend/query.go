package frontend

import (
	"context"
	"errors"
	"strings"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// reqKind is a message sent to the server that the relay expects an answer
// to.
type reqKind uint8

const (
	reqParse    reqKind = iota // answered by ParseComplete
	reqBind                    // BindComplete
	reqDescribe                // [ParameterDescription] RowDescription | NoData
	reqExecute                 // CommandComplete | EmptyQueryResponse | PortalSuspended (after rows or COPY)
	reqClose                   // CloseComplete
	reqSync                    // ReadyForQuery
	reqQuery                   // everything up to ReadyForQuery (simple Query, FunctionCall)
	reqInternal                // a Query the proxy sent itself: nothing reaches the client
)

// req is one expected answer.
type req struct {
	kind     reqKind
	injected bool // the proxy added the message: swallow its answer
	// A reqParse that the server rejects or skips after an error did not
	// create its statement: client names the client's statement to
	// forget, unnamed says the server's unnamed statement is unknown.
	// (unnamed sits with the other one-byte fields: 72 bytes, not 80, so
	// that the client's queue, qBuf, does not share the client struct's
	// size class: see TestClientSizeClass.)
	unnamed bool
	// gen: for the client's unnamed Parse, its unnamedGen (in the
	// padding after the one-byte fields).
	gen uint32
	// confirm: for reqParse the proxy-wide statement to mark prepared on
	// success; reqClose: to mark closed; reqBind: the statement bound, when
	// the server's error may name it (rewriteBind), client then the name
	// the client gave it.
	confirm *stmt
	ops     []setOp
	client  string
	// replace is the error the client gets in place of the server's
	// answer to a message that the proxy made fail on purpose (see
	// failInOrder).
	replace *wire.Error
	// create is the client's SQL-level statement that a PREPARE creates
	// when the server completes it.
	create *sqlCreate
}

// flushWriteThreshold is the batch size above which the proxy writes to the
// server concurrently with relaying answers, so that a server blocked on
// writing results cannot deadlock against a proxy blocked on writing input.
const flushWriteThreshold = 256 << 10

// simpleQuery handles a Query message.
func (c *client) simpleQuery(ctx context.Context, raw, body []byte) error {
	c.queries.Add(1)
	if c.pipe.has(pipeDropping) {
		return nil
	}
	if err := c.becomeSharded(); err != nil {
		return c.answerLocally(err, true)
	}
	sql := body
	if n := len(sql); n > 0 && sql[n-1] == 0 {
		sql = sql[:n-1]
	}
	if x := expandUniqueIDs(sql, c.l.ids.Next); len(x) != len(sql) {
		sql = x
		raw = wire.AppendQuery(nil, string(sql))
	}
	var ops []setOp
	var sp *sqlPrep
	if c.mode == config.PoolTransaction {
		se := analyze(sql)
		ops = se.ops
		c.txEff |= se.eff
		if se.eff&effSQLPrepare != 0 {
			sp = parseSQLPrep(string(sql))
		}
	}
	if c.xs != nil {
		// A simple Query drops the unnamed statement, and replaces the
		// unnamed portal with its own, which it drops at its end
		// (exec_simple_query).
		delete(c.sstmts, "")
		delete(c.sportals, "")
		return c.shardedQuery(ctx, string(sql), ops, sp)
	}
	var create *sqlCreate
	var fail error
	if sp != nil {
		done, out, cr, err := c.sqlPrepared(string(sql), sp)
		if done {
			return err
		}
		fail, create = err, cr
		if out != string(sql) {
			sql, raw = []byte(out), wire.AppendQuery(nil, out)
		}
	}
	c.chooseRead(sql)
	if err := c.attach(ctx); err == errBecameSharded {
		c.queries.Add(^uint64(0))            // counted again
		return c.simpleQuery(ctx, raw, body) // on the sharded path now
	} else if err != nil {
		return c.answerLocally(err, true)
	}
	if fail != nil && sp != nil && sp.prepare {
		// A PREPARE of a name in use: PostgreSQL analyzes the statement
		// before it finds the name taken, so the statement's own error
		// comes first. The server prepares it under the proxy-wide name
		// (kept, as for any client's), and answers that error.
		if err := c.ensurePrepared(c.server, []*sqlStmt{c.l.sqlStmts.get(sp.rest, sp.queryText)}); err != nil {
			if c.server.Broken {
				return c.serverFailed(err)
			}
			fail = err
		}
	}
	if fail != nil {
		// The error ends the transaction as the server's own would.
		return c.failQuery(fail)
	}
	if create != nil {
		if _, ok := c.server.Prepared[create.st.name]; ok {
			// This server has the statement from another client.
			c.sqlStmts[create.client] = create.st
			c.w.Write(wire.AppendCommandComplete(nil, "PREPARE"))
			c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), c.tx))
			return c.endRoundTrip()
		}
	}
	if err := c.prepareExecs(sp); err != nil {
		if c.server != nil && c.server.Broken {
			return c.serverFailed(err)
		}
		return c.failQuery(err)
	}
	// A simple Query drops the client's unnamed prepared statement
	// (PostgreSQL's exec_simple_query) and ends an extended-protocol batch
	// left open by a Flush. The server's unnamed statement is unknown
	// after it rather than gone: the server skips a Query that follows an
	// error in a batch (see relay), and then drops nothing; resolve closes
	// it for a client that has none.
	c.unnamed = c.unnamed[:0]
	c.server.Unnamed = append(c.server.Unnamed[:0], unknownUnnamed...)
	c.pipe.set(pipeUnsynced, false)
	c.out = append(c.out, raw...)
	c.q = append(c.queued(), req{kind: reqQuery, ops: ops, create: create})
	return c.roundTrip()
}

// failQuery answers a simple Query with e in the server's place: the
// server runs a statement that fails, so that an open transaction is
// aborted exactly as PostgreSQL's own error would abort it, and the relay
// sends e instead of the server's error.
func (c *client) failQuery(err error) error {
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	c.out = wire.AppendQuery(c.out, "DEALLOCATE "+unknownPrefix+"error")
	c.q = append(c.queued(), req{kind: reqQuery, replace: e})
	return c.roundTrip()
}

// functionCall handles the legacy FunctionCall message.
func (c *client) functionCall(ctx context.Context, raw []byte) error {
	if c.pipe.has(pipeDropping) {
		return nil
	}
	if err := c.attach(ctx); err != nil {
		if err == errBecameSharded {
			// The database became sharded while the call waited at the
			// gate: it goes on as a sharded session, whose function calls
			// run on shard 0.
			if err = c.becomeSharded(); err == nil {
				return c.functionCall(ctx, raw)
			}
		}
		return c.answerLocally(err, true)
	}
	c.pipe.set(pipeUnsynced, false) // as for a Query
	c.out = append(c.out, raw...)
	c.q = append(c.queued(), req{kind: reqQuery})
	return c.roundTrip()
}

// answerLocally sends an error the proxy produced itself. With ready, it
// also sends ReadyForQuery (simple protocol); otherwise the proxy drops the
// client's messages until Sync, as a server does after an error.
func (c *client) answerLocally(err error, ready bool) error {
	e, ok := wire.AsError(err)
	if !ok {
		e = wire.Errorf(wire.InternalError, "%v", err)
	}
	c.countError(e.Code)
	c.w.Write(wire.AppendError(nil, e))
	if e.Fatal() {
		c.w.Flush()
		return err
	}
	if ready {
		c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), c.tx))
	} else {
		c.pipe.set(pipeDropping, true)
	}
	return c.flushClient()
}

// extended handles Parse, Bind, Describe, Execute, Close, Flush and Sync.
func (c *client) extended(ctx context.Context, typ byte, raw, body []byte) error {
	if c.pipe.has(pipeDropping) && c.xs == nil { // a sharded batch skips itself (shardedExtended)
		if typ == 'S' {
			c.pipe.set(pipeDropping, false)
			c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), c.tx))
			return c.flushClient()
		}
		return nil
	}
	if err := c.becomeSharded(); err != nil {
		return c.answerLocally(err, false)
	}
	if typ == 'E' {
		c.queries.Add(1)
	}
	if typ == 'P' && c.xs == nil && len(c.q) == 0 && len(c.out) == 0 {
		// Answered here only when nothing of the batch is pending, so the
		// error is in its place; later in a pipeline the server fails the
		// Parse (no shardgate schema) in order. Sharded batches check in
		// sParse.
		if _, tail, ok := wire.CString(body); ok {
			if err := uniqueIDInParse(tail); err != nil {
				return c.answerLocally(err, false)
			}
		}
	}
	if c.xs != nil {
		return c.shardedExtended(ctx, typ, body)
	}
	if c.server == nil && c.mode == config.PoolTransaction && c.answerWithoutServer(typ, body) {
		if typ == 'S' || typ == 'H' {
			return c.flushClient()
		}
		return nil
	}
	c.chooseReadExt(typ, body)
	if err := c.attach(ctx); err == errBecameSharded {
		if err := c.becomeSharded(); err != nil {
			return c.answerLocally(err, false)
		}
		if c.xs == nil {
			// Another reload made the database one-shard again
			// meanwhile: the message goes through this path after all.
			if typ == 'E' {
				c.queries.Add(^uint64(0)) // counted again
			}
			return c.extended(ctx, typ, raw, body)
		}
		return c.shardedExtended(ctx, typ, body)
	} else if err != nil {
		return c.answerLocally(err, false)
	}
	c.noteSync(typ)
	if c.mode == config.PoolTransaction {
		if err := c.rewrite(typ, raw, body); err != nil {
			return c.answerLocally(err, false)
		}
	} else {
		if typ == 'P' && len(body) > 0 && body[0] == 0 {
			// The session's unnamed statement, for a cutover that moves
			// the session to another server (moveSession).
			c.unnamed = append(c.unnamed[:0], body...)
			c.unnamedQuiet = false
		}
		c.out = append(c.out, raw...)
		c.expect(typ)
	}
	if c.batchEnds(typ) {
		return c.roundTrip()
	}
	return c.extendedRun()
}

// extendedRun goes on with the extended-protocol messages that follow the
// one extended just forwarded, as far as they are in the client's read
// buffer whole, for a transaction-pooled one-shard client: each takes the
// path it would take through the loop and extended with a server
// attached (the same rewrite, the same queue, the same Sync or Flush),
// without the checks that the loop and extended make for every message
// and that hold for the rest of a batch as they held for its first:
//
//   - no kill (checked for each message, as the loop does) and no
//     shutdown (the loop ends only a client that holds nothing);
//   - no reload since the client's state (becomeSharded, the gate), no
//     sharded session, no errors being dropped until Sync;
//   - a server attached to a client that is not pinned: answerWithoutServer
//     does not apply, chooseReadExt chooses nothing, and attach returns
//     at once (enterGateHolding admits only session and pinned clients);
//   - no client write error, no server lost (the loop's checks after a
//     message).
//
// Any of them changing, a message of another kind (Query, FunctionCall,
// Terminate, COPY's) or one not all there yet ends the run, and the loop
// takes the next message as before. Drivers send a statement's Parse,
// Bind, Describe, Execute and Sync in one write (libpq, pgbench -M
// extended, pgx, JDBC), and pipelines more: the run handles all but the
// first, for about a third of the instructions of each (docs/benchmarks.md,
// issue 13, twentieth step).
func (c *client) extendedRun() error {
	if c.mode != config.PoolTransaction || c.server == nil || c.pinned || c.xs != nil ||
		c.clientErr != nil || c.lost != nil || c.pipe.has(pipeDropping) {
		return nil
	}
	// Nothing in the run changes those: rewrite only queues messages and
	// answers, an error it returns ends the run, and so does a round trip.
	for !c.killed.Load() && c.l.State() == c.st {
		switch typ, _ := c.r.PeekType(); typ {
		case 'P':
			if len(c.q) == 0 && len(c.out) == 0 {
				return nil // extended checks it for unique IDs first
			}
		case 'B', 'D', 'E', 'C', 'H', 'S':
		default:
			return nil
		}
		typ, raw, body, ok := c.r.NextBuffered()
		if !ok {
			return nil
		}
		c.resumed = false // as the loop does for a buffered message
		if typ == 'E' {
			c.queries.Add(1)
		}
		c.noteSync(typ)
		if err := c.rewrite(typ, raw, body); err != nil {
			return c.answerLocally(err, false)
		}
		if c.batchEnds(typ) {
			return c.roundTrip()
		}
	}
	return nil
}

// batchEnds reports whether the client's extended-protocol message typ,
// queued for the server, ends what goes out in one write: a Flush, or a
// Sync unless pipelined batches already in the client's buffer follow
// (batchOn).
func (c *client) batchEnds(typ byte) bool {
	return typ == 'H' || typ == 'S' && !c.batchOn()
}

// noteSync records whether the messages for the server end with a Sync
// (pipeUnsynced) after the client's extended-protocol message typ.
func (c *client) noteSync(typ byte) {
	switch typ {
	case 'S':
		c.pipe.set(pipeUnsynced, false)
	case 'H':
	default:
		c.pipe.set(pipeUnsynced, true)
	}
}

// batchOn reports whether the batch that a Sync just ended waits for the
// client's next one, buffered already, to go out in the same write. It
// does not when the next batch is not all there, the write is large
// already, or the ended batch creates or drops statement names (a named
// Parse or Close, a PREPARE): whether they exist, which the next batch's
// Parse, PREPARE or Bind of the same names needs to know
// (duplicateSQLName), is the server's answer, and after an error the
// server skips only up to that Sync.
func (c *client) batchOn() bool {
	if c.r.Buffered() == 0 || len(c.out) >= 64<<10 {
		return false
	}
	for i := range c.q {
		if c.q[i].client != "" && c.q[i].kind != reqBind || c.q[i].create != nil {
			return false // a named Parse or Close, a PREPARE
		}
	}
	return true
}

// expect records the answer the server owes for a client message.
func (c *client) expect(typ byte) {
	if c.pipe.has(pipeSkipping) && typ != 'S' {
		return // the server discards it
	}
	switch typ {
	case 'P':
		c.q = append(c.queued(), req{kind: reqParse})
	case 'B':
		c.q = append(c.queued(), req{kind: reqBind})
	case 'D':
		c.q = append(c.queued(), req{kind: reqDescribe})
	case 'E':
		c.q = append(c.queued(), req{kind: reqExecute})
	case 'C':
		c.q = append(c.queued(), req{kind: reqClose})
	case 'S':
		c.q = append(c.queued(), req{kind: reqSync})
		// The server skips after an error only up to this Sync: what
		// the client sends after it runs (and is answered) again.
		c.pipe.set(pipeSkipping, false)
	}
}

// queued returns c.q to append to: when it is empty, the client's own
// backing array, whose front the relay's pops (c.q = c.q[1:]) would
// otherwise leave behind, so that a round trip allocates no queue.
func (c *client) queued() []req {
	if len(c.q) == 0 {
		return c.qBuf[:0]
	}
	return c.q
}

// retryable reports whether err is a server that died before it answered
// anything of a statement that carries none of the client's session.
func retryable(err error) bool {
	var sg *serverGone
	return errors.As(err, &sg) && sg.retry
}

// roundTrip writes the batch to the server and relays the answers, then
// returns the server to the pool if the transaction is over.
func (c *client) roundTrip() error {
	start := c.mono()
	c.tripStart = start
	defer c.observeRoundTrip(start)
	s := c.server
	var werr chan error
	if len(c.out) > flushWriteThreshold {
		c.offLoop() // the writer goroutine writes the server beside the relay
		werr = make(chan error, 1)
		out, srv := c.out, s // srv: the closure must not capture s, or s escapes on every round trip
		go func() {
			_, err := srv.W.Write(out)
			if err == nil {
				err = srv.W.Flush()
			}
			werr <- err
		}()
	}
	c.answers = 0
	var err error
	if werr == nil {
		s.W.Write(c.out)
		if err = s.Flush(); err != nil {
			err = c.unsent(s, err)
		}
	}
	if err == nil {
		err = c.relay()
	}
	if werr != nil {
		if e := <-werr; e != nil && err == nil {
			s.Broken = true
			err = e
		}
	}
	if err != nil && retryable(err) {
		// The pooled server had died before it got or answered anything
		// of the batch: run it on another server (retry.go).
		var local error
		if err, local = c.retryElsewhere(err); local != nil {
			return c.answerLocally(local, true)
		}
	}
	c.out = c.out[:0]
	if cap(c.out) > 1<<20 {
		c.out = nil
	}
	if err != nil {
		return c.serverFailed(err)
	}
	return c.endRoundTrip()
}

// endRoundTrip flushes the client's answers and, when the transaction is
// over, settles the session and returns the server to the pool.
func (c *client) endRoundTrip() error {
	if err := c.flushClient(); err != nil {
		return err
	}
	if c.mode == config.PoolTransaction && c.tx == 'I' && len(c.q) == 0 && !c.pipe.has(pipeUnsynced) && !c.loggingIn {
		if err := c.settle(); err != nil {
			return c.sessionLost(err)
		}
		if !c.pinned {
			c.detach()
		} else {
			c.leaveGateIdle() // pinned: it keeps the server, as a session does
		}
		// A NOTIFY that arrived while the proxy settled the session.
		return c.flushClient()
	}
	c.leaveGateIdle()
	return nil
}

// sessionLost ends a client whose session state could not be settled
// after its transaction (the server failed the proxy's own statements):
// what the proxy knows of the session is no longer true.
func (c *client) sessionLost(err error) error {
	c.log.Warn("session state lost", "err", err)
	if c.server != nil {
		c.server.Broken = true
		c.pinned = false
		c.detach()
	}
	c.sendFatal(&wire.Error{Severity: "FATAL", Code: wire.ConnectionFailure,
		Message: "server connection lost", Detail: err.Error()})
	return err
}

func (c *client) flushClient() error {
	if c.clientErr != nil {
		return c.clientErr
	}
	if err := c.w.Flush(); err != nil {
		c.clientErr = err
		return err
	}
	return nil
}

// toClient writes b to the client unless the client is gone.
func (c *client) toClient(b []byte) {
	if c.clientErr != nil {
		return
	}
	if _, err := c.w.Write(b); err != nil {
		c.clientErr = err
	}
}

// serverFailed handles a broken server connection: the client gets an
// error; outside a transaction it stays connected, inside one it is closed
// (its transaction is gone).
func (c *client) serverFailed(err error) error {
	if c.clientErr != nil {
		return c.clientErr
	}
	var pe *protocolError
	if errors.As(err, &pe) {
		err = pe.err
	}
	var sg *serverGone
	forwarded := errors.As(err, &sg) && sg.forwarded
	s := c.server
	s.Broken = true
	c.log.Warn("server connection failed", "server", s.Addr, "err", err)
	// A pinned client's or a session-mode client's session objects are
	// gone with the server: like a lost transaction, that ends the client.
	inTx := c.sessionBound() || forwarded && sg.fatal
	c.q = c.q[:0]
	c.out = c.out[:0]
	c.batchOps = c.batchOps[:0]
	c.pipe.set(pipeSkipping, false)
	c.pipe.set(pipeUnsynced, false)
	c.pinned = false
	c.detach()
	if forwarded && inTx {
		// The client got the server's FATAL: like PostgreSQL, close.
		c.flushClient()
		return err
	}
	e := &wire.Error{Severity: "ERROR", Code: wire.ConnectionFailure,
		Message: "server connection lost", Detail: err.Error()}
	if inTx {
		e.Severity = "FATAL"
		e.Detail += "; the transaction was aborted"
		c.sendFatal(e)
		return err
	}
	if !forwarded {
		c.w.Write(wire.AppendError(nil, e))
	}
	c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), 'I'))
	c.tx = 'I'
	return c.flushClient()
}

// serverGone is a server that announced it is closing; forwarded says the
// client already got the server's error.
type serverGone struct {
	forwarded bool
	fatal     bool // forwarded as FATAL: the client's session ends with it
	retry     bool // the server answered nothing of a one-statement Query: run it elsewhere
	err       error
}

// setsName reports whether ops change setting name (or all settings).
func setsName(ops []setOp, name string) bool {
	for _, op := range ops {
		if op.kind != opHint && op.kind != opLocal && (op.name == strings.ToLower(name) || op.kind == opResetAll || op.kind == opDiscardAll) {
			return true
		}
	}
	return false
}

// sessionBound reports whether the client's session lives on its server
// beyond the current statement: inside a transaction, in session mode, or
// pinned by session objects.
func (c *client) sessionBound() bool {
	return c.tx != 'I' || c.pinned || c.mode == config.PoolSession
}

func (e *serverGone) Error() string { return e.err.Error() }

type protocolError struct{ err error }

func (e *protocolError) Error() string { return e.err.Error() }
