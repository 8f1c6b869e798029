package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

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
	injected bool  // the proxy added the message: swallow its answer
	confirm  *stmt // reqParse: proxy-wide statement to mark prepared on success
	ops      []setOp
	// A reqParse that the server rejects or skips after an error did not
	// create its statement: client names the client's statement to
	// forget, unnamed says the server's unnamed statement is unknown.
	client  string
	unnamed bool
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
	if c.localSkip {
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
	if c.shards != nil {
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
	c.chooseRead(string(sql))
	if err := c.attach(ctx); err != nil {
		return c.answerLocally(err, true)
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
			c.w.Write(wire.AppendReadyForQuery(nil, c.tx))
			return c.endRoundTrip()
		}
	}
	if err := c.prepareExecs(sp); err != nil {
		if c.server != nil && c.server.Broken {
			return c.serverFailed(err)
		}
		return c.failQuery(err)
	}
	// A simple Query drops the unnamed prepared statement, the client's
	// included (PostgreSQL's exec_simple_query), and ends an
	// extended-protocol batch left open by a Flush (unless the server
	// skips it after an error: see relay).
	c.unnamed = c.unnamed[:0]
	c.server.Unnamed = c.server.Unnamed[:0]
	c.unsynced = false
	c.out = append(c.out, raw...)
	c.q = append(c.q, req{kind: reqQuery, ops: ops, create: create})
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
	c.q = append(c.q, req{kind: reqQuery, replace: e})
	return c.roundTrip()
}

// functionCall handles the legacy FunctionCall message.
func (c *client) functionCall(ctx context.Context, raw []byte) error {
	if c.localSkip {
		return nil
	}
	if err := c.attach(ctx); err != nil {
		return c.answerLocally(err, true)
	}
	c.unsynced = false // as for a Query
	c.out = append(c.out, raw...)
	c.q = append(c.q, req{kind: reqQuery})
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
		c.w.Write(wire.AppendReadyForQuery(nil, c.tx))
	} else {
		c.localSkip = true
	}
	return c.flushClient()
}

// extended handles Parse, Bind, Describe, Execute, Close, Flush and Sync.
func (c *client) extended(ctx context.Context, typ byte, raw, body []byte) error {
	if c.localSkip && c.shards == nil { // a sharded batch skips itself (shardedExtended)
		if typ == 'S' {
			c.localSkip = false
			c.w.Write(wire.AppendReadyForQuery(nil, c.tx))
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
	if typ == 'P' && c.shards == nil && len(c.q) == 0 && len(c.out) == 0 {
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
	if c.shards != nil {
		return c.shardedExtended(ctx, typ, body)
	}
	if c.server == nil && c.mode == config.PoolTransaction && c.answerWithoutServer(typ, body) {
		if typ == 'S' || typ == 'H' {
			return c.flushClient()
		}
		return nil
	}
	c.chooseReadExt(typ, body)
	if err := c.attach(ctx); err != nil {
		return c.answerLocally(err, false)
	}
	switch typ {
	case 'S':
		c.unsynced = false
	case 'H':
	default:
		c.unsynced = true
	}
	if c.mode == config.PoolTransaction {
		if err := c.rewrite(typ, raw, body); err != nil {
			return c.answerLocally(err, false)
		}
	} else {
		c.out = append(c.out, raw...)
		c.expect(typ)
	}
	switch typ {
	case 'S':
		// Pipelined batches already in the buffer go out in the same write.
		if c.r.Buffered() > 0 && len(c.out) < 64<<10 {
			return nil
		}
		return c.roundTrip()
	case 'H':
		return c.roundTrip()
	}
	return nil
}

// expect records the answer the server owes for a client message.
func (c *client) expect(typ byte) {
	if c.skipping && typ != 'S' {
		return // the server discards it
	}
	switch typ {
	case 'P':
		c.q = append(c.q, req{kind: reqParse})
	case 'B':
		c.q = append(c.q, req{kind: reqBind})
	case 'D':
		c.q = append(c.q, req{kind: reqDescribe})
	case 'E':
		c.q = append(c.q, req{kind: reqExecute})
	case 'C':
		c.q = append(c.q, req{kind: reqClose})
	case 'S':
		c.q = append(c.q, req{kind: reqSync})
		// The server skips after an error only up to this Sync: what
		// the client sends after it runs (and is answered) again.
		c.skipping = false
	}
}

// roundTrip writes the batch to the server and relays the answers, then
// returns the server to the pool if the transaction is over.
func (c *client) roundTrip() error {
	defer c.observeRoundTrip(time.Now())
	s := c.server
	var werr chan error
	if len(c.out) > flushWriteThreshold {
		werr = make(chan error, 1)
		out := c.out
		go func() {
			_, err := s.W.Write(out)
			if err == nil {
				err = s.W.Flush()
			}
			werr <- err
		}()
	} else {
		s.W.Write(c.out)
		if err := s.Flush(); err != nil {
			return c.serverFailed(err)
		}
	}
	c.answers = 0
	err := c.relay()
	if werr != nil {
		if e := <-werr; e != nil && err == nil {
			s.Broken = true
			err = e
		}
	}
	var sg *serverGone
	if errors.As(err, &sg) && sg.retry {
		// The pooled server had died before it answered anything of a
		// statement that carries no session of the client's: nothing of
		// it ran (its implicit transaction died with the server), so it
		// runs again on another server, as if the pool had noticed first.
		c.log.Info("server died before answering; running the statement on another server", "err", err)
		c.detach()
		if aerr := c.attach(context.Background()); aerr != nil {
			c.out = c.out[:0]
			return c.answerLocally(aerr, true)
		}
		s = c.server
		s.W.Write(c.out)
		if err = s.Flush(); err == nil {
			c.answers = 0
			err = c.relay()
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
	if c.mode == config.PoolTransaction && c.tx == 'I' && len(c.q) == 0 && !c.unsynced && !c.loggingIn {
		if err := c.settle(); err != nil {
			return c.sessionLost(err)
		}
		if !c.pinned {
			c.detach()
		}
	}
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
	inTx := c.sessionBound()
	c.q = c.q[:0]
	c.out = c.out[:0]
	c.batchOps = c.batchOps[:0]
	c.skipping = false
	c.unsynced = false
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
	c.w.Write(wire.AppendReadyForQuery(nil, 'I'))
	c.tx = 'I'
	return c.flushClient()
}

// serverGone is a server that announced it is closing; forwarded says the
// client already got the server's error.
type serverGone struct {
	forwarded bool
	retry     bool // the server answered nothing of a one-statement Query: run it elsewhere
	err       error
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

// relay reads the server's answers and forwards them to the client until
// every expected answer arrived.
func (c *client) relay() error {
	s := c.server
	for len(c.q) > 0 {
		if c.inCopy {
			if err := c.copyIn(); err != nil {
				return err
			}
		}
		if s.R.Buffered() == 0 && c.w.Buffered() > 0 && c.clientErr == nil {
			// About to block on the server: let the client see what it
			// has so far (streaming results, notices).
			if err := c.w.Flush(); err != nil {
				c.clientErr = err
			}
		}
		typ, n, err := s.R.PeekHeader()
		if err != nil {
			return err
		}
		if n > s.R.Size()-5 && typ != 'E' {
			// A large row or COPY chunk: stream it through. An
			// ErrorResponse is read whole (its fields decide what
			// happens next), however large.
			if c.q[0].kind == reqInternal || c.clientErr != nil {
				err = s.R.Copy(io.Discard, n)
			} else {
				err = s.R.Copy(c.w, n)
			}
			if err != nil {
				return err
			}
			if typ == 'Z' || typ == 'G' {
				return &protocolError{fmt.Errorf("oversized %q message from server", typ)}
			}
			continue
		}
		typ, raw, body, err := s.R.Next()
		if err != nil {
			return err
		}
		c.answers++
		head := &c.q[0]
		internal := head.kind == reqInternal
		whole := head.kind == reqQuery || internal
		switch typ {
		case 'Z':
			if len(body) != 1 {
				return &protocolError{errors.New("malformed ReadyForQuery from server")}
			}
			// Pop through the Sync or Query this answers.
			for len(c.q) > 0 {
				k := c.q[0].kind
				ops := c.q[0].ops
				c.q = c.q[1:]
				if k == reqSync || k == reqQuery || k == reqInternal {
					// Ops of Executes answered before this Sync.
					ops = append(ops, c.batchOps...)
					c.batchOps = c.batchOps[:0]
				}
				if len(ops) > 0 {
					if c.txErr {
						// Part of the batch may have run (a multi-statement
						// Query with COMMIT inside): ask the server.
						c.sess.resync = true
					} else {
						for _, op := range ops {
							op.server = s
							c.sess.pending = append(c.sess.pending, op)
						}
					}
				}
				if k == reqSync || k == reqQuery || k == reqInternal {
					break
				}
			}
			c.skipping = false
			c.onReady(body[0], internal)
			if !internal {
				c.tx = body[0]
				c.toClient(raw)
			}
			c.txErr = false
			c.lastTag = c.lastTag[:0]
		case 'E':
			c.txErr = true
			c.inCopy = false // an error ends COPY FROM STDIN
			e := wire.ParseError(body)
			s.NoteError(e)
			if e.Fatal() {
				// The server is closing this connection (shutdown,
				// pg_terminate_backend, idle timeout...). When it carried
				// the client's session (a transaction, session mode, a
				// pinned session) that session is gone: the client hears
				// the FATAL exactly as from PostgreSQL and is closed too.
				// A transaction-mode client between transactions only
				// lost a pooled server: it gets the message as an ERROR
				// and carries on with another server.
				s.Broken = true
				bound := c.sessionBound()
				if !internal && !bound && c.answers == 1 && len(c.q) == 1 && head.kind == reqQuery {
					return &serverGone{retry: true, err: fmt.Errorf("server closed the connection: %s (SQLSTATE %s)", e.Message, e.Code)}
				}
				if !internal {
					if !bound {
						e.Severity = "ERROR"
						raw = wire.AppendError(nil, e)
					}
					c.toClient(raw)
				}
				return &serverGone{forwarded: !internal, err: fmt.Errorf("server closed the connection: %s (SQLSTATE %s)", e.Message, e.Code)}
			}
			if !internal {
				c.countError(e.Code)
			}
			if head.replace != nil {
				e = head.replace
				raw = wire.AppendError(nil, e)
			}
			if internal {
				// The proxy's own statements must not fail: whatever
				// they were to undo or restore is unknown now.
				s.Broken = true
				c.log.Warn("internal query failed on server", "server", s.Addr, "err", e.Error())
			} else {
				c.toClient(raw)
			}
			if !whole {
				// The server skips everything up to the next Sync.
				i := 0
				for i < len(c.q) && c.q[i].kind != reqSync {
					c.notParsed(&c.q[i])
					i++
				}
				if i == len(c.q) && c.shards == nil {
					// No Sync sent yet: the server skips until the
					// client sends one (a Query it ignores, too).
					c.unsynced = true
				}
				c.q = c.q[i:]
				c.skipping = true
			}
		case '1': // ParseComplete
			if !whole {
				if head.confirm != nil {
					s.Prepared[head.confirm.name] = struct{}{}
					head.confirm.valid.Store(true)
				}
				if !head.injected {
					c.toClient(raw)
				}
				c.q = c.q[1:]
			} else if !internal {
				c.toClient(raw)
			}
		case '3': // CloseComplete
			if !whole {
				if !head.injected {
					c.toClient(raw)
				}
				c.q = c.q[1:]
			} else if !internal {
				c.toClient(raw)
			}
		case '2', 'T', 'n', 'C', 'I', 's':
			if !internal && !(head.injected && !whole) {
				c.toClient(raw)
			}
			if typ == 'C' {
				c.lastTag = append(c.lastTag[:0], body...)
				if cr := head.create; cr != nil {
					s.Prepared[cr.st.name] = struct{}{}
					if cr.client != "" {
						c.sqlStmts[cr.client] = cr.st
					}
				}
				for _, op := range head.ops {
					if op.kind == opDeallocate {
						// DEALLOCATE of a proxy-wide name (rewritten,
						// see rewriteSQLText): the server lost it.
						delete(s.Prepared, op.name)
						c.deallocated(op.name)
					}
				}
				if bytes.Equal(body, tagRollback) && (len(c.sess.pending) > 0 || head.ops != nil) {
					// ROLLBACK TO SAVEPOINT undoes part of the
					// transaction's SETs: ask the server which.
					c.sess.resync = true
				}
				if !internal && (bytes.Equal(body, tagDeallocateAll) || bytes.Equal(body, tagDiscardAll)) {
					c.dropStatements()
				}
			}
			if !whole {
				if typ == 'C' && head.ops != nil {
					// The statement ran; it counts when its batch's
					// Sync shows how its implicit transaction ended.
					c.batchOps = append(c.batchOps, head.ops...)
				}
				c.q = c.q[1:]
			}
		case 'G': // CopyInResponse
			if internal {
				return &protocolError{errors.New("unexpected COPY in an internal query")}
			}
			c.toClient(raw)
			c.inCopy = true // the loop's next turn relays the data
		case 'W':
			return &protocolError{errors.New("COPY BOTH (replication) is not supported through the proxy")}
		case 'S':
			name, rest, _ := wire.CString(body)
			val, _, _ := wire.CString(rest)
			s.Params[string(name)] = string(val)
			if string(name) == "application_name" && !internal {
				c.infoMu.Lock()
				c.appName = string(val)
				c.infoMu.Unlock()
			}
			if !internal {
				c.toClient(raw)
			}
		default:
			// DataRow, CopyOutResponse, CopyData, CopyDone, NoticeResponse,
			// NotificationResponse, ParameterDescription,
			// FunctionCallResponse, EmptyQueryResponse...
			if typ == 'I' && !whole {
				c.q = c.q[1:]
			}
			if !internal {
				c.toClient(raw)
			}
		}
	}
	return nil
}

// copyIn relays the client's COPY data to the server until CopyDone or
// CopyFail (c.inCopy is then false), or until the server says something
// first: an error that ends the COPY, or a notice. The server is watched
// while the client streams, so that its error reaches the client at once,
// as from PostgreSQL, not after the client finished sending; the relay
// calls copyIn again after a notice. Data goes to the server whenever the
// client has nothing more buffered.
func (c *client) copyIn() error {
	if err := c.flushClient(); err != nil {
		c.inCopy = false
		return c.failCopy("client connection lost")
	}
	s := c.server
	var mu sync.Mutex // guards copying and the client's read deadline
	copying := true
	var spoke atomic.Bool
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		s.R.PeekHeader() // an error surfaces again in the relay
		spoke.Store(true)
		mu.Lock()
		if copying {
			c.conn.SetReadDeadline(time.Now())
		}
		mu.Unlock()
	}()
	stop := func() {
		mu.Lock()
		copying = false
		c.conn.SetReadDeadline(time.Time{})
		mu.Unlock()
		if c.inCopy || s.Broken {
			// Ends the watcher if the server stays silent.
			s.Conn.SetReadDeadline(time.Now())
		}
		<-watched
		s.Conn.SetReadDeadline(time.Time{})
	}
	defer stop()
	for {
		if c.r.Buffered() == 0 {
			if err := s.Flush(); err != nil {
				c.inCopy = false
				return err
			}
		}
		typ, raw, _, err := c.r.Next()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if spoke.Load() {
					return nil // the relay reads what the server said
				}
				c.conn.SetReadDeadline(time.Time{}) // a shutdown nudge
				continue
			}
			c.clientErr = err
			c.inCopy = false
			return c.failCopy("client connection lost during COPY")
		}
		if _, err := s.W.Write(raw); err != nil {
			s.Broken = true
			c.inCopy = false
			return err
		}
		switch typ {
		case 'd', 'H', 'S':
		default:
			// CopyDone, CopyFail, or a message that makes the server
			// abort the COPY.
			c.inCopy = false
			return s.Flush()
		}
	}
}

// failCopy aborts a COPY FROM STDIN whose client went away.
func (c *client) failCopy(reason string) error {
	s := c.server
	msg := []byte{'f', 0, 0, 0, 0}
	msg = append(msg, reason...)
	msg = append(msg, 0)
	s.W.Write(wire.FinishMessage(msg, 0))
	return s.Flush()
}

// notParsed undoes the bookkeeping of a Parse that the server rejected or
// skipped.
func (c *client) notParsed(r *req) {
	if r.kind != reqParse {
		return
	}
	if r.unnamed {
		c.server.Unnamed = c.server.Unnamed[:0]
	}
	if r.client != "" {
		delete(c.stmts, r.client)
	}
}

var (
	tagRollback      = []byte("ROLLBACK\x00")
	tagDeallocateAll = []byte("DEALLOCATE ALL\x00")
	tagDiscardAll    = []byte("DISCARD ALL\x00")
)

// dropStatements forgets the prepared statements of the client and of its
// server after DEALLOCATE ALL or DISCARD ALL. Prepared statements are not
// transactional: they are gone even if the transaction rolls back, so this
// happens when the command completes, not at commit.
func (c *client) dropStatements() {
	s := c.server
	clear(s.Prepared)
	s.Unnamed = s.Unnamed[:0]
	clear(c.stmts)
	clear(c.sqlStmts)
	c.unnamed = c.unnamed[:0]
	for name := range c.sstmts {
		if name != "" { // a sharded client's; the unnamed statement stays
			delete(c.sstmts, name)
		}
	}
}

// onReady updates tracked session state at a transaction boundary.
func (c *client) onReady(status byte, internal bool) {
	if internal || c.server == nil {
		return
	}
	if status != 'I' {
		return
	}
	if len(c.sess.pending) == 0 {
		return
	}
	rolledBack := c.txErr || bytes.Equal(c.lastTag, tagRollback)
	if !rolledBack {
		c.applyOps(c.sess.pending)
	}
	c.sess.pending = c.sess.pending[:0]
}
