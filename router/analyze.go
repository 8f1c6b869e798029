package router

import (
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// analyze parses sql and analyzes each statement in it.
func (r *Router) analyze(sql string, standard bool) (*Statement, error) {
	hint, hintErr := r.commentHint(sql)
	tree, err := r.parse(sql, standard)
	if err != nil {
		if hint != nil && hintErr == nil {
			// The proxy's parser may lag the server's grammar; a statement
			// the client routes itself need not be understood.
			s := &Statement{r: r, sql: sql}
			if shard, herr := hint.resolve(s); herr == nil {
				s.static = r.direct(shard, true)
				return s, nil
			}
		}
		return nil, err
	}
	if hintErr != nil {
		return nil, hintErr
	}
	s := &Statement{r: r, sql: sql, version: tree.Version}
	for _, raw := range tree.Stmts {
		p, err := r.analyzeStmt(raw.Stmt, false, tree.Version)
		if err != nil && len(tree.Stmts) > 1 {
			// One statement of several that the analysis refuses: the
			// text runs a statement at a time (routeParts), so that the
			// statements before it answer first, and the proxy's own
			// handling of it (SQL-level PREPARE) applies.
			p, err = &part{unroutable: err}, nil
		}
		if err != nil {
			return nil, err
		}
		if p.pathDependent {
			if p.onPath, err = r.analyzeStmt(raw.Stmt, true, tree.Version); err != nil {
				return nil, err
			}
		}
		p.node = raw.Stmt
		p.text, p.at = stmtText(sql, raw)
		p.copyProbe(sql)
		p.finishCopyOut()
		if p.onPath != nil {
			p.onPath.node, p.onPath.text, p.onPath.at = p.node, p.text, p.at
			p.onPath.copyProbe(sql)
			p.onPath.finishCopyOut()
		}
		s.parts = append(s.parts, p)
	}
	if hint != nil {
		shard, err := hint.resolve(s)
		if err != nil {
			return nil, err
		}
		plan, err := s.hinted(shard)
		if err != nil {
			return nil, err
		}
		s.hint = &shard
		if !s.updatesKey() {
			s.static = plan
		}
		return s, nil
	}
	if len(s.parts) == 0 {
		s.static = r.sharedPlan(Any, false) // an empty query
	}
	return s, nil
}

// analyzeStmt analyzes one statement. path says that unqualified table
// names resolve to the sharded schema first on the session's search_path.
func (r *Router) analyzeStmt(n *pg_query.Node, path bool, version int32) (*part, error) {
	a := &analyzer{r: r, path: path, version: version}
	p := &part{}
	if tempRelation(n) != nil {
		// Only a hint that routes the statement, and every statement
		// that uses the table after it, to one shard can make it work.
		a.fail(unsupported(hintTemp, "temporary tables are not supported on sharded databases"))
	}
	switch {
	case n.GetSelectStmt() != nil:
		sel := n.GetSelectStmt()
		a.rowScope = true // its rows are the shards' rows together
		counted := countOver(sel)
		if counted != nil {
			a.countSub = counted.sub
		}
		sc := a.query(sel, "")
		a.group()
		p.write = len(sel.LockingClause) > 0 || callsWriteFunction(sel)
		switch {
		case sel.IntoClause != nil:
			p.write, p.ddl = true, true
			a.materialize("SELECT INTO")
		case len(a.groups) > 0 && counted != nil:
			p.merge, p.mergeErr = buildCountMerge(counted, version, a.topKey(a.countScope, counted.sub.GetSelectStmt()))
		case len(a.groups) > 0 && a.branches > 0:
			p.merge, p.mergeErr = unionMerge(sel, version)
		case len(a.groups) > 0:
			p.merge, p.mergeErr = buildMerge(sel, version, a.topKey(sc, sel))
		}
	case n.GetInsertStmt() != nil:
		p.write = true
		p.insert = a.insert(n.GetInsertStmt(), "")
		p.insertSelect, p.source = a.insel, a.inselSource
	case n.GetUpdateStmt() != nil:
		p.write = true
		a.update(n.GetUpdateStmt(), "")
	case n.GetDeleteStmt() != nil:
		p.write = true
		a.delete(n.GetDeleteStmt(), "")
	case n.GetMergeStmt() != nil:
		p.write = true
		a.merge(n.GetMergeStmt(), "")
	case n.GetCopyStmt() != nil:
		a.copy(p, n.GetCopyStmt())
	case n.GetExplainStmt() != nil:
		return r.explain(n.GetExplainStmt(), path, version)
	case n.GetTransactionStmt() != nil:
		p.kind = Transaction
	case isSessionStmt(n):
		p.kind = Session
	case n.GetPrepareStmt() != nil, n.GetExecuteStmt() != nil:
		return nil, unsupported("Use the extended query protocol (Parse/Bind/Execute) to prepare statements.",
			"SQL-level PREPARE and EXECUTE are not supported by the sharding proxy")
	case n.GetDoStmt() != nil, n.GetCallStmt() != nil:
		what := "CALL"
		if n.GetDoStmt() != nil {
			what = "DO"
		}
		p.write = true
		a.fail(unsupported("Route it with /* shard: N */ or SET shardgate.shard, once per shard if needed.",
			"%s runs arbitrary code, which the proxy cannot route", what))
	case n.GetCreateTableAsStmt() != nil:
		p.write, p.ddl = true, true
		a.stmt(n.GetCreateTableAsStmt().Query, "CREATE TABLE AS")
		a.group()
		a.materialize("CREATE TABLE AS")
	case n.GetDeclareCursorStmt() != nil:
		a.stmt(n.GetDeclareCursorStmt().Query, "")
		p.fanout = unsupported(hintOneShard, "a cursor over sharded tables must stay on one shard")
	default:
		p.write = true
		a.ddl(p, n)
	}
	if err := a.finishPart(p); err != nil {
		return nil, err
	}
	a.probe(p, n)
	if !path && len(r.schemas) > 0 && (a.unqualified() || p.source != nil && p.source.pathDependent) {
		p.pathDependent = true
	}
	return p, nil
}

// topKey returns a function that reports whether an expression is the
// sharding key of a sharded table of scope sc, the top level of the
// statement, that no outer join extends with NULLs (the rows an outer join
// adds carry a NULL key on every shard); nil when there is no such scope.
func (a *analyzer) topKey(sc *scope, sel *pg_query.SelectStmt) func(*pg_query.Node) bool {
	if sc == nil {
		return nil
	}
	nullable := map[*pg_query.RangeVar]bool{}
	for _, n := range sel.FromClause {
		nullableTables(n, false, nullable)
	}
	return func(n *pg_query.Node) bool {
		in := sc.keyColumn(n)
		return in != nil && in.class == shardedTable && in.nested == "" && in.sc == sc && !nullable[in.rv]
	}
}

// nullableTables adds to set the tables of a FROM item that an outer join
// may extend with NULLs (nullable: the item is on such a side).
func nullableTables(n *pg_query.Node, nullable bool, set map[*pg_query.RangeVar]bool) {
	switch {
	case n.GetRangeVar() != nil:
		if nullable {
			set[n.GetRangeVar()] = true
		}
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		l, r := nullable, nullable
		switch j.Jointype {
		case pg_query.JoinType_JOIN_LEFT:
			r = true
		case pg_query.JoinType_JOIN_RIGHT:
			l = true
		case pg_query.JoinType_JOIN_FULL:
			l, r = true, true
		}
		nullableTables(j.Larg, l, set)
		nullableTables(j.Rarg, r, set)
	}
}

// tempRelation returns the temporary table, view or sequence that n
// creates, or nil. Such a relation lives in the session of one server,
// while a sharded client runs its statements on a server of each shard
// it needs.
func tempRelation(n *pg_query.Node) *pg_query.RangeVar {
	var rv *pg_query.RangeVar
	switch {
	case n.GetCreateStmt() != nil:
		rv = n.GetCreateStmt().Relation
	case n.GetCreateTableAsStmt() != nil:
		if into := n.GetCreateTableAsStmt().Into; into != nil {
			rv = into.Rel
		}
	case n.GetSelectStmt() != nil:
		if into := n.GetSelectStmt().IntoClause; into != nil {
			rv = into.Rel
		}
	case n.GetViewStmt() != nil:
		rv = n.GetViewStmt().View
	case n.GetCreateSeqStmt() != nil:
		rv = n.GetCreateSeqStmt().Sequence
	}
	if rv == nil {
		return nil
	}
	if rv.Relpersistence == "t" || rv.Schemaname == "pg_temp" || strings.HasPrefix(rv.Schemaname, "pg_temp_") {
		return rv
	}
	return nil
}

// writeFunctions change state although a SELECT calls them: sequences,
// advisory locks, notifications, transaction ids. A SELECT calling one
// must run on the primary.
var writeFunctions = map[string]bool{
	"nextval": true, "setval": true, "currval": true, "lastval": true,
	"pg_advisory_lock": true, "pg_advisory_lock_shared": true, "pg_advisory_xact_lock": true,
	"pg_advisory_xact_lock_shared": true, "pg_try_advisory_lock": true, "pg_try_advisory_lock_shared": true,
	"pg_try_advisory_xact_lock": true, "pg_try_advisory_xact_lock_shared": true, "pg_advisory_unlock": true,
	"pg_advisory_unlock_shared": true, "pg_advisory_unlock_all": true,
	"pg_notify": true, "txid_current": true, "pg_current_xact_id": true,
}

// callsWriteFunction reports whether sel calls one of writeFunctions.
func callsWriteFunction(sel *pg_query.SelectStmt) bool {
	found := false
	walk(sel, func(n *pg_query.Node) bool {
		if f := n.GetFuncCall(); f != nil && writeFunctions[funcName(f)] {
			found = true
		}
		return !found
	})
	return found
}

// isSessionStmt reports statements that read or change session state.
func isSessionStmt(n *pg_query.Node) bool {
	switch n.Node.(type) {
	case *pg_query.Node_VariableSetStmt, *pg_query.Node_VariableShowStmt, *pg_query.Node_DiscardStmt,
		*pg_query.Node_DeallocateStmt, *pg_query.Node_ListenStmt, *pg_query.Node_UnlistenStmt,
		*pg_query.Node_NotifyStmt, *pg_query.Node_FetchStmt, *pg_query.Node_ClosePortalStmt,
		*pg_query.Node_ConstraintsSetStmt, *pg_query.Node_LoadStmt:
		return true
	}
	return false
}

// unqualified reports whether a search_path schema could change where the
// statement goes: it names a user table without a schema.
func (a *analyzer) unqualified() bool {
	for _, in := range a.insts {
		if in.rv.Schemaname == "" && in.class != systemTable {
			return true
		}
	}
	return a.ddlUnqualified
}

// materialize rejects storing the result of a query over sharded tables:
// each shard would store its own part.
func (a *analyzer) materialize(what string) {
	if len(a.groups) > 0 {
		a.fail(unsupported(hintOneShard, "%s over sharded table %s would store a different part of the result on each shard", what, a.groups[0].tables[0]))
	}
}

// finishPart derives the part's route from what the analysis found.
func (a *analyzer) finishPart(p *part) error {
	a.group()
	for _, w := range a.written {
		if w.class != omniTable && w.class != systemTable {
			continue
		}
		p.omniWrite = w.name
		if a.unknown != nil {
			// The table may not exist, or be sharded: the shards parse the
			// statement for PostgreSQL's error (probe.go).
			continue
		}
		for _, g := range a.groups {
			return unsupported("Write omni tables in statements of their own.",
				"statement writes omni table %s, which must change on every shard, and reads sharded table %s", w.name, g.tables[0])
		}
	}
	if a.hard != nil {
		return a.hard
	}
	if len(a.written) > 0 {
		p.write = true // also a SELECT with a data-modifying WITH query
	}
	p.unroutable = a.err
	p.groups = a.groups
	p.keySets = a.keySets
	for _, g := range a.groups {
		if g.nested != "" {
			p.oneShard = unsupported(hintOneShard, "%s over sharded table %s cannot run across shards", g.nested, g.tables[0])
			break
		}
	}
	if p.oneShard == nil && a.outerJoin != nil && len(a.groups) > 0 {
		p.oneShard = a.outerJoin
	}
	if p.oneShard == nil && a.unionErr != nil && len(a.groups) > 0 {
		p.oneShard = a.unionErr
	}
	// Sharded tables must be co-located — within each query of a
	// top-level UNION ALL, whose queries' rows only add up.
	for i, g := range a.groups {
		if p.oneShard != nil {
			break
		}
		for _, h := range a.groups[i+1:] {
			if g.branch() == h.branch() {
				p.oneShard = unsupported(hintJoin, "sharded tables %s and %s are not joined on their sharding keys, so their rows cannot be joined across shards",
					g.tables[0], h.tables[0])
				break
			}
		}
	}
	if p.kind == 0 && len(a.groups) == 0 && p.insert == nil && p.copyKey == nil && p.insertSelect == nil {
		switch {
		case p.omniWrite != "":
			p.kind = OmniWrite
		case p.ddl:
			p.kind = All
		case len(a.insts) > 0:
			p.kind = OmniRead
		default:
			p.kind = Any
		}
	}
	p.hintKey = a.commonKey()
	p.pars = p.insert != nil || p.source != nil && p.source.pars
	for _, g := range a.groups {
		p.pars = p.pars || (g.cond != nil && g.cond.pars)
	}
	for _, k := range a.keySets {
		p.pars = p.pars || k.value.kind == opParam
	}
	return nil
}

// commonKey returns the rule of the statement's sharded tables when they
// all hash alike, to route a sharding_key hint; nil when they disagree or
// there are none.
func (a *analyzer) commonKey() *keyFunc {
	var k *keyFunc
	for _, in := range a.insts {
		if in.key == nil {
			continue
		}
		if k != nil && k.class != in.key.class {
			return nil
		}
		k = in.key
	}
	return k
}

// update analyzes UPDATE: its target and FROM tables form one scope.
func (a *analyzer) update(u *pg_query.UpdateStmt, nested string) {
	defer func(n int) { a.ctes = a.ctes[:n] }(len(a.ctes))
	a.with(u.WithClause, nil)
	sc := a.enter(nested)
	defer a.leave(sc)
	target := a.addTable(sc, u.Relation)
	for _, item := range u.FromClause {
		a.from(sc, item, false)
	}
	sc.restrict = append(sc.restrict, u.WhereClause)
	sc.exprs = append(sc.exprs, u.WhereClause)
	sc.exprs = append(sc.exprs, u.TargetList...)
	a.exprs(nested, u.WhereClause)
	a.exprs(nested, u.TargetList...)
	a.exprs(nested, u.ReturningList...)
	a.finish(sc)
	a.write(target)
	if target != nil && target.class == shardedTable {
		a.keyAssignments(target, u.TargetList, nested)
	}
}

// keyAssignments checks the SET list of an UPDATE (or ON CONFLICT DO
// UPDATE) of a sharded table: a row cannot move to another shard.
func (a *analyzer) keyAssignments(target *instance, set []*pg_query.Node, nested string) {
	for _, n := range set {
		rt := n.GetResTarget()
		if rt == nil || rt.Name != target.key.column {
			continue
		}
		o, ok := scalarOperand(target.key, rt.Val)
		if ok && o.kind != opAll && nested == "" {
			a.keySets = append(a.keySets, keyAssign{key: target.key, value: o})
			continue
		}
		if f := columnRef(rt.Val); len(f) == 2 && f[0] == "excluded" && f[1] == target.key.column {
			continue // ON CONFLICT … SET id = EXCLUDED.id keeps the key
		}
		a.hardFail(unsupported("Delete the row and insert it with its new key, in one transaction.",
			"cannot update sharding key column %q of table %s: the row could have to move to another shard", target.key.column, target.name))
	}
}

// delete analyzes DELETE: its target and USING tables form one scope.
func (a *analyzer) delete(d *pg_query.DeleteStmt, nested string) {
	defer func(n int) { a.ctes = a.ctes[:n] }(len(a.ctes))
	a.with(d.WithClause, nil)
	sc := a.enter(nested)
	defer a.leave(sc)
	target := a.addTable(sc, d.Relation)
	for _, item := range d.UsingClause {
		a.from(sc, item, false)
	}
	sc.restrict = append(sc.restrict, d.WhereClause)
	sc.exprs = append(sc.exprs, d.WhereClause)
	a.exprs(nested, d.WhereClause)
	a.exprs(nested, d.ReturningList...)
	a.finish(sc)
	a.write(target)
}

// merge analyzes MERGE. Its WHEN NOT MATCHED clauses insert rows and its
// NOT MATCHED BY SOURCE clauses touch rows the join condition does not
// constrain, so MERGE into a sharded table is routed only by a hint.
func (a *analyzer) merge(m *pg_query.MergeStmt, nested string) {
	defer func(n int) { a.ctes = a.ctes[:n] }(len(a.ctes))
	a.with(m.WithClause, nil)
	sc := a.enter(nested)
	defer a.leave(sc)
	target := a.addTable(sc, m.Relation)
	a.from(sc, m.SourceRelation, false)
	sc.joins = append(sc.joins, m.JoinCondition)
	sc.exprs = append(sc.exprs, m.JoinCondition)
	a.exprs(nested, m.JoinCondition)
	a.exprs(nested, m.MergeWhenClauses...)
	a.exprs(nested, m.ReturningList...)
	a.finish(sc)
	a.write(target)
	if target != nil && target.class == shardedTable {
		a.fail(unsupported(hintOneShard, "MERGE into sharded table %s cannot be routed by the proxy", target.name))
	}
}

func (a *analyzer) write(in *instance) {
	if in != nil {
		a.written = append(a.written, in)
	}
}

// hardFail records an error that no hint can override.
func (a *analyzer) hardFail(err error) {
	if a.hard == nil {
		a.hard = err
	}
}

// resolveUnknown decides whether the tables of a scope that only a
// column-only sharding rule could cover are sharded: by the catalog when
// the caller provides one (ColumnOrder), else by how the statement refers
// to them.
func (a *analyzer) resolveUnknown(sc *scope, known ...string) {
	for _, e := range sc.entries {
		in := e.inst
		if in == nil || in.class != unknownTable {
			continue
		}
		if a.r.catalog != nil {
			if cols := a.r.catalog(in.rv.Schemaname, in.rv.Relname); cols != nil {
				a.resolveColumns(in, cols)
				continue
			}
		}
		var refs []string
		refs = append(refs, known...)
		for _, x := range sc.exprs {
			walkExpr(x, func(n *pg_query.Node) bool {
				f := columnRef(n)
				switch {
				case len(f) == 1 && len(sc.entries) == 1:
					refs = append(refs, f[0])
				case len(f) >= 2 && f[len(f)-2] == e.name:
					refs = append(refs, f[len(f)-1])
				}
				return true
			}, nil)
		}
		a.resolveColumns(in, refs)
		if in.class == unknownTable {
			cols := make([]string, 0, len(a.r.columns))
			for c := range a.r.columns {
				cols = append(cols, c)
			}
			slices.Sort(cols)
			if a.unknown == nil {
				a.unknown = unsupported(fmt.Sprintf("List %s in omni_tables or sharded_tables, or filter it by its sharding column.", in.rv.Relname),
					"cannot tell whether table %s is sharded by column %s: the proxy does not know its columns", in.name, strings.Join(cols, " or "))
			}
			in.class = omniTable
		}
	}
}

// resolveColumns classifies an unknown table by columns it is known to
// have.
func (a *analyzer) resolveColumns(in *instance, cols []string) {
	for _, c := range cols {
		k := a.r.columns[c]
		if k == nil {
			continue
		}
		if in.key != nil && in.key != k {
			a.hardFail(unsupported("Name the table in sharded_tables.", "table %s has two sharding columns, %s and %s", in.name, in.key.column, c))
			return
		}
		in.class, in.key = shardedTable, k
	}
	if in.key == nil && a.r.catalog != nil && len(cols) > 0 && a.r.catalog(in.rv.Schemaname, in.rv.Relname) != nil {
		in.class = omniTable
	}
}

// ddl routes a utility statement: to the shard of a sharded schema it
// names, else to every shard.
func (a *analyzer) ddl(p *part, n *pg_query.Node) {
	p.ddl = true
	var ops []operand
	schema := func(s string) {
		if shard, ok := a.r.schemas[s]; ok {
			ops = append(ops, operand{kind: opShard, shard: shard})
		}
	}
	walk(n, func(x *pg_query.Node) bool {
		switch {
		case x.GetRangeVar() != nil:
			rv := x.GetRangeVar()
			if rv.Schemaname != "" {
				schema(rv.Schemaname)
			} else if !strings.HasPrefix(rv.Relname, "pg_") {
				a.ddlUnqualified = true
				if a.path {
					ops = append(ops, operand{kind: opPath})
				}
			}
		case x.GetCreateSchemaStmt() != nil:
			schema(x.GetCreateSchemaStmt().Schemaname)
		case x.GetDropStmt() != nil:
			d := x.GetDropStmt()
			for _, o := range d.Objects {
				if d.RemoveType == pg_query.ObjectType_OBJECT_SCHEMA {
					schema(str(o))
				} else if l := o.GetList(); l != nil && len(l.Items) >= 2 {
					schema(str(l.Items[len(l.Items)-2]))
				}
			}
		}
		return true
	})
	if len(ops) > 0 {
		c := leaf(nil, ops)
		a.groups = append(a.groups, &group{cond: c, tables: []string{"schema"}})
		p.ddlSchemas = true
		p.oneShard = unsupported("Change one sharded schema per statement.", "statement names sharded schemas on different shards")
	}
}

// explain routes EXPLAIN like its statement, to one shard: the plans of
// several shards cannot be merged. EXPLAIN ANALYZE runs the statement, so
// it must not need more than one shard.
func (r *Router) explain(e *pg_query.ExplainStmt, path bool, version int32) (*part, error) {
	inner, err := r.analyzeStmt(e.Query, path, version)
	if err != nil {
		return nil, err
	}
	p := &part{explain: inner}
	for _, o := range e.Options {
		if d := o.GetDefElem(); d != nil && d.Defname == "analyze" && (d.Arg == nil || defBool(d.Arg)) {
			p.explainAnalyze = true
		}
	}
	p.write = p.explainAnalyze && inner.write
	p.pathDependent = inner.pathDependent
	p.pars = inner.pars
	p.hintKey = inner.hintKey
	return p, nil
}

// defBool reads a boolean option value (true, on, 1).
func defBool(n *pg_query.Node) bool {
	switch v := n.Node.(type) {
	case *pg_query.Node_Boolean:
		return v.Boolean.Boolval
	case *pg_query.Node_Integer:
		return v.Integer.Ival != 0
	case *pg_query.Node_String_:
		s := strings.ToLower(v.String_.Sval)
		return s == "true" || s == "on" || s == "1"
	}
	return true
}

// stmtText is the text of one statement of sql and its byte offset in
// sql: its location and length in bytes, the whole rest of sql for the
// last one (StmtLen 0).
func stmtText(sql string, raw *pg_query.RawStmt) (string, int) {
	start := int(raw.StmtLocation)
	if start < 0 || start > len(sql) {
		return "", 0
	}
	end := len(sql)
	if raw.StmtLen > 0 && start+int(raw.StmtLen) <= len(sql) {
		end = start + int(raw.StmtLen)
	}
	return sql[start:end], start
}
