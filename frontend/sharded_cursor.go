package frontend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/wire"
)

// Cursors over several shards.
//
// DECLARE of a query that one shard answers goes to that shard, and its
// FETCHes follow it there, as any statement does. A query that needs
// several shards has no server to live on: the proxy starts it at DECLARE,
// merged as for the client (executor.Session.Execute), and answers FETCH,
// MOVE and CLOSE of the cursor itself, with PostgreSQL's positions,
// command tags and errors. The merge runs as a coroutine, as a portal
// fetched in chunks does (sharded_stream.go): it pauses once the cursor
// holds the rows a FETCH asked for, so that a cursor is read as it is
// fetched, whatever its size — this is how psycopg2's named cursors and
// Django's QuerySet.iterator() read large results. Behind its position a
// cursor keeps the rows it may move back to: all of them when declared
// SCROLL (up to maxChunkedResult, then 54000), the last cursorWindow bytes
// when declared with neither SCROLL nor NO SCROLL (a backward move past
// them answers PostgreSQL's 55000 for a plan that cannot scan backward),
// none when NO SCROLL. A statement that needs the shards' servers while
// the merge is paused parks it first when the shards run the query as
// cursors of their transaction (below): the batch each shard is sending
// is read into memory (executor.ShardCursor.Park), the merge stays paused
// and goes on at the cursor's next FETCH, which parks the client's other
// paused merge, if any (fillCursor). A merge over plain reads (WITH HOLD
// outside a transaction block) is settled instead: the rest of its rows
// are kept (up to maxChunkedResult) for the cursor's next FETCHes. The cursor
// lives with the client, not on a server, so a WITH HOLD cursor pins
// nothing (its rows are read to the end at the COMMIT, as PostgreSQL
// computes them then); a cursor without HOLD ends with its transaction,
// and a ROLLBACK ends the WITH HOLD cursors the transaction declared, as
// in PostgreSQL.
//
// Inside a transaction the shards run the query as cursors of their own
// (executor.ShardCursor), fetched in batches as the merge needs rows, and
// the merge stops at the rows a FETCH wants (cursorFeed.RowsWanted): each
// shard plans for a fast start and computes what is fetched, as
// PostgreSQL's cursor does, and a CLOSE stops the shards at the end of
// their batch.
//
// Differences from a server's cursor, which docs/routing.md lists: the
// merge reads one row ahead on each shard, so an error can come one FETCH
// early; a cursor that neither SCROLL nor NO SCROLL
// declared scans backward over its window only (PostgreSQL decides by the
// plan); a statement between FETCHes that fails on a shard because of a
// row of the batch under way (which the shard computes anyway) answers
// 25P02 where PostgreSQL, which has not reached that row, runs it; and
// pg_cursors does not list them. A ROLLBACK TO ends the cursors declared
// after its savepoint (savepointDone), as PostgreSQL does. Every statement of
// such a cursor may come through either protocol; in the extended one the
// proxy executes them itself (routePlan.cursorOp).

// Cursor options of DeclareCursorStmt (PostgreSQL's parsenodes.h).
const (
	cursorBinary   = 0x0001
	cursorScroll   = 0x0002
	cursorNoScroll = 0x0004
	cursorHold     = 0x0020
)

// proxyCursor is a cursor the proxy holds: its rows, read from the merge
// as FETCH and MOVE need them (cursorStream).
type proxyCursor struct {
	name string
	desc []byte   // RowDescription message
	rows [][]byte // DataRow messages, from row base+1 on
	base int      // rows dropped from the front, behind the position
	size int      // bytes of rows
	pos  int      // 0: before the first row; 1…total: on a row; total+1: after the last
	// scroll: it may move backward; keepAll: declared SCROLL, so every
	// row stays for that (a cursor declared with neither SCROLL nor NO
	// SCROLL drops the rows behind its position once it holds more than
	// maxChunkedResult, and scans forward only from then on).
	scroll, keepAll bool
	hold            bool // WITH HOLD: it outlives its transaction's COMMIT
	inTx            bool // declared in the transaction now open (a ROLLBACK ends it even WITH HOLD)
	// src is the merge still producing the cursor's rows, paused between
	// FETCHes (nil once it ended); err what ended it early, answered by
	// the FETCH that needs a row beyond the ones read.
	src *portalStream
	err error
	// shard is the cursor each shard runs the query as, when the shards
	// are in a transaction (executor.ShardCursor); nil when they run it
	// as a plain read (WITH HOLD outside a transaction block).
	shard *executor.ShardCursor
	// spSeq is the client's savepoint count when the cursor was declared:
	// a ROLLBACK TO a savepoint numbered spSeq or less ends it.
	spSeq int
}

// savepointMark is an open savepoint of a sharded client's transaction.
type savepointMark struct {
	name string
	seq  int
}

// total is the number of rows read from the merge so far (all of them once
// src is nil).
func (cur *proxyCursor) total() int { return cur.base + len(cur.rows) }

// Rows a cursor keeps behind its position for moving back: all of them
// (up to maxChunkedResult) when it was declared SCROLL, the last
// cursorWindow bytes of them when it was declared with neither SCROLL nor
// NO SCROLL, and about noScrollWindow bytes, which are never read again,
// when NO SCROLL (dropped in pieces rather than row by row).
const (
	cursorWindow   = 8 << 20
	noScrollWindow = 1 << 20
)

// add keeps DataRow m. Past its window a cursor that may drop rows drops
// those behind its position (and scans forward only from then on); past
// maxChunkedResult what it still cannot keep ends it with 54000, unless
// live: the rows the running FETCH asked for are kept whatever their
// size, as they are about to be sent.
func (cur *proxyCursor) add(m []byte, live bool) {
	if cur.err != nil {
		return
	}
	cur.rows = append(cur.rows, append([]byte(nil), m...))
	cur.size += len(m)
	window := maxChunkedResult
	switch {
	case cur.keepAll:
	case cur.scroll:
		window = cursorWindow
	default:
		window = noScrollWindow
	}
	if cur.size <= window {
		return
	}
	if !cur.keepAll {
		if drop := cur.pos - 1 - cur.base; drop > 0 {
			for _, r := range cur.rows[:drop] {
				cur.size -= len(r)
			}
			cur.rows = append([][]byte(nil), cur.rows[drop:]...)
			cur.base += drop
			cur.scroll = false
		}
		if live || cur.size <= maxChunkedResult {
			return
		}
	}
	cur.rows = cur.rows[:len(cur.rows)-1]
	cur.size -= len(m)
	cur.err = &wire.Error{Severity: "ERROR", Code: wire.ProgramLimitExceeded,
		Message: fmt.Sprintf("the rows of cursor \"%s\" over several shards are more than the proxy keeps (64 MiB)", cur.name),
		Hint:    "Fetch them as they come (declare the cursor without SCROLL and FETCH it forward), narrow the query, or constrain the sharding key to one shard, where the cursor stays on its server."}
}

// row returns DataRow i (1-based) of the cursor.
func (cur *proxyCursor) row(i int) []byte { return cur.rows[i-1-cur.base] }

// span returns rows from+1 … to.
func (cur *proxyCursor) span(from, to int) [][]byte {
	return cur.rows[from-cur.base : to-cur.base]
}

// cursorStatement reports whether sql starts with a keyword of a cursor
// statement the proxy may answer (cheaply, before any parse).
func cursorStatement(sql string) bool {
	b := []byte(sql)
	b = b[skipSpaceAndComments(b, 0):]
	return hasKeyword(b, "declare") || hasKeyword(b, "fetch") || hasKeyword(b, "move") || hasKeyword(b, "close")
}

// cursorQuery serves sql if it is a cursor statement the proxy answers: a
// DECLARE of a query over several shards, or FETCH, MOVE or CLOSE of a
// cursor so declared. done is false for anything else, which takes the
// ordinary path.
func (c *client) cursorQuery(ctx context.Context, sql string) (done bool, err error) {
	if c.rt == nil || !cursorStatement(sql) {
		return false, nil
	}
	tree, perr := pg_query.Parse(sql)
	if perr != nil || len(tree.Stmts) != 1 {
		return false, nil
	}
	n := tree.Stmts[0].Stmt
	switch {
	case n.GetDeclareCursorStmt() != nil:
		return c.declareCursor(ctx, sql, n.GetDeclareCursorStmt())
	case n.GetFetchStmt() != nil:
		f := n.GetFetchStmt()
		cur := c.cursors[f.Portalname]
		if cur == nil {
			return false, nil
		}
		if c.xs.Failed() {
			return true, c.shardedError(errAborted())
		}
		return true, c.fetchCursor(cur, f)
	case n.GetClosePortalStmt() != nil:
		name := n.GetClosePortalStmt().Portalname
		if name == "" { // CLOSE ALL: the proxy's, then the shards' as before
			if !c.xs.Failed() {
				clear(c.cursors)
			}
			return false, nil
		}
		if c.cursors[name] == nil {
			return false, nil
		}
		if c.xs.Failed() {
			return true, c.shardedError(errAborted())
		}
		c.closeCursor(name)
		return true, c.localDone("CLOSE CURSOR")
	}
	return false, nil
}

// declareCursor runs DECLARE d (text sql) of a simple Query when its
// query needs several shards: the query merged into a proxyCursor.
func (c *client) declareCursor(ctx context.Context, sql string, d *pg_query.DeclareCursorStmt) (bool, error) {
	var p *routePlan
	if c.cursors[d.Portalname] == nil {
		inner, ok := cursorQueryText(sql)
		if !ok {
			return false, nil
		}
		var err error
		if p, err = c.plan(inner); err != nil || p.Kind != executor.RouteRead {
			return false, nil // one shard, or refused: the ordinary path says
		}
	}
	// A taken name is taken whichever shard the query would run on.
	if err := c.openCursor(ctx, d, p); err != nil {
		return true, c.cursorFailed(err)
	}
	return true, c.localDone("DECLARE CURSOR")
}

// openCursor runs p, the query of DECLARE d, into a proxyCursor; p is nil
// when the cursor's name is taken (the error says so).
func (c *client) openCursor(ctx context.Context, d *pg_query.DeclareCursorStmt, p *routePlan) error {
	if c.xs.Failed() {
		return errAborted()
	}
	explicit := c.xs.InTx() && !c.xs.Implicit()
	// A multi-statement Query is a transaction block for DECLARE, as in
	// PostgreSQL: its cursors end with its implicit transaction.
	block := explicit || c.multi && c.xs.InTx()
	switch {
	case c.cursors[d.Portalname] != nil || p == nil:
		return wire.Errorf(wire.DuplicateCursor, "cursor \"%s\" already exists", d.Portalname)
	case d.Options&cursorHold == 0 && !block:
		return wire.Errorf(wire.NoActiveSQLTransaction, "DECLARE CURSOR can only be used in transaction blocks")
	case d.Options&cursorBinary != 0:
		return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: "a BINARY cursor over several shards is not supported",
			Hint:    "Declare it without BINARY, or constrain the sharding key to one shard."}
	}
	if err := c.attachShards(ctx, p.Shards); err != nil {
		c.releaseIfIdle()
		return err
	}
	c.routeCounts().count(len(p.Shards), c.xs.Len())
	cur := &proxyCursor{name: d.Portalname, scroll: d.Options&cursorNoScroll == 0, keepAll: d.Options&cursorScroll != 0,
		hold: d.Options&cursorHold != 0, inTx: c.xs.InTx(), spSeq: c.spSeq}
	c.startCursorStream(cur, p)
	c.ranOn(p.Shards)
	if !explicit && cur.src != nil {
		// WITH HOLD outside a transaction block: PostgreSQL computes
		// its rows as the DECLARE's implicit transaction commits (not
		// parked: the implicit transaction may end at the next Sync).
		c.settleCursorStream(cur.src, streamKeep)
	}
	if cur.err != nil {
		// The query failed before its first row, or, computed whole,
		// had more rows than the proxy keeps.
		var se *executor.ShardError
		if !errors.As(cur.err, &se) {
			c.releaseIfIdle()
		}
		return cur.err
	}
	if c.cursors == nil {
		c.cursors = map[string]*proxyCursor{}
	}
	c.cursors[d.Portalname] = cur
	c.releaseIfIdle()
	return nil
}

// startCursorStream runs p, the query of cursor cur, as a merge that
// pauses whenever the cursor has the rows a FETCH asked for (cur.src, the
// client's one paused stream, as for a portal fetched in chunks: any
// statement that needs the shards' servers first settles it, keeping the
// rest of the rows). It returns once the merge has described its rows or
// ended (cur.err says how).
func (c *client) startCursorStream(cur *proxyCursor, p *routePlan) {
	st := &portalStream{c: c, cur: cur, shards: slices.Clone(p.Shards)}
	a := &executor.Answer{Plan: &p.Plan, Collation: c.collation(), Describe: executor.DescribeRows, Sink: cursorFeed{st}}
	if c.xs.InTx() {
		cur.shard = c.xs.NewCursor()
		a.Cursor = cur.shard
	}
	st.next, st.stop = iter.Pull(func(yield func(struct{}) bool) {
		st.yield = yield
		st.tag, st.err = c.xs.Execute(a, false)
	})
	cur.src = st
	// The merge's start may look up collations on the shards (c.stream
	// would settle it from inside itself): the stream is the client's
	// once it has paused.
	c.fillCursor(cur, 0)
	if cur.src != nil {
		c.stream = st
	}
}

// cursorFeed is the sink of a cursor's merge: its Write only, so that the
// merge orders text by the Answer's collation as any merged query does.
type cursorFeed struct{ st *portalStream }

func (f cursorFeed) Write(msgs []byte) (int, error) { return f.st.cursorWrite(msgs) }

// RowsWanted implements executor.RowsWanted: a live stream wants the rows
// its FETCH still lacks, so that the merge pulls no more from the shards
// (whose cursors compute rows as they are fetched); a stream being settled
// wants them all.
func (f cursorFeed) RowsWanted() int64 {
	st := f.st
	if st.mode != streamLive {
		return 0
	}
	return int64(max(st.want-st.cur.total(), 1))
}

// cursorWrite takes the merge's messages for the cursor: the
// RowDescription and DataRows are kept, notices go to the client. A live
// stream pauses once the cursor has the rows its FETCH wants.
func (st *portalStream) cursorWrite(msgs []byte) (int, error) {
	cur := st.cur
	for m := range messages(msgs) {
		switch {
		case m[0] == 'T':
			cur.desc = append([]byte(nil), m...)
		case m[0] != 'D':
			st.c.toClient(m)
		case st.mode != streamDrop:
			cur.add(m, st.mode == streamLive)
		}
	}
	if st.mode == streamLive && cur.desc != nil && cur.total() >= st.want && !st.yield(struct{}{}) {
		return len(msgs), errStreamStopped
	}
	return len(msgs), nil
}

// fillCursor runs cur's merge until the cursor has need rows (and its
// RowDescription), or the merge ends. A merge that was parked becomes the
// client's stream again, parking the one that was (only one stream reads
// the shards' servers at a time).
func (c *client) fillCursor(cur *proxyCursor, need int) {
	if cur.src != nil && cur.desc != nil && c.stream != cur.src && cur.total() < need {
		if c.stream != nil {
			c.settleStream(streamKeep)
		}
		c.stream = cur.src
	}
	for cur.src != nil && (cur.desc == nil || cur.total() < need) {
		st := cur.src
		st.want = need
		if _, paused := st.next(); !paused {
			c.endCursorStream(st)
		}
	}
}

// endCursorStream ends the merge of a cursor that has run to its end (or
// was settled): its error, if any, waits in the cursor for the FETCH that
// reaches it.
func (c *client) endCursorStream(st *portalStream) {
	st.stop()
	if c.stream == st {
		c.stream = nil
	}
	cur := st.cur
	cur.src = nil
	if st.err != nil && cur.err == nil {
		cur.err = st.err
	}
}

// cursorStreamNext settles a cursor's paused merge before the client's
// next extended-protocol message (typ, body) is served, unless the message
// leaves the shards' servers alone: a Parse, Bind, Describe or Execute of
// a FETCH, MOVE or CLOSE of a cursor the proxy holds, a Flush, or a Sync
// inside a healthy transaction block. A Sync elsewhere ends the cursor's
// transaction, and with it the cursor: its rows are dropped.
func (c *client) cursorStreamNext(typ byte, body []byte) {
	d := wire.NewBody(body)
	switch typ {
	case 'H':
		return
	case 'S':
		if c.xs.InTx() && !c.xs.Implicit() && !c.xs.Failed() {
			return
		}
		c.settleStream(streamDrop)
		return
	case 'P':
		d.CString()
		if q := d.CString(); d.Err() == nil && c.proxyCursorOp(string(q)) != nil {
			return
		}
	case 'B':
		d.CString()
		if st := c.sstmts[string(d.CString())]; d.Err() == nil && st != nil && c.proxyCursorOp(st.sql) != nil {
			return
		}
	case 'D', 'E':
		kind := byte('P')
		if typ == 'D' {
			kind = d.Byte()
		}
		name := string(d.CString())
		if d.Err() != nil {
			break
		}
		if kind == 'S' {
			if st := c.sstmts[name]; st != nil && c.proxyCursorOp(st.sql) != nil {
				return
			}
			break
		}
		if p := c.sportals[name]; p != nil && (p.plan == nil && p.stmt != nil && c.proxyCursorOp(p.stmt.sql) != nil ||
			p.plan != nil && p.plan.cursorOp != nil && p.plan.cursorOp.GetDeclareCursorStmt() == nil) {
			return // a Bind not planned yet (deferBind) plans it at the Execute
		}
	}
	c.settleStream(streamKeep)
}

// declarePlan returns the plan of an extended-protocol DECLARE (sql, with
// params) whose query needs several shards, nil for any other statement.
func (c *client) declarePlan(sql string, params [][]byte, formats []int16) *routePlan {
	b := []byte(sql)
	if !hasKeyword(b[skipSpaceAndComments(b, 0):], "declare") {
		return nil
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetDeclareCursorStmt() == nil {
		return nil
	}
	n := tree.Stmts[0].Stmt
	var inner *routePlan
	if c.cursors[n.GetDeclareCursorStmt().Portalname] == nil {
		text, ok := cursorQueryText(sql)
		if !ok {
			return nil
		}
		if inner, err = c.rt.planParams(nil, text, params, formats, c); err != nil || inner.Kind != executor.RouteRead {
			return nil
		}
	}
	return &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, cursorOp: n, cursorPlan: inner}
}

// cursorQueryText returns the query of a DECLARE: the text after its
// FOR, the first one after CURSOR.
func cursorQueryText(sql string) (string, bool) {
	sc, err := pg_query.Scan(sql)
	if err != nil {
		return "", false
	}
	cursor := false
	for _, t := range sc.Tokens {
		switch {
		case t.Token == pg_query.Token_CURSOR:
			cursor = true
		case cursor && t.Token == pg_query.Token_FOR:
			return sql[t.End:], true
		}
	}
	return "", false
}

// fetchCursor answers FETCH or MOVE f of cur.
func (c *client) fetchCursor(cur *proxyCursor, f *pg_query.FetchStmt) error {
	rows, n, err := c.moveCursor(cur, f)
	if err != nil {
		// As PostgreSQL's FETCH, which gathers its rows before it sends
		// any: the error alone, without a RowDescription or the rows
		// before it.
		return c.cursorFailed(err)
	}
	if f.Ismove {
		return c.localDone("MOVE " + strconv.FormatInt(n, 10))
	}
	c.w.Write(cur.desc)
	for _, r := range rows {
		c.w.Write(r)
	}
	return c.localDone("FETCH " + strconv.FormatInt(n, 10))
}

// cursorFailed answers a simple Query whose cursor statement failed with
// err: a shard lost as such, any other error as the statement's.
func (c *client) cursorFailed(err error) error {
	var se *executor.ShardError
	switch {
	case errors.As(err, &se):
		return c.shardFailed(err)
	case err == errReplan:
		return err
	}
	return c.shardedError(err)
}

// moveCursor reads from cur's merge the rows FETCH or MOVE f needs, and
// moves the cursor (move). A row it needs beyond the ones the merge gave
// before it failed answers the merge's error (with the rows before it,
// which the callers drop, as PostgreSQL's FETCH sends none before an
// error).
func (c *client) moveCursor(cur *proxyCursor, f *pg_query.FetchStmt) ([][]byte, int64, error) {
	need := cur.need(f.Direction, f.HowMany)
	c.fillCursor(cur, need)
	rows, n, err := cur.move(f.Direction, f.HowMany, !f.Ismove)
	if err == nil && cur.err != nil && cur.total() < need {
		err = cur.err
	}
	return rows, n, err
}

// need returns how many rows the cursor must have read for a move with
// direction d and count k (math.MaxInt: all of them).
func (cur *proxyCursor) need(d pg_query.FetchDirection, k int64) int {
	switch d {
	case pg_query.FetchDirection_FETCH_ABSOLUTE:
		if k < 0 {
			return math.MaxInt
		}
		return int(min(k, math.MaxInt32))
	case pg_query.FetchDirection_FETCH_RELATIVE:
		return int(max(0, min(int64(cur.pos)+k, math.MaxInt32)))
	}
	backward := d == pg_query.FetchDirection_FETCH_BACKWARD
	if k < 0 {
		backward, k = !backward, -k
	}
	switch {
	case backward || k == 0:
		return 0
	case k > math.MaxInt32:
		return math.MaxInt // ALL, or as good as
	}
	return cur.pos + int(k)
}

// move moves the cursor as FETCH (or MOVE: fetch false) with direction d
// and count k does, and returns the rows fetched (none for MOVE) and how
// many they are (or would be). The positions are PostgreSQL's: a FETCH
// leaves the cursor on the last row it returned, or past the end it ran
// off.
func (cur *proxyCursor) move(d pg_query.FetchDirection, k int64, fetch bool) ([][]byte, int64, error) {
	if !cur.scroll && cur.movesBack(d, k, fetch) {
		return nil, 0, errScanForward()
	}
	n := cur.total()
	if k == math.MaxInt64 {
		k = int64(n) + 1 // ALL: beyond any end
	}
	switch d {
	case pg_query.FetchDirection_FETCH_ABSOLUTE, pg_query.FetchDirection_FETCH_RELATIVE:
		target := int64(cur.pos) + k
		if d == pg_query.FetchDirection_FETCH_ABSOLUTE {
			target = k
			if k < 0 {
				target = int64(n) + 1 + k
			}
		}
		switch {
		case target < 1:
			cur.pos = 0
		case target > int64(n):
			cur.pos = n + 1
		default:
			cur.pos = int(target)
			if fetch {
				return [][]byte{cur.row(cur.pos)}, 1, nil
			}
			return nil, 1, nil
		}
		return nil, 0, nil
	}
	backward := d == pg_query.FetchDirection_FETCH_BACKWARD
	if k < 0 {
		backward, k = !backward, -k
	}
	if k == 0 {
		// FETCH 0: the current row again, if the cursor is on one.
		if cur.pos < 1 || cur.pos > n {
			return nil, 0, nil
		}
		if fetch {
			return [][]byte{cur.row(cur.pos)}, 1, nil
		}
		return nil, 1, nil
	}
	if !backward {
		from := min(cur.pos, n) // rows from+1 … to
		to := int64(from) + k
		if to > int64(n) {
			cur.pos = n + 1
			to = int64(n)
		} else {
			cur.pos = int(to)
		}
		got := int64(int(to) - from)
		if fetch {
			return cur.span(from, int(to)), got, nil
		}
		return nil, got, nil
	}
	from := max(cur.pos, 1) // rows from-1 down to to
	if cur.pos > n {
		from = n + 1
	}
	to := int64(from) - k
	if to < 1 {
		cur.pos = 0
		to = 1
	} else {
		cur.pos = int(to)
	}
	got := int64(from) - to
	if !fetch {
		return nil, got, nil
	}
	out := make([][]byte, 0, got)
	for i := from - 1; int64(i) >= to; i-- {
		out = append(out, cur.row(i))
	}
	return out, got, nil
}

// endsWith reports whether simple Query sql is a COMMIT or ROLLBACK that
// ends the cursor (a COMMIT keeps a cursor WITH HOLD, a ROLLBACK only one
// declared before the transaction), so that the rest of its rows need not
// be kept.
func (cur *proxyCursor) endsWith(sql string) bool {
	b := []byte(sql)
	b = b[skipSpaceAndComments(b, 0):]
	if !hasKeyword(b, "commit") && !hasKeyword(b, "rollback") && !hasKeyword(b, "end") && !hasKeyword(b, "abort") {
		return false
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetTransactionStmt() == nil {
		return false
	}
	switch tree.Stmts[0].Stmt.GetTransactionStmt().Kind {
	case pg_query.TransactionStmtKind_TRANS_STMT_COMMIT:
		return !cur.hold
	case pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		return !cur.hold || cur.inTx
	}
	return false
}

// closeCursor ends the proxy's cursor name, and the merge still
// producing its rows.
func (c *client) closeCursor(name string) {
	if cur := c.cursors[name]; cur != nil && cur.src != nil {
		if cur.src == c.stream {
			c.settleStream(streamDrop)
		} else {
			c.stopParked(cur)
		}
	}
	delete(c.cursors, name)
}

// parkCursorStream frees the shards' servers of a cursor's paused merge
// for the client's next statement: each shard's batch under way is read
// into memory (executor.ShardCursor.Park) and the merge stays paused, to
// go on at the cursor's next FETCH (fillCursor). A server that fails is
// broken: the statement that needs it fails, and so does the merge when
// it reads that shard again.
func (c *client) parkCursorStream(st *portalStream) {
	c.stream = nil
	if err := st.cur.shard.Park(); err != nil {
		c.log.Debug("parking a cursor's merge failed", "cursor", st.cur.name, "err", err)
	}
}

// stopParked ends the parked merge of cursor cur without reading its
// shards: their cursors end with the transaction, or ended already (a
// ROLLBACK TO, a server lost).
func (c *client) stopParked(cur *proxyCursor) {
	st := cur.src
	st.mode = streamDrop
	st.stop()
	cur.src = nil
}

// endCursorMerges settles the merges still producing cursors' rows before
// the transaction ends (committed: a COMMIT that commits): a WITH HOLD
// cursor is computed whole, as PostgreSQL computes it at COMMIT; every
// other merge is stopped, its rows dropped.
func (c *client) endCursorMerges(committed bool) {
	if st := c.stream; st != nil && st.cur != nil {
		mode := streamDrop
		if committed && st.cur.hold {
			mode = streamKeep
		}
		c.settleCursorStream(st, mode)
	}
	for _, cur := range c.cursors {
		if cur.src == nil {
			continue
		}
		if committed && cur.hold {
			c.stream = cur.src
			c.settleCursorStream(cur.src, streamKeep)
			continue
		}
		c.stopParked(cur)
	}
	c.savepoints = c.savepoints[:0]
}

// savepointDone follows a SAVEPOINT, RELEASE or ROLLBACK TO name that
// succeeded on the shards: a ROLLBACK TO ends the cursors declared after
// the savepoint, as PostgreSQL drops the portals of the subtransactions
// it rolls back (their shards' cursors are gone with them).
func (c *client) savepointDone(kind executor.SavepointKind, name string) {
	if kind == executor.SavepointSet {
		c.spSeq++
		c.savepoints = append(c.savepoints, savepointMark{name: name, seq: c.spSeq})
		return
	}
	at := -1
	for k := len(c.savepoints) - 1; k >= 0; k-- {
		if c.savepoints[k].name == name {
			at = k
			break
		}
	}
	if at < 0 {
		return
	}
	if kind == executor.SavepointRelease {
		c.savepoints = c.savepoints[:at]
		return
	}
	c.savepoints = c.savepoints[:at+1]
	seq := c.savepoints[at].seq
	for name, cur := range c.cursors {
		if cur.spSeq < seq {
			continue
		}
		if cur.src != nil {
			if cur.src == c.stream {
				c.stream = nil
			}
			c.stopParked(cur)
		}
		delete(c.cursors, name)
	}
}

// movesBack reports whether PostgreSQL's DoPortalRunFetch moves a portal
// back (or rewinds it) for a FETCH (MOVE: fetch false) with direction d
// and count k from the cursor's position: what a cursor that cannot scan
// backward refuses with 55000. It does for any backward step, even one
// that would not move (FETCH PRIOR before the first row), for FETCH 0 on a
// row (which steps back to fetch it again), and for ABSOLUTE n at or
// behind the position; MOVE 0 and a rewind of a cursor that has not moved
// do not.
func (cur *proxyCursor) movesBack(d pg_query.FetchDirection, k int64, fetch bool) bool {
	// PostgreSQL's portalPos, atStart and atEnd.
	n := cur.total()
	atEnd := cur.src == nil && cur.pos > n
	passed := int64(min(cur.pos, n))
	atStart := passed == 0
	rewinds := !(atStart && !atEnd) // DoPortalRewind would move
	switch d {
	case pg_query.FetchDirection_FETCH_ABSOLUTE:
		switch {
		case k == 0:
			return rewinds
		case k < 0:
			return true
		case k-1 <= passed/2:
			return rewinds
		}
		p := passed
		if atEnd {
			p++
		}
		return k <= p
	case pg_query.FetchDirection_FETCH_RELATIVE:
		switch {
		case k > 0:
			return false
		case k < 0:
			return true
		}
		d = pg_query.FetchDirection_FETCH_FORWARD
	}
	backward := d == pg_query.FetchDirection_FETCH_BACKWARD
	if k < 0 {
		backward, k = !backward, -k
	}
	switch {
	case k == 0 && !fetch:
		return false
	case k == 0 && !atStart && !atEnd:
		return true
	case !backward:
		return false
	case k == math.MaxInt64 && !fetch:
		return rewinds // MOVE BACKWARD ALL rewinds
	}
	return true
}

// errScanForward is PostgreSQL's answer to a backward move of a NO SCROLL
// cursor.
func errScanForward() error {
	return &wire.Error{Severity: "ERROR", Code: wire.ObjectNotInPrerequisiteState,
		Message: "cursor can only scan forward", Hint: "Declare it with SCROLL option to enable backward scan."}
}

// endCursors ends the proxy's cursors with the transaction: at a COMMIT
// those without HOLD; at a ROLLBACK (or a COMMIT that rolled back) also
// those WITH HOLD that the transaction declared.
func (c *client) endCursors(committed bool) {
	for name, cur := range c.cursors {
		if !cur.hold || !committed && cur.inTx {
			delete(c.cursors, name)
			continue
		}
		cur.inTx = false
	}
}

// proxyCursorOp returns the statement sql when it is a FETCH, MOVE or
// CLOSE of a cursor the proxy holds, nil otherwise.
func (c *client) proxyCursorOp(sql string) *pg_query.Node {
	if len(c.cursors) == 0 || !cursorStatement(sql) {
		return nil
	}
	tree, err := pg_query.Parse(sql)
	if err != nil || len(tree.Stmts) != 1 {
		return nil
	}
	n := tree.Stmts[0].Stmt
	var name string
	switch {
	case n.GetFetchStmt() != nil:
		name = n.GetFetchStmt().Portalname
	case n.GetClosePortalStmt() != nil:
		name = n.GetClosePortalStmt().Portalname
	}
	if c.cursors[name] == nil {
		return nil
	}
	return n
}

// cursorDescription is what Describe answers for cursor statement op: the
// cursor's RowDescription for a FETCH, NoData otherwise (and once the
// cursor is gone).
func (c *client) cursorDescription(op *pg_query.Node) []byte {
	if f := op.GetFetchStmt(); f != nil && !f.Ismove {
		if cur := c.cursors[f.Portalname]; cur != nil {
			return cur.desc
		}
	}
	return wire.AppendNoData(nil)
}

// cursorLocal executes cursor statement op (proxyCursorOp) as the portal
// of an extended-protocol Execute: its rows (whatever the row limit: a
// FETCH's own count bounds them) and command tag.
func (c *client) cursorLocal(ctx context.Context, p *sPortal, maxRows int32, describe bool) error {
	plan := p.plan
	op := plan.cursorOp
	if d := op.GetDeclareCursorStmt(); d != nil {
		if describe {
			// The portal's Describe, answered before its Execute fails.
			c.w.Write(wire.AppendNoData(nil))
		}
		if err := c.openCursor(ctx, d, plan.cursorPlan); err != nil {
			return err
		}
		c.w.Write(wire.AppendCommandComplete(nil, "DECLARE CURSOR"))
		return nil
	}
	if f := op.GetFetchStmt(); f != nil {
		cur := c.cursors[f.Portalname]
		if cur == nil {
			return wire.Errorf(wire.InvalidCursorName, "cursor \"%s\" does not exist", f.Portalname)
		}
		var codes []int16
		if !f.Ismove {
			var err error
			if codes, err = cursorFormats(cur, resultFormats(p.tail)); err != nil {
				return err
			}
		}
		if describe {
			// As PostgreSQL's: the portal was described before it ran.
			c.w.Write(describeFormats(c.cursorDescription(op), codes))
		}
		rows, n, err := c.moveCursor(cur, f)
		if err == nil {
			rows, err = binaryRows(cur, rows, codes)
		}
		if err != nil {
			return err
		}
		if f.Ismove {
			c.w.Write(wire.AppendCommandComplete(nil, "MOVE "+strconv.FormatInt(n, 10)))
			return nil
		}
		// Like PostgreSQL's portal of a FETCH: the rows are computed at
		// the first Execute, and handed out by its row limit.
		p.chunks = &bufferedRows{rows: rows, tag: "FETCH " + strconv.FormatInt(n, 10)}
		return c.serveChunk(p, maxRows)
	}
	name := op.GetClosePortalStmt().Portalname
	if c.cursors[name] == nil {
		return wire.Errorf(wire.InvalidCursorName, "cursor \"%s\" does not exist", name)
	}
	c.closeCursor(name)
	if describe {
		c.w.Write(wire.AppendNoData(nil))
	}
	c.w.Write(wire.AppendCommandComplete(nil, "CLOSE CURSOR"))
	return nil
}

// cursorFormats are the result formats a Bind asks of a FETCH of cur (rf,
// the Bind's result-format part): nil when all are text, else one per
// column. The cursor keeps its rows in text, as the shards sent them.
func cursorFormats(cur *proxyCursor, rf []byte) ([]int16, error) {
	d := wire.NewBody(rf)
	n := int(d.Uint16())
	codes := make([]int16, n)
	binary := false
	for i := range codes {
		codes[i] = int16(d.Uint16())
		binary = binary || codes[i] != 0
	}
	if d.Err() != nil || !binary {
		return nil, nil
	}
	cols := cursorColumns(cur.desc)
	switch n {
	case len(cols):
		return codes, nil
	case 1:
		all := make([]int16, len(cols))
		for i := range all {
			all[i] = codes[0]
		}
		return all, nil
	}
	return nil, wire.Errorf(wire.ProtocolViolation, "bind message has %d result formats but query has %d columns", n, len(cols))
}

// cursorColumns returns the type OID of each column of RowDescription
// message desc, and the offset of each column's format code in it.
func cursorColumns(desc []byte) []struct {
	oid    uint32
	format int
} {
	var out []struct {
		oid    uint32
		format int
	}
	if len(desc) < 7 {
		return out
	}
	n := int(binary.BigEndian.Uint16(desc[5:7]))
	at := 7
	for range n {
		end := bytes.IndexByte(desc[at:], 0)
		if end < 0 || at+end+19 > len(desc) {
			return out
		}
		at += end + 1 // the name
		out = append(out, struct {
			oid    uint32
			format int
		}{binary.BigEndian.Uint32(desc[at+6:]), at + 16})
		at += 18
	}
	return out
}

// describeFormats returns RowDescription desc with the format codes
// codes (nil: desc, all text).
func describeFormats(desc []byte, codes []int16) []byte {
	if codes == nil {
		return desc
	}
	out := append([]byte(nil), desc...)
	for i, col := range cursorColumns(desc) {
		binary.BigEndian.PutUint16(out[col.format:], uint16(codes[i]))
	}
	return out
}

// binaryRows returns rows (text DataRows of cur) with the columns codes
// asks in binary converted by pgx's codec of the column's type. A value
// the codec cannot carry over (a type it does not know, text in a
// DateStyle it does not read) fails the FETCH rather than being sent
// wrong.
func binaryRows(cur *proxyCursor, rows [][]byte, codes []int16) ([][]byte, error) {
	if codes == nil {
		return rows, nil
	}
	cols := cursorColumns(cur.desc)
	m := pgtype.NewMap()
	out := make([][]byte, 0, len(rows))
	for _, r := range rows {
		d := wire.NewBody(r[5:])
		n := int(d.Uint16())
		msg := wire.AppendInt16([]byte{'D', 0, 0, 0, 0}, int16(n))
		for i := range n {
			l := d.Int32()
			if l < 0 {
				msg = wire.AppendInt32(msg, -1)
				continue
			}
			v := d.Bytes(int(l))
			if i < len(codes) && codes[i] != 0 && i < len(cols) {
				b, err := textToBinary(m, cols[i].oid, v)
				if err != nil {
					return nil, err
				}
				v = b
			}
			msg = wire.AppendInt32(msg, int32(len(v)))
			msg = append(msg, v...)
		}
		if d.Err() != nil {
			return nil, wire.Errorf(wire.InternalError, "cursor: malformed DataRow: %v", d.Err())
		}
		out = append(out, wire.FinishMessage(msg, 0))
	}
	return out, nil
}

// textToBinary converts one value of type oid from PostgreSQL's text
// format to its binary format.
func textToBinary(m *pgtype.Map, oid uint32, text []byte) ([]byte, error) {
	var v any
	err := m.Scan(oid, pgtype.TextFormatCode, text, &v)
	var b []byte
	if err == nil {
		b, err = m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
	}
	if err != nil || b == nil {
		return nil, &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: fmt.Sprintf("a column of type %d of a cursor over several shards cannot be fetched in binary format", oid),
			Detail:  fmt.Sprint(err),
			Hint:    "Fetch it in text format."}
	}
	return b, nil
}

// portalCursorDescription answers Describe of portal p, the proxy's own
// (RouteLocal): a FETCH's RowDescription in the formats its Bind asked.
func (c *client) portalCursorDescription(p *sPortal) []byte {
	op := p.plan.cursorOp
	desc := c.cursorDescription(op)
	if f := op.GetFetchStmt(); f != nil && desc[0] == 'T' {
		if codes, err := cursorFormats(c.cursors[f.Portalname], resultFormats(p.tail)); err == nil {
			return describeFormats(desc, codes)
		}
	}
	return desc
}
