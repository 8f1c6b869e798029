package frontend

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/shardgate/shardgate/executor"
	"github.com/shardgate/shardgate/pool"
	"github.com/shardgate/shardgate/wire"
)

// SQL-level prepared statements in transaction mode.
//
// PREPARE name AS query creates a statement in one server's session, which
// transaction pooling cannot carry from server to server. As for
// protocol-level statements (prepared.go), the proxy maps the client's
// names to proxy-wide ones: each distinct PREPARE text gets a name
// "sgq_<n>", a server holds "PREPARE sgq_<n> …" once it needed it, EXECUTE
// name is rewritten to EXECUTE sgq_<n> (a server that lacks the statement
// gets its PREPARE first, in a round trip of its own), and DEALLOCATE name
// is answered by the proxy. On a sharded database EXECUTE is routed by its
// arguments as the prepared query would be by its parameters.
//
// Only simple Queries are rewritten. A PREPARE sent with the extended
// protocol stays on its server and pins the client to it (see settle).

// sqlStmt is a proxy-wide SQL-level prepared statement.
type sqlStmt struct {
	name    string // "sgq_<n>"
	prepare string // PREPARE <name> <the client's text after its name>
	query   string // the statement after AS, for routing
}

// sqlStmtCache maps the text of PREPARE after the client's name to
// proxy-wide statements.
type sqlStmtCache struct{ *namedCache[sqlStmt] }

func newSQLStmtCache(gen *atomic.Uint64) sqlStmtCache {
	return sqlStmtCache{newNamedCache("sgq_", gen, func(name string, rest []byte, query string) *sqlStmt {
		return &sqlStmt{name: name, prepare: "PREPARE " + name + string(rest), query: query}
	})}
}

// get returns the statement for rest (PREPARE's text after the name) and
// query (its statement after AS), creating it on first use.
func (sc sqlStmtCache) get(rest, query string) *sqlStmt {
	return sc.namedCache.get([]byte(rest), query)
}

// sqlPrep is what a simple Query does with SQL-level prepared statements.
type sqlPrep struct {
	// prepare: the query is one PREPARE of client name prepName, with
	// rest the text after the name and query the statement after AS.
	prepare         bool
	prepName        string
	rest, queryText string
	// dealloc: the query is one DEALLOCATE [PREPARE] of name prepName.
	dealloc bool
	// execs are the query's EXECUTE statements, in order.
	execs []sqlExec
}

// sqlExec is one EXECUTE: the client's statement name, where that name
// stands in the query text, and its arguments as text (nil where an
// argument is not a constant).
type sqlExec struct {
	name       string
	start, end int
	args       [][]byte
	constant   bool
}

// parseSQLPrep finds PREPARE, EXECUTE and DEALLOCATE in sql; nil when
// there are none, or when sql does not parse (the server then answers).
func parseSQLPrep(sql string) *sqlPrep {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil
	}
	scan, err := pg_query.Scan(sql)
	if err != nil {
		return nil
	}
	toks := scan.Tokens
	// first returns the index of the first token of the statement at loc.
	first := func(loc int32) int {
		for i, t := range toks {
			if t.Start >= loc {
				return i
			}
		}
		return len(toks)
	}
	var sp sqlPrep
	found := false
	for _, raw := range tree.Stmts {
		end := len(sql)
		if raw.StmtLen > 0 {
			end = int(raw.StmtLocation + raw.StmtLen)
		}
		i := first(raw.StmtLocation)
		switch n := raw.Stmt.Node.(type) {
		case *pg_query.Node_PrepareStmt:
			if len(tree.Stmts) != 1 || i+1 >= len(toks) || toks[i].Token != pg_query.Token_PREPARE {
				return nil
			}
			nameEnd := int(toks[i+1].End)
			as := -1
			depth := 0
			for k := i + 2; k < len(toks) && int(toks[k].Start) < end; k++ {
				switch {
				case toks[k].Token == pg_query.Token_ASCII_40:
					depth++
				case toks[k].Token == pg_query.Token_ASCII_41:
					depth--
				case toks[k].Token == pg_query.Token_AS && depth == 0:
					as = int(toks[k].End)
				}
				if as >= 0 {
					break
				}
			}
			if as < 0 {
				return nil
			}
			sp.prepare, sp.prepName = true, n.PrepareStmt.Name
			sp.rest = strings.TrimRight(sql[nameEnd:end], "; \t\r\n")
			sp.queryText = strings.TrimSpace(sql[as:end])
			found = true
		case *pg_query.Node_ExecuteStmt:
			if i+1 >= len(toks) || toks[i].Token != pg_query.Token_EXECUTE {
				return nil
			}
			ex := sqlExec{name: n.ExecuteStmt.Name, start: int(toks[i+1].Start), end: int(toks[i+1].End), constant: true}
			for _, a := range n.ExecuteStmt.Params {
				v, ok := constText(a)
				ex.args = append(ex.args, v)
				ex.constant = ex.constant && ok
			}
			sp.execs = append(sp.execs, ex)
			found = true
		case *pg_query.Node_DeallocateStmt:
			if !n.DeallocateStmt.Isall && len(tree.Stmts) == 1 {
				sp.dealloc, sp.prepName = true, n.DeallocateStmt.Name
				found = true
			}
		}
	}
	if !found {
		return nil
	}
	return &sp
}

// constText returns a constant argument as text ('5', 5, '5'::int).
func constText(n *pg_query.Node) ([]byte, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		n = tc.Arg
	}
	c := n.GetAConst()
	if c == nil || c.Isnull {
		return nil, c != nil
	}
	switch {
	case c.GetIval() != nil:
		return []byte(strconv.FormatInt(int64(c.GetIval().Ival), 10)), true
	case c.GetFval() != nil:
		return []byte(c.GetFval().Fval), true
	case c.GetSval() != nil:
		return []byte(c.GetSval().Sval), true
	case c.GetBoolval() != nil:
		return []byte(strconv.FormatBool(c.GetBoolval().Boolval)), true
	}
	return nil, false
}

// hasPrepareKeyword is the cheap pre-check for parseSQLPrep: does a
// statement of sql start with PREPARE, EXECUTE or DEALLOCATE?
func hasPrepareKeyword(sql []byte) bool {
	i := 0
	for {
		i = skipSpaceAndComments(sql, i)
		if hasKeyword(sql[i:], "prepare") || hasKeyword(sql[i:], "execute") || hasKeyword(sql[i:], "deallocate") {
			return true
		}
		j := bytes.IndexByte(sql[i:], ';')
		if j < 0 {
			return false
		}
		i += j + 1
	}
}

// rewriteExecs returns sql with the names of the client's SQL statements
// replaced by their proxy-wide names, and those statements.
func (c *client) rewriteExecs(sql string, sp *sqlPrep) (string, []*sqlStmt) {
	var b strings.Builder
	var used []*sqlStmt
	last := 0
	for _, ex := range sp.execs {
		st := c.sqlStmts[ex.name]
		if st == nil {
			continue // the server answers 26000 for it, as PostgreSQL
		}
		b.WriteString(sql[last:ex.start])
		b.WriteString(st.name)
		last = ex.end
		used = append(used, st)
	}
	if used == nil {
		return sql, nil
	}
	b.WriteString(sql[last:])
	return b.String(), used
}

// ensurePrepared prepares the statements on s that it lacks.
func (c *client) ensurePrepared(s *pool.Server, sts []*sqlStmt) error {
	for _, st := range sts {
		if _, ok := s.Prepared[st.name]; ok {
			continue
		}
		_, _, e, err := serverQuery(s, st.prepare, c.toClient)
		if err != nil {
			return err
		}
		if e != nil {
			// The server's error, fields and all, but not a position in
			// the proxy's own PREPARE text.
			f := *e
			f.Position = ""
			return &f
		}
		s.Prepared[st.name] = struct{}{}
	}
	return nil
}

// deallocate forgets the client's prepared statement name, SQL-level or
// protocol-level (DEALLOCATE serves both); false if it has none.
func (c *client) deallocate(name string) bool {
	_, proto := c.stmts[name]
	_, sharded := c.sstmts[name]
	sql := c.sqlStmts[name] != nil
	delete(c.stmts, name)
	delete(c.sstmts, name)
	delete(c.sqlStmts, name)
	return proto || sharded || sql
}

// duplicateSQLName reports whether name is taken by one of the client's
// prepared statements (SQL-level and protocol-level share one namespace).
func (c *client) duplicateSQLName(name string) bool {
	_, proto := c.stmts[name]
	_, sharded := c.sstmts[name]
	return proto || sharded && name != "" || c.sqlStmts[name] != nil
}

// sqlPrepared serves a transaction-mode simple Query on a one-shard
// database that uses SQL-level prepared statements. It reports whether it
// answered; otherwise sql (maybe rewritten) and what the Query creates are
// for the caller to send.
func (c *client) sqlPrepared(sql string, sp *sqlPrep) (done bool, out string, created *sqlCreate, err error) {
	switch {
	case c.tx == 'E':
		return false, sql, nil, nil // the server answers 25P02
	case sp.dealloc:
		if !c.deallocate(sp.prepName) {
			return false, sql, nil, nil // the server answers 26000
		}
		c.w.Write(wire.AppendCommandComplete(nil, "DEALLOCATE"))
		c.w.Write(wire.AppendReadyForQuery(c.w.AvailableBuffer(), c.tx))
		return true, "", nil, c.flushClient()
	case sp.prepare:
		if c.duplicateSQLName(sp.prepName) {
			return false, "", nil, duplicateStatement([]byte(sp.prepName))
		}
		st := c.l.sqlStmts.get(sp.rest, sp.queryText)
		return false, st.prepare, &sqlCreate{client: sp.prepName, st: st}, nil
	}
	out, _ = c.rewriteExecs(sql, sp)
	return false, out, nil, nil
}

// sqlCreate is a PREPARE on its way to a server: the client's name for the
// statement once the server accepted it.
type sqlCreate struct {
	client string
	st     *sqlStmt
}

// prepareExecs makes sure c.server has every SQL statement the query's
// EXECUTEs use.
func (c *client) prepareExecs(sp *sqlPrep) error {
	if sp == nil || len(sp.execs) == 0 {
		return nil
	}
	var sts []*sqlStmt
	for _, ex := range sp.execs {
		if st := c.sqlStmts[ex.name]; st != nil {
			sts = append(sts, st)
		}
	}
	return c.ensurePrepared(c.server, sts)
}

// shardedSQLPrep plans a sharded transaction-mode simple Query that uses
// SQL-level prepared statements; nil means the query is planned as usual.
func (c *client) shardedSQLPrep(sql string, sp *sqlPrep) (*routePlan, error) {
	switch {
	case sp.dealloc:
		if !c.deallocate(sp.prepName) {
			return nil, wire.Errorf(wire.InvalidSQLStatementName, "prepared statement \"%s\" does not exist", sp.prepName)
		}
		return &routePlan{Plan: executor.Plan{Kind: executor.RouteLocal}, localTag: "DEALLOCATE"}, nil
	case sp.prepare:
		if c.duplicateSQLName(sp.prepName) {
			return nil, duplicateStatement([]byte(sp.prepName))
		}
		st := c.l.sqlStmts.get(sp.rest, sp.queryText)
		// Schemas are the same on every shard: one validates it.
		all := make([]int, c.xs.Len())
		for i := range all {
			all[i] = i
		}
		return &routePlan{Plan: executor.Plan{Kind: executor.RouteOne, Shards: []int{c.pickOf(all)}, SQL: st.prepare},
			create: &sqlCreate{client: sp.prepName, st: st}}, nil
	}
	for _, ex := range sp.execs {
		if c.sqlStmts[ex.name] == nil {
			return nil, wire.Errorf(wire.InvalidSQLStatementName, "prepared statement \"%s\" does not exist", ex.name)
		}
	}
	if len(sp.execs) != 1 {
		return nil, wire.Errorf(wire.FeatureNotSupported, "EXECUTE on a sharded database must be the only statement of its query")
	}
	ex := sp.execs[0]
	st := c.sqlStmts[ex.name]
	if !ex.constant {
		return nil, wire.Errorf(wire.FeatureNotSupported,
			"EXECUTE of %q needs constant arguments on a sharded database, to route it by its sharding key", ex.name)
	}
	p, err := c.rt.planParams(nil, st.query, ex.args, nil, c)
	if err != nil {
		return nil, err
	}
	if p.Kind != executor.RouteOne || len(p.Shards) != 1 {
		return nil, &wire.Error{Severity: "ERROR", Code: wire.FeatureNotSupported,
			Message: fmt.Sprintf("EXECUTE of %q would run on several shards", ex.name),
			Hint:    "Use the extended query protocol (Parse/Bind/Execute) for statements that span shards."}
	}
	p.SQL, _ = c.rewriteExecs(sql, sp)
	p.execs = []*sqlStmt{st}
	return p, nil
}

// rewriteSQLText rewrites the text of a Parse (transaction mode) that is
// one EXECUTE or DEALLOCATE of the client's prepared statement to use the
// proxy-wide name; nil when there is nothing to rewrite. The server gets
// the named statement, if it lacks it, from injectNeeds.
func (c *client) rewriteSQLText(text []byte) ([]byte, *wire.Error) {
	if !hasPrepareKeyword(text) {
		return nil, nil
	}
	sql := string(text)
	sp := parseSQLPrep(sql)
	if sp == nil {
		return nil, nil
	}
	if sp.prepare {
		// A name in use fails the Execute (rewriteExecute), as in
		// PostgreSQL.
		st := c.l.sqlStmts.get(sp.rest, sp.queryText)
		if c.sqlPending == nil {
			c.sqlPending = map[string]string{}
		}
		c.sqlPending[st.name] = sp.prepName
		return []byte(st.prepare), nil
	}
	if sp.dealloc {
		var proxy string
		if st := c.stmts[sp.prepName]; st != nil {
			proxy = st.name
		} else if st := c.sqlStmts[sp.prepName]; st != nil {
			proxy = st.name
		} else {
			return nil, nil
		}
		// The client's name goes when the DEALLOCATE runs (see
		// deallocated); DEALLOCATE is not transactional.
		if c.sqlPending == nil {
			c.sqlPending = map[string]string{}
		}
		c.sqlPending[proxy] = sp.prepName
		return []byte("DEALLOCATE " + proxy), nil
	}
	if len(sp.execs) != 1 {
		return nil, nil
	}
	out, used := c.rewriteExecs(sql, sp)
	if used == nil {
		return nil, nil
	}
	return []byte(out), nil
}

// proxyNames lists the proxy-wide statement names (sg_…, sgq_…) that an
// EXECUTE or DEALLOCATE in sql names.
func proxyNames(sql string) []string {
	sp := parseSQLPrep(sql)
	if sp == nil {
		return nil
	}
	var names []string
	if sp.dealloc && (strings.HasPrefix(sp.prepName, "sg_") || strings.HasPrefix(sp.prepName, "sgq_")) {
		names = append(names, sp.prepName)
	}
	for _, ex := range sp.execs {
		if strings.HasPrefix(ex.name, "sgq_") {
			names = append(names, ex.name)
		}
	}
	return names
}

// injectNeeds queues, ahead of the client's message, what makes the
// server hold the proxy-wide statements names: a protocol-level
// statement's Parse, or a SQL-level statement's PREPARE run through a
// statement and portal of the proxy's own, whose answers the client never
// sees.
func (c *client) injectNeeds(names []string) {
	s := c.server
	for _, name := range names {
		if _, ok := s.Prepared[name]; ok {
			continue
		}
		if st := c.l.stmts.byName(name); st != nil {
			if !c.pendingParse(st) {
				c.out = append(c.out, st.parse...)
				c.q = append(c.queued(), req{kind: reqParse, injected: true, confirm: st})
			}
			continue
		}
		st := c.l.sqlStmts.byName(name)
		if st == nil {
			continue // not the proxy's: the server answers 26000
		}
		c.injectSQL(st.prepare, req{kind: reqExecute, injected: true, create: &sqlCreate{st: st}})
	}
}

// injectSQL queues sql, run through a statement and portal of the proxy's
// own whose answers the client never sees; exec is the request for its
// Execute.
func (c *client) injectSQL(sql string, exec req) {
	const inj = "shardgate_inject"
	start := len(c.out)
	c.out = append(c.out, 'P', 0, 0, 0, 0)
	c.out = append(c.out, inj+"\x00"...)
	c.out = append(c.out, sql...)
	c.out = append(c.out, 0, 0, 0)
	c.out = wire.FinishMessage(c.out, start)
	start = len(c.out)
	c.out = append(c.out, 'B', 0, 0, 0, 0)
	c.out = append(c.out, inj+"\x00"+inj+"\x00"...)
	c.out = append(c.out, 0, 0, 0, 0, 0, 0)
	c.out = wire.FinishMessage(c.out, start)
	start = len(c.out)
	c.out = append(c.out, 'E', 0, 0, 0, 0)
	c.out = append(c.out, inj+"\x00"...)
	c.out = append(c.out, 0, 0, 0, 0)
	c.out = wire.FinishMessage(c.out, start)
	for _, kind := range []byte{'S', 'P'} {
		start = len(c.out)
		c.out = append(c.out, 'C', 0, 0, 0, 0, kind)
		c.out = append(c.out, inj+"\x00"...)
		c.out = wire.FinishMessage(c.out, start)
	}
	c.q = append(c.queued(), req{kind: reqParse, injected: true}, req{kind: reqBind, injected: true}, exec,
		req{kind: reqClose, injected: true}, req{kind: reqClose, injected: true})
}

// prepareOnExecute readies the server for an Execute of a rewritten
// PREPARE of proxy-wide name (stmtEffect.prepares): a server that has the
// statement from another client drops it first, so that the PREPARE runs
// (and can fail) as the client's own. It returns what the Execute creates.
func (c *client) prepareOnExecute(name string) *sqlCreate {
	st := c.l.sqlStmts.byName(name)
	if st == nil {
		return nil
	}
	if _, ok := c.server.Prepared[name]; ok {
		c.injectSQL("DEALLOCATE "+name, req{kind: reqExecute, injected: true,
			ops: []setOp{{kind: opDeallocate, name: name}}})
	}
	return &sqlCreate{client: c.sqlPending[name], st: st}
}

// deallocated records that a rewritten DEALLOCATE of proxy-wide name ran:
// the client's name for it is gone.
func (c *client) deallocated(proxy string) {
	name, ok := c.sqlPending[proxy]
	if !ok {
		return
	}
	delete(c.sqlPending, proxy)
	if st := c.stmts[name]; st != nil && st.name == proxy {
		delete(c.stmts, name)
	}
	if st := c.sqlStmts[name]; st != nil && st.name == proxy {
		delete(c.sqlStmts, name)
	}
}

// rebind brings a statement whose text names SQL-level statements (orig,
// the client's text) up to the client's names as they are now: an EXECUTE
// parsed before its statement was deallocated or prepared again must run
// what the name means at execution, as in PostgreSQL. It returns the text
// to use, or nil when the rewrite made at Parse still holds.
func (c *client) rebind(orig, current []byte) []byte {
	sp := parseSQLPrep(string(orig))
	if sp == nil || sp.prepare {
		return nil
	}
	nt, _ := c.rewriteSQLText(orig)
	if nt == nil {
		nt = orig
	}
	if bytes.Equal(nt, current) {
		return nil
	}
	return nt
}
