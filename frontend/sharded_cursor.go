package frontend

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
// several shards has no server to live on: the proxy runs it at DECLARE,
// merged as for the client (executor.Session.Execute), keeps its
// RowDescription and rows (up to maxChunkedResult, as for a portal
// fetched in chunks), and answers FETCH, MOVE and CLOSE of the cursor
// itself, with PostgreSQL's positions, command tags and errors. This is
// how psycopg2's named cursors and Django's QuerySet.iterator() read
// large results. The cursor lives with the client, not on a server, so a
// WITH HOLD cursor pins nothing; a cursor without HOLD ends with its
// transaction, and a ROLLBACK ends the WITH HOLD cursors the transaction
// declared, as in PostgreSQL.
//
// Differences from a server's cursor, which docs/routing.md lists: the
// query runs to its end at DECLARE (PostgreSQL runs it as FETCH asks,
// and a WITH HOLD one at COMMIT), so its errors come at DECLARE; a cursor
// that neither SCROLL nor NO SCROLL declared scans backward (PostgreSQL
// decides by the plan); ROLLBACK TO SAVEPOINT does not close the cursors
// declared after the savepoint; and pg_cursors does not list them. Every
// statement of such a cursor may come through either protocol; in the
// extended one the proxy executes them itself (routePlan.cursorOp).

// Cursor options of DeclareCursorStmt (PostgreSQL's parsenodes.h).
const (
	cursorBinary   = 0x0001
	cursorScroll   = 0x0002
	cursorNoScroll = 0x0004
	cursorHold     = 0x0020
)

// proxyCursor is a cursor the proxy holds: its rows, merged at DECLARE.
type proxyCursor struct {
	desc   []byte   // RowDescription message
	rows   [][]byte // DataRow messages
	pos    int      // 0: before the first row; 1…len(rows): on a row; len(rows)+1: after the last
	scroll bool     // it may move backward
	hold   bool     // WITH HOLD: it outlives its transaction's COMMIT
	inTx   bool     // declared in the transaction now open (a ROLLBACK ends it even WITH HOLD)
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
		delete(c.cursors, name)
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
		var se *executor.ShardError
		switch {
		case errors.As(err, &se):
			return true, c.shardFailed(err)
		case err == errReplan:
			return true, err
		}
		return true, c.shardedError(err)
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
	switch {
	case c.cursors[d.Portalname] != nil || p == nil:
		return wire.Errorf(wire.DuplicateCursor, "cursor \"%s\" already exists", d.Portalname)
	case d.Options&cursorHold == 0 && !explicit:
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
	cur := &proxyCursor{scroll: d.Options&cursorNoScroll == 0, hold: d.Options&cursorHold != 0, inTx: explicit}
	sink := &cursorSink{c: c, cur: cur}
	_, err := c.xs.Execute(&executor.Answer{Plan: &p.Plan, Collation: c.collation(), Describe: executor.DescribeRows, Sink: sink}, false)
	c.ranOn(p.Shards)
	if err == nil && sink.over {
		err = &wire.Error{Severity: "ERROR", Code: wire.ProgramLimitExceeded,
			Message: fmt.Sprintf("the rows of cursor \"%s\" over several shards are more than the proxy keeps (64 MiB)", d.Portalname),
			Hint:    "Narrow the query, or constrain the sharding key to one shard, where the cursor stays on its server."}
	}
	if err != nil {
		var se *executor.ShardError
		if !errors.As(err, &se) {
			c.releaseIfIdle()
		}
		return err
	}
	if c.cursors == nil {
		c.cursors = map[string]*proxyCursor{}
	}
	c.cursors[d.Portalname] = cur
	c.releaseIfIdle()
	return nil
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
		if inner, err = c.rt.planParams(text, params, formats, c); err != nil || inner.Kind != executor.RouteRead {
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

// cursorSink keeps the merged answer's RowDescription and DataRows for a
// cursor; what else the merge writes (notices) goes to the client.
type cursorSink struct {
	c    *client
	cur  *proxyCursor
	size int
	over bool
}

func (s *cursorSink) Write(msgs []byte) (int, error) {
	for m := range messages(msgs) {
		switch m[0] {
		case 'T':
			s.cur.desc = append([]byte(nil), m...)
		case 'D':
			s.size += len(m)
			if s.size > maxChunkedResult {
				s.over = true
				continue
			}
			s.cur.rows = append(s.cur.rows, append([]byte(nil), m...))
		default:
			s.c.toClient(m)
		}
	}
	return len(msgs), nil
}

// fetchCursor answers FETCH or MOVE f of cur.
func (c *client) fetchCursor(cur *proxyCursor, f *pg_query.FetchStmt) error {
	rows, n, err := cur.move(f.Direction, f.HowMany, !f.Ismove)
	if err != nil {
		return c.shardedError(err)
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

// move moves the cursor as FETCH (or MOVE: fetch false) with direction d
// and count k does, and returns the rows fetched (none for MOVE) and how
// many they are (or would be). The positions are PostgreSQL's: a FETCH
// leaves the cursor on the last row it returned, or past the end it ran
// off.
func (cur *proxyCursor) move(d pg_query.FetchDirection, k int64, fetch bool) ([][]byte, int64, error) {
	n := len(cur.rows)
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
		if target < int64(cur.pos) && !cur.scroll {
			return nil, 0, errScanForward()
		}
		switch {
		case target < 1:
			cur.pos = 0
		case target > int64(n):
			cur.pos = n + 1
		default:
			cur.pos = int(target)
			if fetch {
				return cur.rows[cur.pos-1 : cur.pos], 1, nil
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
			return cur.rows[cur.pos-1 : cur.pos], 1, nil
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
			return cur.rows[from:to], got, nil
		}
		return nil, got, nil
	}
	if !cur.scroll {
		return nil, 0, errScanForward()
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
		out = append(out, cur.rows[i-1])
	}
	return out, got, nil
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
		if err := c.openCursor(ctx, d, plan.cursorPlan); err != nil {
			return err
		}
		if describe {
			c.w.Write(wire.AppendNoData(nil))
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
		rows, n, err := cur.move(f.Direction, f.HowMany, !f.Ismove)
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
	delete(c.cursors, name)
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
