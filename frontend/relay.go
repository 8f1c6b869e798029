package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// relay reads the server's answers and forwards them to the client until
// every expected answer arrived.
func (c *client) relay() error {
	s := c.server
	for len(c.q) > 0 {
		if c.inCopy {
			c.offLoop() // copyIn's watcher reads the server beside it
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
		// As a rule the message is buffered whole already (the server's
		// answers arrive a round trip's worth at a time).
		typ, raw, body, ok := s.R.NextBuffered()
		if !ok {
			ht, n, err := s.R.PeekHeader()
			if err != nil {
				return err
			}
			if n > s.R.Size()-5 && ht != 'E' {
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
				if ht == 'Z' || ht == 'G' {
					return &protocolError{fmt.Errorf("oversized %q message from server", ht)}
				}
				continue
			}
			if typ, raw, body, err = s.R.Next(); err != nil {
				return err
			}
		}
		c.answers++
		if err := c.relayMessage(s, typ, raw, body); err != nil {
			return err
		}
	}
	return nil
}

// relayMessage handles one message of the server's answer: it goes to the
// client unless the proxy sent what it answers, and it advances c.q.
func (c *client) relayMessage(s *pool.Server, typ byte, raw, body []byte) error {
	head := &c.q[0]
	internal := head.kind == reqInternal
	whole := head.kind == reqQuery || internal
	switch typ {
	case 'Z':
		return c.relayReady(s, raw, body, internal)
	case 'E':
		return c.relayError(s, raw, body, head, internal, whole)
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
			if head.confirm != nil {
				delete(s.Prepared, head.confirm.name)
			}
			if !head.injected {
				c.toClient(raw)
			}
			c.q = c.q[1:]
		} else if !internal {
			c.toClient(raw)
		}
	case '2', 'T', 'n', 'C', 'I', 's':
		c.relayResult(s, typ, raw, body, head, internal, whole)
	case 'G': // CopyInResponse
		if internal {
			return &protocolError{errors.New("unexpected COPY in an internal query")}
		}
		c.toClient(raw)
		c.inCopy = true // the loop's next turn relays the data
	case 'W':
		return &protocolError{errors.New("COPY BOTH (replication) is not supported through the proxy")}
	case 'S':
		name, val := s.NoteParameter(body)
		if name == "application_name" && !internal {
			c.infoMu.Lock()
			c.appName = val
			c.infoMu.Unlock()
		}
		if !internal && c.mode == config.PoolTransaction && !setsName(head.ops, name) {
			// A reported setting changed without a SET the proxy
			// parsed (a function, DO): ask the server at the end
			// of the transaction what the session carries now.
			c.sess.resync = true
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
		if typ == 'N' && head.kind == reqParse {
			// A notice of a Parse (prepared.go: stmt.noisy): the
			// client's, or one the proxy made, which the client did
			// not send and PostgreSQL would not have raised.
			if head.confirm != nil {
				head.confirm.noisy.Store(true)
			}
			if head.injected {
				return nil
			}
		}
		if !internal {
			c.toClient(raw)
			if typ == 'D' || typ == 'd' {
				// The rows (or COPY data) buffered behind it go the same
				// way: in one copy, not one pass through here each
				// (docs/benchmarks.md, issue 13, eighteenth step).
				if more, n := s.R.NextRun(typ); n > 0 {
					c.answers += n
					c.toClient(more)
				}
			}
		}
	}
	return nil
}

// relayReady handles ReadyForQuery: it pops the Sync or Query it answers
// (and what the server skipped before it), keeps the session ops of the
// statements that ran, and ends the round trip's pipeline state.
func (c *client) relayReady(s *pool.Server, raw, body []byte, internal bool) error {
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
			if c.pipe.has(pipeErrored) {
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
	c.pipe.set(pipeSkipping, false)
	c.onReady(body[0], internal)
	if !internal {
		c.tx = body[0]
		if !c.multi { // a part of a multi-statement Query (runParts)
			c.toClient(raw)
		}
	}
	c.pipe.set(pipeErrored, false)
	c.lastTag = c.lastTag[:0]
	return nil
}

// relayError handles an ErrorResponse: a FATAL ends the server (and the
// client's session when the server carried it); an ERROR reaches the
// client, and inside an extended-protocol batch the server skips to Sync.
func (c *client) relayError(s *pool.Server, raw, body []byte, head *req, internal, whole bool) error {
	c.pipe.set(pipeErrored, true)
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
		// The FATAL ends the client's session too when the server
		// carried it, or when the client's statement was running
		// (the server answered something first: the client's own
		// statement may have caused it, pg_terminate_backend of
		// its own backend say).
		bound := c.sessionBound() || c.answers > 1
		if c.answers == 1 && diedIdle(e, c.tripStart) &&
			(c.xs == nil && !internal && !bound && c.batchRetryable(s) || c.xs != nil && c.freshShard) {
			// A sharded statement's server that carried nothing of the
			// client's (roundTripShard, retryShard).
			return &serverGone{retry: true, err: serverClosed(e)}
		}
		if !internal {
			if !bound {
				e.Severity = "ERROR"
				raw = wire.AppendError(nil, e)
			}
			c.toClient(raw)
		}
		return &serverGone{forwarded: !internal, fatal: bound, err: serverClosed(e)}
	}
	if !internal {
		c.countError(e.Code)
	}
	if head.replace != nil {
		e = head.replace
		raw = wire.AppendError(nil, e)
	} else if head.kind == reqBind && head.confirm != nil && e.Code == wire.ProtocolViolation {
		// "bind message supplies 1 parameters, but prepared statement
		// "sg_4" requires 0": the client's name, as PostgreSQL says it
		// (rewriteBind).
		e.Message = strings.Replace(e.Message, `"`+head.confirm.name+`"`, `"`+head.client+`"`, 1)
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
			i++
		}
		// Undone last first: a skipped Close puts back the statement a
		// skipped Parse before it made, which that Parse's undo drops.
		for j := i - 1; j >= 0; j-- {
			c.notParsed(&c.q[j], j == 0)
		}
		if i == len(c.q) && c.xs == nil {
			// No Sync sent yet: the server skips until the
			// client sends one (a Query it ignores, too).
			c.pipe.set(pipeUnsynced, true)
		}
		c.q = c.q[i:]
		c.pipe.set(pipeSkipping, true)
	}
	return nil
}

// relayResult handles the messages that answer one request —
// BindComplete, RowDescription, NoData, CommandComplete,
// EmptyQueryResponse, PortalSuspended — and what a completed statement
// did to the session.
func (c *client) relayResult(s *pool.Server, typ byte, raw, body []byte, head *req, internal, whole bool) {
	if !internal && !(head.injected && !whole) {
		c.toClient(raw)
	}
	if typ == 'C' {
		c.lastTag = append(c.lastTag[:0], body...)
		if !internal && isSchemaChange(body) {
			c.l.ddlGen.Add(1)
		}
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
		// The CopyData messages buffered whole go to the server in one
		// copy (a client sends one a row, as a rule); the rest, and a
		// message not buffered whole yet, through Next.
		typ := byte('d')
		var err error
		raw, _ := c.r.NextRun('d')
		if len(raw) == 0 {
			typ, raw, _, err = c.r.Next()
		}
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

// notParsed undoes the bookkeeping of a Parse (or a Close) that the
// server rejected (rejected) or skipped, or that was never sent.
//
// PostgreSQL drops the unnamed statement before it parses a new one: a
// Parse of it that fails leaves none, one skipped or not sent leaves the
// one before, which the proxy may not know (unknownUnnamed). The client's
// unnamed statement is gone when that Parse was its last; where
// PostgreSQL would still have the one before a skipped Parse, the proxy
// has forgotten it, and the client's Bind of it fails with 26000 rather
// than run a statement the proxy may not have.
//
// A Close of a statement that the server skipped or that was never sent
// closed nothing: the client's named statement is put back, and the
// server's unnamed one is unknown.
func (c *client) notParsed(r *req, rejected bool) {
	if r.kind == reqClose {
		if rejected {
			return
		}
		if r.unnamed { // the client's Close, or resolve's
			c.server.Unnamed = append(c.server.Unnamed[:0], unknownUnnamed...)
		} else if name, proxyName, ok := strings.Cut(r.client, "\x00"); ok {
			if st := c.l.stmts.byName(proxyName); st != nil {
				c.stmts[name] = st
			}
		}
		return
	}
	if r.kind != reqParse {
		return
	}
	if r.unnamed {
		if rejected {
			c.server.Unnamed = c.server.Unnamed[:0]
		} else {
			c.server.Unnamed = append(c.server.Unnamed[:0], unknownUnnamed...)
		}
		if r.gen != 0 && r.gen == c.unnamedGen {
			c.forgetUnnamed()
		}
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
	s.Unnamed = append(s.Unnamed[:0], unknownUnnamed...) // neither drops the unnamed statement
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
	rolledBack := c.pipe.has(pipeErrored) || bytes.Equal(c.lastTag, tagRollback)
	if !rolledBack {
		c.applyOps(c.sess.pending)
	}
	c.sess.pending = c.sess.pending[:0]
}
