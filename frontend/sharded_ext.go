package frontend

import (
	"context"
	"fmt"
	"sync"

	"github.com/shardgate/shardgate/config"
	"github.com/shardgate/shardgate/wire"
)

// The extended protocol on sharded databases.
//
// Where a statement goes is known only at Bind (its parameters carry the
// sharding key), so the proxy answers Parse, Bind and Close itself and
// sends each Execute — with the Parse and Bind it needs — to the shards
// the bound statement routes to, followed by a Sync that the client never
// sees. Describe of a statement asks any shard (schemas are the same
// everywhere). A batch is read whole (up to Sync) before it runs, so that a
// Describe of a portal travels with its Execute.

// sStmt is a client's prepared statement on a sharded database.
type sStmt struct {
	sql   string
	st    *stmt // proxy-wide statement (name and Parse message)
	query []byte

	effOnce sync.Once
	eff     stmtEffect
}

// effect returns what executing the statement does to the session.
func (st *sStmt) effect() stmtEffect {
	st.effOnce.Do(func() { st.eff = analyze([]byte(st.sql)) })
	return st.eff
}

// sPortal is a bound statement.
type sPortal struct {
	stmt    *sStmt
	params  [][]byte
	formats []int16
	tail    []byte // Bind body after the statement name
	plan    *routePlan
	// suspended: an Execute with a row limit stopped before the last row
	// (PortalSuspended). Every Execute binds the statement anew on the
	// shard, so the rest cannot be fetched: running it again would start
	// over and return the first rows again.
	suspended bool
}

type batchMsg struct {
	typ  byte
	body []byte
}

// shardedExtended buffers one extended-protocol message; at Sync or Flush
// the batch runs.
func (c *client) shardedExtended(ctx context.Context, typ byte, body []byte) error {
	c.batch = append(c.batch, batchMsg{typ: typ, body: append([]byte{}, body...)})
	if typ != 'S' && typ != 'H' {
		return nil
	}
	batch := c.batch
	c.batch = nil
	for k := 0; k < len(batch); k++ {
		m := batch[k]
		if c.localSkip && m.typ != 'S' {
			continue
		}
		var err error
		switch m.typ {
		case 'P':
			err = c.sParse(m.body)
		case 'B':
			err = c.sBind(m.body)
		case 'D':
			kind, name, derr := describeMsg('D', m.body)
			switch {
			case derr != nil:
				err = derr
			case kind == 'P' && k+1 < len(batch) && batch[k+1].typ == 'E' && executesPortal(batch[k+1].body, name):
				k++
				err = c.sExecute(ctx, batch[k].body, true)
			default:
				err = c.sDescribe(ctx, kind, name)
			}
		case 'E':
			err = c.sExecute(ctx, m.body, false)
		case 'C':
			err = c.sClose(m.body)
		case 'H':
			err = c.flushClient()
		case 'S':
			c.localSkip = false
			if !c.stx.open {
				c.detachShards()
			}
			c.tx = c.shardedStatus()
			c.w.Write(wire.AppendReadyForQuery(nil, c.tx))
			err = c.flushClient()
		}
		if err != nil {
			e, ok := wire.AsError(err)
			if !ok || e.Fatal() {
				return err
			}
			if c.stx.open {
				c.stx.failed = true
			}
			c.w.Write(wire.AppendError(nil, e))
			c.localSkip = true
		}
	}
	return nil
}

func (c *client) sParse(body []byte) error {
	name, query, tail, err := parseMsg(body)
	if err != nil {
		return err
	}
	if err := uniqueIDInParse(query); err != nil {
		return err
	}
	if _, err := c.rt.plan(string(query), c); err != nil {
		if e, ok := wire.AsError(err); ok && e.Code == wire.SyntaxError {
			return err
		}
		// Other routing errors depend on parameters or are reported at
		// Execute.
	}
	if c.sstmts == nil {
		c.sstmts = map[string]*sStmt{}
	}
	c.sstmts[string(name)] = &sStmt{sql: string(query), st: c.l.stmts.get(tail), query: query}
	c.w.Write([]byte{'1', 0, 0, 0, 4})
	return nil
}

func (c *client) sBind(body []byte) error {
	d := wire.NewBody(body)
	portal := d.CString()
	name := d.CString()
	if err := d.Err(); err != nil {
		return err
	}
	tail := d.Rest()
	st := c.sstmts[string(name)]
	if st == nil {
		return wire.Errorf("26000", "prepared statement \"%s\" does not exist", name)
	}
	formats, params, err := parseBindParams(tail)
	if err != nil {
		return err
	}
	p := &sPortal{stmt: st, params: params, formats: formats, tail: tail}
	if err := c.planPortal(p); err != nil {
		return err
	}
	if c.sportals == nil {
		c.sportals = map[string]*sPortal{}
	}
	c.sportals[string(portal)] = p
	c.w.Write([]byte{'2', 0, 0, 0, 4})
	return nil
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
	shard := 0
	if kind == 'S' {
		st = c.sstmts[string(name)]
		if st == nil {
			return wire.Errorf("26000", "prepared statement \"%s\" does not exist", name)
		}
		shard = c.anyShard()
	} else {
		p = c.sportals[string(name)]
		if p == nil {
			return wire.Errorf("34000", "portal \"%s\" does not exist", name)
		}
		st = p.stmt
		if len(p.plan.shards) > 0 {
			shard = p.plan.shards[0]
		}
	}
	for attempt := 0; ; attempt++ {
		err := c.attachShard(ctx, shard)
		if err == errReplan && attempt >= maxReplans {
			return errReplansExhausted()
		}
		if err != errReplan {
			if err != nil {
				return err
			}
			break
		}
		// Chosen before a reload that changed the routing: choose again.
		if p == nil {
			shard = c.anyShard()
			continue
		}
		if err := c.planPortal(p); err != nil {
			return err
		}
		shard = 0
		if len(p.plan.shards) > 0 {
			shard = p.plan.shards[0]
		}
	}
	s := c.shards[shard].server
	c.server = s
	out := c.ensureParsed(nil, st)
	if p != nil {
		out = c.appendBind(out, p)
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
	} else {
		out = append(out, 'D', 0, 0, 0, 0, 'S')
		out = append(out, st.st.name...)
		out = append(out, 0)
		out = wire.FinishMessage(out, len(out)-len(st.st.name)-7)
	}
	out = append(out, 'S', 0, 0, 0, 4)
	return c.serverExchange(s, out, func(typ byte, raw []byte) {
		switch typ {
		case 't', 'T', 'n':
			c.toClient(raw)
		}
	})
}

// anyShard is the shard that answers shard-independent questions: one the
// client already holds, else a random one.
func (c *client) anyShard() int {
	for i := range c.shards {
		if c.shards[i].server != nil {
			return i
		}
	}
	return pickShard(len(c.shards))
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

// serverExchange writes out (which ends with Sync) to s and hands every
// answer up to ReadyForQuery to fn; it returns the first server error.
func (c *client) serverExchange(s interface {
	Flush() error
}, out []byte, fn func(typ byte, raw []byte)) error {
	srv := c.server
	srv.W.Write(out)
	if err := srv.Flush(); err != nil {
		return c.shardFailed(err)
	}
	var serr *wire.Error
	for {
		typ, raw, body, err := srv.R.Next()
		if err != nil {
			srv.Broken = true
			return c.shardFailed(err)
		}
		switch typ {
		case 'E':
			if serr == nil {
				serr = wire.ParseError(body)
				srv.NoteError(serr)
			}
			if c.pendingPrepare != "" {
				delete(srv.Prepared, c.pendingPrepare) // the Parse failed
				c.pendingPrepare = ""
			}
		case '1':
			c.pendingPrepare = "" // the statement exists, whatever fails next
			fn(typ, raw)
		case 'N':
			c.toClient(raw)
		case 'S':
			name, rest, _ := wire.CString(body)
			val, _, _ := wire.CString(rest)
			srv.Params[string(name)] = string(val)
		case 'Z':
			c.pendingPrepare = ""
			if serr != nil {
				return serr
			}
			return nil
		default:
			fn(typ, raw)
		}
	}
}

// sExecute runs a portal on the shards its plan names.
func (c *client) sExecute(ctx context.Context, body []byte, describe bool) error {
	name, maxRows, err := executeMsg(body)
	if err != nil {
		return err
	}
	p := c.sportals[string(name)]
	if p == nil {
		return wire.Errorf("34000", "portal \"%s\" does not exist", name)
	}
	if p.suspended {
		return &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: fmt.Sprintf("fetching the rest of portal \"%s\" is not supported on sharded databases", name),
			Hint:    "execute the portal without a row limit (turn the driver's fetch size off)"}
	}
	plan := p.plan
	for attempt := 0; ; attempt++ {
		switch plan.kind {
		case routeBegin, routeCommit, routeRollback, routeSavepoint:
			return c.sTxControl(ctx, plan)
		}
		if c.stx.failed {
			return wire.Errorf("25P02", "current transaction is aborted, commands ignored until end of transaction block")
		}
		// A read that starts the batch's work outside a transaction may go to
		// replicas; once a server is held, the batch stays on it.
		c.lb.read = !c.stx.open && !plan.write && (plan.kind == routeOne || plan.kind == routeRead) &&
			!c.holdsShards() && c.balanced() && c.readStatement(p.stmt.sql, false)
		err := c.attachShards(ctx, plan.shards)
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
	c.routeCounts().count(len(plan.shards), len(c.shards))
	if c.mode == config.PoolTransaction {
		c.txEff |= p.stmt.effect().eff
	}
	if len(plan.shards) > 1 && maxRows > 0 {
		return wire.Errorf(wire.FeatureNotSupported, "fetching a cross-shard result in chunks (Execute with a row limit) is not supported")
	}
	implicit := !c.stx.open && len(plan.shards) > 1 && (plan.kind == routeWrite || plan.kind == routeOmniWrite)
	if len(plan.shards) == 1 {
		i := plan.shards[0]
		c.server = c.shards[i].server
		var out []byte
		if pre := c.prefix(i, false); pre != "" {
			out = wire.AppendQuery(out, pre)
			if err := c.serverExchange(nil, out, func(byte, []byte) {}); err != nil {
				return err
			}
			out = out[:0]
		}
		out = c.appendPortal(out, p, i)
		if describe {
			out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
		}
		out = append(out, 'E', 0, 0, 0, 9, 0)
		out = wire.AppendInt32(out, maxRows)
		out = append(out, 'S', 0, 0, 0, 4)
		err := c.serverExchange(nil, out, func(typ byte, raw []byte) {
			switch typ {
			case '1', '2':
			case 's':
				p.suspended = true
				c.toClient(raw)
			default:
				c.toClient(raw)
			}
		})
		if err == nil && len(plan.ops) > 0 {
			if c.stx.open {
				for _, op := range plan.ops {
					op.server = c.server
					c.sess.pending = append(c.sess.pending, op)
				}
			} else {
				c.applyOps(plan.ops)
			}
		}
		return err
	}
	// Several shards: send to each, then merge as the simple protocol
	// does.
	readers := make([]*shardRows, len(plan.shards))
	for k, i := range plan.shards {
		c.server = c.shards[i].server
		var out []byte
		if pre := c.prefix(i, implicit); pre != "" {
			out = wire.AppendQuery(out, pre)
			if err := c.serverExchange(nil, out, func(byte, []byte) {}); err != nil {
				return err
			}
			out = out[:0]
		}
		out = c.appendPortal(out, p, i)
		parsing := c.pendingPrepare
		c.pendingPrepare = ""
		out = append(out, 'D', 0, 0, 0, 6, 'P', 0)
		out = append(out, 'E', 0, 0, 0, 9, 0, 0, 0, 0, 0)
		out = append(out, 'S', 0, 0, 0, 4)
		c.server.W.Write(out)
		if err := c.server.Flush(); err != nil {
			return c.shardFailed(err)
		}
		readers[k] = &shardRows{c: c, s: c.server, extended: true, parsing: parsing}
	}
	var firstErr *wire.Error
	for _, r := range readers {
		r.header()
		if r.ioErr != nil {
			c.server = r.s
			return c.shardFailed(r.ioErr)
		}
		if r.serr != nil && firstErr == nil {
			firstErr = r.serr
		}
	}
	ioErr, err := c.gatherMany(plan, readers, implicit, firstErr, func() (string, error) {
		if !describe {
			for _, r := range readers {
				r.quietDesc = true
			}
		}
		return c.combineExt(plan, readers, describe)
	})
	if ioErr != nil {
		return c.shardFailed(ioErr)
	}
	return err
}

// combineExt is combine for extended-protocol answers: RowDescription is
// sent only when the client asked for it.
func (c *client) combineExt(p *routePlan, readers []*shardRows, describe bool) (string, error) {
	if !describe && readers[0].desc != nil {
		c.suppressDesc = true
		defer func() { c.suppressDesc = false }()
	}
	if describe && readers[0].desc == nil && !readers[0].empty {
		c.toClient([]byte{'n', 0, 0, 0, 4})
	}
	return c.combine(p, readers)
}

// sTxControl runs BEGIN/COMMIT/ROLLBACK/SAVEPOINT sent through the
// extended protocol.
func (c *client) sTxControl(ctx context.Context, p *routePlan) error {
	switch p.kind {
	case routeBegin:
		if !c.stx.open {
			c.stx = shardTx{open: true, begin: p.sql}
		}
		c.w.Write(wire.AppendCommandComplete(nil, "BEGIN"))
	case routeCommit, routeRollback:
		commit := p.kind == routeCommit && !c.stx.failed
		var joined []int
		for i := range c.shards {
			if c.shards[i].inTx && c.shards[i].server != nil {
				joined = append(joined, i)
			}
		}
		var err error
		if commit {
			err = c.commitShards(joined)
		} else {
			c.rollbackShards()
		}
		c.endSession(commit && err == nil)
		c.stx = shardTx{}
		c.detachShards()
		if err != nil {
			return err
		}
		if commit {
			c.w.Write(wire.AppendCommandComplete(nil, "COMMIT"))
		} else {
			c.w.Write(wire.AppendCommandComplete(nil, "ROLLBACK"))
		}
	default:
		return wire.Errorf(wire.FeatureNotSupported, "savepoints through the extended protocol are not supported on sharded databases; use the simple protocol")
	}
	return nil
}

// appendPortal appends the Parse (if the server lacks the statement) and
// Bind that recreate portal p on shard i's server: the client's statement,
// the router's rewrite of it, or — for a multi-row INSERT split between
// shards — the INSERT with shard i's rows and their parameters.
func (c *client) appendPortal(out []byte, p *sPortal, i int) []byte {
	st := p.stmt
	plan := p.plan
	sql := plan.sqlFor(i)
	tail := p.tail
	if sql != st.sql {
		// The original Parse tail is query NUL, int16 count, OIDs.
		types := st.tailTypes()
		var newTail []byte
		if pm, ok := plan.perShardParams[i]; ok {
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
			if plan.rmerge != nil && plan.rmerge.HiddenColumns > 0 {
				tail = widenResultFormats(tail, plan.rmerge.HiddenColumns)
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
func (c *client) attachShards(ctx context.Context, shards []int) error {
	for _, i := range shards {
		if err := c.attachShard(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// planPortal routes a bound statement with its parameters.
func (c *client) planPortal(p *sPortal) error {
	plan, err := c.rt.planParams(p.stmt.sql, p.params, p.formats, c)
	if err != nil {
		return err
	}
	if c.mode == config.PoolTransaction {
		plan.ops = p.stmt.effect().ops
	}
	p.plan = plan
	return nil
}
