package frontend

import (
	"errors"
	"iter"
	"slices"
	"time"

	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Streaming row-limited Execute of a cross-shard read.
//
// A driver that fetches a result in chunks (JDBC with a fetch size, a
// cursor in node-postgres) sends Execute with a row limit and gets
// PortalSuspended after that many rows; the next Execute continues. For a
// read that runs on several shards the proxy pauses the merge itself: the
// shards' answers are merged as for any Execute (executor.Session.Gather),
// but the merge runs as a coroutine (iter.Pull) whose sink yields once it
// has sent the Execute's limit of rows. Between two Executes nothing runs:
// the shards' servers stop sending when their socket buffers fill, so the
// proxy holds one row per shard and the merge's 32 KiB of output, whatever
// the result's size. The coroutine runs only inside the client's own
// calls, so it shares the client's state without locks.
//
// A paused stream holds its shards' servers mid-answer. Before anything
// else the client sends is served (sharded_ext.go calls streamNext for each
// message), the stream settles — a cursor's merge over the shards' own
// cursors is parked instead (sharded_cursor.go) —: the rest of its rows are kept for the
// portal's later Executes, as the proxy did before it streamed
// (bufferedRows, up to maxChunkedResult), or dropped when the portal ends
// — at a Sync outside a transaction block, or when the portal is closed
// or bound anew. A client that leaves with a paused stream closes its
// servers (dropStream). Writes and statements whose rows PostgreSQL
// itself materialises first (DML with RETURNING) keep the buffered path.

// streamMode says what a stream does with the rows the merge produces.
type streamMode uint8

const (
	streamLive streamMode = iota // to the client, up to the Execute's limit
	streamKeep                   // kept for the portal's next Executes
	streamDrop                   // read and dropped
)

func (m streamMode) String() string {
	switch m {
	case streamLive:
		return "live"
	case streamKeep:
		return "keep"
	case streamDrop:
		return "drop"
	}
	return "streamMode(" + string(rune('0'+m)) + ")"
}

// portalStream is a cross-shard read whose merge pauses between the
// Executes of a client that fetches it in chunks.
type portalStream struct {
	c      *client
	p      *sPortal     // the portal fetched in chunks; nil for a cursor's
	cur    *proxyCursor // the cursor whose rows it reads (sharded_cursor.go)
	want   int          // a cursor's stream pauses once the cursor has this many rows
	name   string       // the client's portal
	shards []int
	mode   streamMode
	limit  int          // rows the current Execute returns (0: all)
	sent   int          // rows it has returned
	kept   *rowRecorder // streamKeep: the rows for the portal's next Executes
	yield  func(struct{}) bool
	next   func() (struct{}, bool)
	stop   func()
	tag    string // the merge's outcome, once it has ended
	err    error
}

// aLongTimeAgo is a deadline in the past: reads fail at once.
var aLongTimeAgo = time.Unix(1, 0)

// errStreamStopped ends a merge whose client is gone.
var errStreamStopped = errors.New("stream stopped")

// Write is the merge's sink: DataRows go where the mode says; the others
// (RowDescription, notices) to the client.
func (st *portalStream) Write(msgs []byte) (int, error) {
	for m := range messages(msgs) {
		switch {
		case st.mode == streamKeep:
			st.kept.record(m)
		case m[0] != 'D':
			st.c.toClient(m)
		case st.mode == streamLive:
			st.c.toClient(m)
			st.sent++
			if st.limit > 0 && st.sent == st.limit && !st.yield(struct{}{}) {
				return len(msgs), errStreamStopped
			}
		}
	}
	return len(msgs), nil
}

// execManyStreamed runs read portal p (the client's portal name) on
// several shards for an Execute with a row limit and answers its first
// chunk.
func (c *client) execManyStreamed(p *sPortal, name []byte, maxRows int32, describe bool) error {
	st := &portalStream{c: c, p: p, name: string(name), shards: slices.Clone(p.plan.Shards), limit: int(maxRows)}
	g, err := c.startMany(p, describe, st)
	if err != nil {
		return err
	}
	c.applyManyOps(p.plan)
	st.next, st.stop = iter.Pull(func(yield func(struct{}) bool) {
		st.yield = yield
		st.tag, st.err = g.gather()
	})
	p.stream = st
	c.stream = st
	return c.runStream(st)
}

// resumeStream answers an Execute of a suspended streamed portal.
func (c *client) resumeStream(st *portalStream, maxRows int32) error {
	st.limit, st.sent = int(maxRows), 0
	return c.runStream(st)
}

// runStream runs the merge to the Execute's limit (PortalSuspended) or to
// its end (CommandComplete counting this Execute's rows, or the error).
func (c *client) runStream(st *portalStream) error {
	p := st.p
	if _, paused := st.next(); paused {
		p.suspended = true
		c.toClient(portalSuspended)
		return nil
	}
	st.stop()
	c.stream, p.stream, p.suspended = nil, nil, false
	tag, err := c.gatherMany(st.tag, st.err)
	if err != nil {
		return err
	}
	c.w.Write(wire.AppendCommandComplete(nil, withCount(tag, st.sent)))
	return nil
}

var portalSuspended = []byte{'s', 0, 0, 0, 4}

// streamNext settles a paused stream before the client's next message
// (typ, body) is served, unless the message fetches from it or leaves it
// alone: an Execute of its portal, a Flush, or a Sync inside a healthy
// transaction block (the portal outlives it).
func (c *client) streamNext(typ byte, body []byte) {
	st := c.stream
	if st.cur != nil {
		c.cursorStreamNext(typ, body)
		return
	}
	switch typ {
	case 'E':
		if name, _, err := executeMsg(body); err == nil && string(name) == st.name {
			return
		}
	case 'H':
		return
	case 'S':
		if c.xs.InTx() && !c.xs.Implicit() && !c.xs.Failed() {
			return
		}
		c.settleStream(streamDrop) // the portal ends with the batch
		return
	case 'B':
		if d := wire.NewBody(body); string(d.CString()) == st.name && d.Err() == nil {
			c.settleStream(streamDrop) // bound anew
			return
		}
	case 'C':
		if kind, name, err := describeMsg('C', body); err == nil && kind == 'P' && string(name) == st.name {
			c.settleStream(streamDrop)
			return
		}
	}
	c.settleStream(streamKeep)
}

// settleStream runs a paused stream to its end, keeping its rows for the
// portal's next Executes (streamKeep) or dropping them with the portal
// (streamDrop), so that its servers are free for the client's next
// statement.
func (c *client) settleStream(mode streamMode) {
	st := c.stream
	if st == nil {
		return
	}
	if st.cur != nil {
		if mode == streamKeep && st.cur.shard != nil {
			c.parkCursorStream(st)
			return
		}
		c.settleCursorStream(st, mode)
		return
	}
	c.stream, st.p.stream = nil, nil
	st.mode = mode
	if mode == streamKeep {
		st.kept = &rowRecorder{c: c, b: &bufferedRows{}}
	}
	st.next() // only a live stream pauses: this runs it to its end
	st.stop()
	if mode == streamDrop {
		st.p.suspended = false
		return
	}
	kept := st.kept.b
	kept.tag, kept.err = c.gatherMany(st.tag, st.err)
	if st.kept.over && kept.err == nil {
		kept.err = errChunkedTooLarge()
	}
	st.p.chunks = kept
}

// settleCursorStream runs the paused merge of a cursor to its end,
// keeping its rows in the cursor (streamKeep) or dropping them
// (streamDrop: the shards' cursors close at the end of their batch).
func (c *client) settleCursorStream(st *portalStream, mode streamMode) {
	c.stream = nil
	st.mode = mode
	if mode == streamDrop && st.cur.shard != nil {
		st.cur.shard.Stop = true // the shards' cursors fetch no more
	}
	st.next() // only a live stream pauses: this runs it to its end
	c.endCursorStream(st)
}

// dropStream ends a paused stream of a client that is leaving: its servers
// are closed rather than read to the end of a result nobody wants.
func (c *client) dropStream() {
	st := c.stream
	if st == nil {
		return
	}
	c.stream = nil
	if st.p != nil {
		st.p.stream = nil
	}
	for _, i := range st.shards {
		if s := c.xs.Server(i); s != nil {
			s.Broken = true
			s.Conn.SetReadDeadline(aLongTimeAgo)
		}
	}
	st.mode = streamDrop
	st.stop()
}

// dropParked stops the parked merges of a client that is leaving (their
// servers are idle in the transaction that the client's end rolls back).
func (c *client) dropParked() {
	for _, cur := range c.cursors {
		if cur.src != nil {
			c.stopParked(cur)
		}
	}
}

// usesShard reports whether a paused stream reads shard i.
func (st *portalStream) usesShard(i int) bool { return slices.Contains(st.shards, i) }

// ColumnOrders implements executor.OrderSource, as clientSink does: a
// streamed merge orders text and enums as the shards do.
func (st *portalStream) ColumnOrders(p *executor.Plan, cols []executor.Column, need []int) ([]executor.ColumnOrder, error) {
	return st.c.columnOrders(p, cols, need)
}
