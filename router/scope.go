package router

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// instance is one reference to a table in a statement: FROM accounts a and
// JOIN accounts b are two instances of one table.
type instance struct {
	name   string // as written, for messages
	rv     *pg_query.RangeVar
	class  tableClass
	key    *keyFunc // shardedTable
	shard  int      // pinnedTable
	parent *instance
	// nested is "" for a table at the top level of the statement, else
	// what it sits in ("subquery", "WITH query", "UNION"): its rows feed an
	// expression the shards compute, so unless they are co-located with a
	// top-level table they must all be on one shard.
	nested string
	sc     *scope // nil for the target of INSERT or COPY, routed apart
}

// root returns the representative of i's co-location group.
func (i *instance) root() *instance {
	for i.parent != nil {
		if i.parent.parent != nil {
			i.parent = i.parent.parent
		}
		i = i.parent
	}
	return i
}

// entry is a name a column may be qualified with in one scope.
type entry struct {
	name   string    // the alias, or the table's name
	schema string    // the schema of an unaliased, qualified table
	inst   *instance // nil for subqueries, functions and WITH queries
	rows   bool      // a subquery whose rows are split between the shards (scope.rows)
}

// scope is one level of a query: the FROM items of a SELECT, or the target
// and FROM/USING items of an UPDATE or DELETE.
type scope struct {
	parent   *scope // the enclosing query, whose tables a subquery may name
	depth    int    // 1 for a statement's own scope and its WITH queries
	nested   string
	targets  []*pg_query.Node // the select list, for key IN (SELECT key …)
	entries  []entry
	restrict []*pg_query.Node // conditions every result row satisfies (WHERE, inner JOIN … ON)
	joins    []*pg_query.Node // conditions that only pair rows (outer JOIN … ON): equalities only
	exprs    []*pg_query.Node // every expression of the scope, for column references
	pairs    [][2]*instance   // equal sharding keys from JOIN … USING and NATURAL JOIN
	// rows: the scope's rows are the union of what each shard computes
	// from its own rows — a statement's top-level SELECT, and a subquery
	// in FROM or a WITH query read once there that only filters and
	// computes per row (rowSource): its sharded tables count as top-level.
	rows bool
	// fromSub: a row scope that is a subquery in FROM; its WHERE narrows
	// the rows the enclosing query reads (see group).
	fromSub bool
	// branch numbers the queries of a top-level UNION ALL (unionAll), from
	// 1, in the scopes of each and below; 0 elsewhere.
	branch int
}

// group is a set of co-located table instances: their sharding keys are
// equal in every result row, so the rows that join sit on one shard.
type group struct {
	cond   *cond    // the shards holding rows of the group; nil: every shard
	tables []string // for messages
	nested string
	root   *instance
	sc     *scope   // the outermost scope of the group's tables
	subs   []*scope // the subqueries in FROM (scope.fromSub) that hold its tables
}

// analyzer collects what routing one statement needs.
type analyzer struct {
	r       *Router
	version int32 // of the parse tree, for Deparse
	path    bool  // unqualified tables are in the sharded schema first on search_path
	insts   []*instance
	groups  []*group
	written []*instance
	keySets []keyAssign
	ctes    []string // names of WITH queries in scope, innermost last
	cur     *scope   // the scope being analyzed
	scopes  []*scope // finished scopes, outer ones after the inner ones they hold
	subs    map[*pg_query.SubLink]*scope
	grouped bool // group has run: the statement is fully analyzed
	// err is the first reason the statement cannot be routed by analysis; a
	// hint may still route it. hard is an error no hint overrides.
	err, hard error
	// unknown is the first table the analysis cannot place (probe.go).
	unknown error
	// ddlUnqualified is set when a utility statement names an object
	// without a schema.
	ddlUnqualified bool
	// insel is INSERT … SELECT into a sharded table at the top level, and
	// inselSource the analysis of its SELECT.
	insel       *InsertSelect
	inselSource *part
	// rowScope: the next query analyzed is a row scope (scope.rows);
	// rowCTEs are the WITH queries and rowSubs the subqueries in FROM
	// analyzed as such whose rows are split between the shards.
	rowScope, fromSub bool
	rowCTEs           map[string]bool
	// countSub is the subquery of SELECT count(*) FROM (subquery) s
	// (countOver), and countScope its scope.
	countSub   *pg_query.Node
	countScope *scope
	// branches counts the queries of a top-level UNION ALL (scope.branch);
	// unionErr refuses one of them that reads no sharded table when the
	// statement needs several shards.
	branches, leaf int // leaf: the branch of the next scope entered
	unionErr       error
	rowSubs        map[*pg_query.RangeSubselect]bool
	// byRV finds the instance of a table reference.
	byRV map[*pg_query.RangeVar]*instance
	// outerJoin is the refusal of an outer join that would repeat
	// replicated rows once per shard (see joinRows).
	outerJoin error
}

func (a *analyzer) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

// table makes an instance for a table reference, or returns nil for a
// reference to a WITH query.
func (a *analyzer) table(rv *pg_query.RangeVar, nested string) *instance {
	if rv.Schemaname == "" && slices.Contains(a.ctes, rv.Relname) {
		return nil
	}
	class, key, shard := a.r.classify(rv.Schemaname, rv.Relname, a.path)
	in := &instance{name: relName(rv), rv: rv, class: class, key: key, shard: shard, nested: nested}
	a.insts = append(a.insts, in)
	return in
}

// addTable adds a table reference to a scope.
func (a *analyzer) addTable(sc *scope, rv *pg_query.RangeVar) *instance {
	in := a.table(rv, sc.nested)
	if in != nil {
		in.sc = sc
		if a.byRV == nil {
			a.byRV = map[*pg_query.RangeVar]*instance{}
		}
		a.byRV[rv] = in
	}
	e := entry{name: rv.Relname, schema: rv.Schemaname, inst: in}
	if rv.Alias != nil {
		e.name, e.schema = rv.Alias.Aliasname, ""
	}
	sc.entries = append(sc.entries, e)
	return in
}

// with analyzes the queries of a WITH clause and brings their names into
// scope; the caller pops them with a.ctes = a.ctes[:n]. sel is the query
// the clause belongs to, when it is a row scope: a WITH query that is a
// rowSource and that sel reads once, in its own FROM, is analyzed as part
// of it (its tables top-level), as if written there as a subquery.
func (a *analyzer) with(wc *pg_query.WithClause, sel *pg_query.SelectStmt) {
	if wc == nil {
		return
	}
	for _, n := range wc.Ctes {
		if c := n.GetCommonTableExpr(); c != nil {
			a.ctes = append(a.ctes, c.Ctename)
		}
	}
	for _, n := range wc.Ctes {
		c := n.GetCommonTableExpr()
		if c == nil {
			continue
		}
		if sel != nil && !wc.Recursive && rowSource(c.Ctequery.GetSelectStmt()) && readOnceInFrom(sel, c.Ctename) {
			a.rowScope = true
			if inner := a.stmt(c.Ctequery, ""); inner != nil && shardedRows(inner) {
				if a.rowCTEs == nil {
					a.rowCTEs = map[string]bool{}
				}
				a.rowCTEs[c.Ctename] = true
			}
			continue
		}
		a.stmt(c.Ctequery, "WITH query")
	}
}

// rowSource reports whether sel, a subquery in FROM or a WITH query, only
// filters and computes per row: a SELECT over FROM items without grouping,
// aggregates, window functions, DISTINCT, LIMIT or OFFSET. Over sharded
// tables, each shard then computes exactly its own rows of it.
func rowSource(sel *pg_query.SelectStmt) bool {
	if sel == nil || sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED ||
		len(sel.FromClause) == 0 || len(sel.ValuesLists) > 0 || sel.IntoClause != nil ||
		len(sel.GroupClause) > 0 || sel.HavingClause != nil || len(sel.DistinctClause) > 0 ||
		sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.WindowClause) > 0 {
		return false
	}
	perRow := true
	for _, list := range [][]*pg_query.Node{sel.TargetList, {sel.WhereClause}, sel.SortClause} {
		for _, n := range list {
			walkExpr(n, func(n *pg_query.Node) bool {
				if fc := n.GetFuncCall(); fc != nil && (fc.Over != nil || isAggregate(fc)) {
					perRow = false
				}
				return perRow
			}, nil)
		}
	}
	return perRow
}

// unionAll reports whether sel is a UNION ALL (of UNION ALLs) of queries
// that are each a rowSource, with no locking of the whole and, but for
// the outermost (top), no ORDER BY, LIMIT or OFFSET: its rows are then the
// union of each shard's (sorted and cut by unionMerge). The outermost may
// be a UNION without ALL, over UNIONs with or without ALL: each shard
// deduplicates its rows of it, and the merge the shards' rows.
func unionAll(sel *pg_query.SelectStmt, top bool) bool {
	return sel != nil && unionTree(sel, top, sel.All)
}

// unionTree is unionAll for a node of the tree under a top that is a
// UNION ALL (all) or a UNION.
func unionTree(sel *pg_query.SelectStmt, top, all bool) bool {
	if sel.Op != pg_query.SetOperation_SETOP_UNION || all && !sel.All || len(sel.LockingClause) > 0 || sel.WithClause != nil ||
		!top && (len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil) {
		return false
	}
	for _, side := range []*pg_query.SelectStmt{sel.Larg, sel.Rarg} {
		if side.Op == pg_query.SetOperation_SETOP_NONE || side.Op == pg_query.SetOperation_SET_OPERATION_UNDEFINED {
			if !rowSource(side) || side.WithClause != nil || len(side.SortClause) > 0 {
				return false
			}
		} else if !unionTree(side, false, all) {
			return false
		}
	}
	return true
}

// setOpTree reports whether sel is a set operation — any tree of UNION,
// INTERSECT and EXCEPT, with or without ALL — whose queries are each a
// rowSource and whose queries and inner operations have no locking, WITH,
// ORDER BY, LIMIT or OFFSET of their own: the proxy computes it from each
// shard's rows of every query (union.go: setOpMerge). The pure UNION
// trees that unionAll takes are merged as unions instead.
func setOpTree(sel *pg_query.SelectStmt) bool {
	if sel == nil || isLeafQuery(sel) || len(sel.LockingClause) > 0 || sel.WithClause != nil {
		return false
	}
	return setOpBranch(sel.Larg) && setOpBranch(sel.Rarg)
}

// setOpBranch is setOpTree for a node under the top.
func setOpBranch(side *pg_query.SelectStmt) bool {
	if side.WithClause != nil || len(side.SortClause) > 0 || side.LimitCount != nil || side.LimitOffset != nil || len(side.LockingClause) > 0 {
		return false
	}
	if isLeafQuery(side) {
		return rowSource(side)
	}
	return setOpBranch(side.Larg) && setOpBranch(side.Rarg)
}

// isLeafQuery reports whether sel is a query rather than a set operation.
func isLeafQuery(sel *pg_query.SelectStmt) bool {
	return sel.Op == pg_query.SetOperation_SETOP_NONE || sel.Op == pg_query.SetOperation_SET_OPERATION_UNDEFINED
}

// setOpCounts reports whether a set operation keeps its rows as often as
// the queries return them anywhere in its tree (an ALL), so that a query
// whose rows every shard repeats would be counted once per shard.
func setOpCounts(sel *pg_query.SelectStmt) bool {
	if isLeafQuery(sel) {
		return false
	}
	return sel.All || setOpCounts(sel.Larg) || setOpCounts(sel.Rarg)
}

// unionLeaves appends the queries of a unionAll to out, in order.
func unionLeaves(sel *pg_query.SelectStmt, out []*pg_query.SelectStmt) []*pg_query.SelectStmt {
	if sel.Op == pg_query.SetOperation_SETOP_NONE || sel.Op == pg_query.SetOperation_SET_OPERATION_UNDEFINED {
		return append(out, sel)
	}
	return unionLeaves(sel.Rarg, unionLeaves(sel.Larg, out))
}

// readOnceInFrom reports whether the statement sel belongs to names the
// WITH query name exactly once, as an item of sel's own FROM (not on the
// NULL-extended side of an outer join).
func readOnceInFrom(sel *pg_query.SelectStmt, name string) bool {
	refs := map[*pg_query.RangeVar]bool{} // walk may show one twice
	walk(sel, func(n *pg_query.Node) bool {
		if rv := n.GetRangeVar(); rv != nil && rv.Schemaname == "" && rv.Relname == name {
			refs[rv] = true
		}
		return true
	})
	if len(refs) != 1 {
		return false
	}
	nullable := map[*pg_query.RangeVar]bool{}
	found := false
	for _, n := range sel.FromClause {
		nullableTables(n, false, nullable)
		walk(n, func(n *pg_query.Node) bool {
			if n.GetRangeSubselect() != nil || n.GetRangeFunction() != nil {
				return false // not sel's own FROM item
			}
			if rv := n.GetRangeVar(); rv != nil && rv.Schemaname == "" && rv.Relname == name && !nullable[rv] {
				found = true
			}
			return true
		})
	}
	return found
}

// exposedKey returns the sharded table of a subquery in FROM whose
// sharding key the subquery's select list passes on under its own name
// (*, t.*, or the key column unaliased), when it reads exactly one sharded
// table at its own level; nil otherwise.
func exposedKey(inner *scope, sel *pg_query.SelectStmt) *instance {
	var in *instance
	var name string
	for _, e := range inner.entries {
		if e.inst != nil && e.inst.class == shardedTable {
			if in != nil {
				return nil
			}
			in, name = e.inst, e.name
		}
	}
	if in == nil || in.key == nil {
		return nil
	}
	for _, n := range sel.TargetList {
		rt := n.GetResTarget()
		if rt == nil {
			continue
		}
		if isStar(rt.Val) {
			fs := rt.Val.GetColumnRef().Fields
			if len(fs) == 1 || len(fs) == 2 && fs[0].GetString_() != nil && fs[0].GetString_().Sval == name {
				return in
			}
		} else if (rt.Name == "" || rt.Name == in.key.column) && inner.keyColumn(rt.Val) == in {
			return in
		}
	}
	return nil
}

// shardedRows reports whether a row scope reads a sharded table at its
// own level (its rows are split between the shards) rather than only
// replicated ones.
func shardedRows(sc *scope) bool {
	for _, e := range sc.entries {
		if e.inst != nil && e.inst.class == shardedTable || e.inst == nil && e.rows {
			return true
		}
	}
	return false
}

// stmt analyzes a statement nested in another one (a subquery, a WITH
// query): its tables are marked nested. It returns the scope of a SELECT.
func (a *analyzer) stmt(n *pg_query.Node, nested string) *scope {
	switch {
	case n == nil:
	case n.GetSelectStmt() != nil:
		return a.query(n.GetSelectStmt(), nested)
	case n.GetInsertStmt() != nil:
		a.insert(n.GetInsertStmt(), nested)
	case n.GetUpdateStmt() != nil:
		a.update(n.GetUpdateStmt(), nested)
	case n.GetDeleteStmt() != nil:
		a.delete(n.GetDeleteStmt(), nested)
	case n.GetMergeStmt() != nil:
		a.merge(n.GetMergeStmt(), nested)
	}
	return nil
}

// enter starts the scope of a query inside the current one.
func (a *analyzer) enter(nested string) *scope {
	sc := &scope{parent: a.cur, depth: 1, nested: nested}
	if a.cur != nil {
		sc.depth, sc.branch = a.cur.depth+1, a.cur.branch
	}
	if a.leaf > 0 { // a query of a top-level UNION ALL
		sc.branch, a.leaf = a.leaf, 0
	}
	a.cur = sc
	return sc
}

// leave ends a scope started by enter.
func (a *analyzer) leave(sc *scope) { a.cur = sc.parent }

// query analyzes one SELECT (or VALUES, or set operation) and returns its
// scope (nil for a set operation).
func (a *analyzer) query(sel *pg_query.SelectStmt, nested string) *scope {
	if sel == nil {
		return nil
	}
	rows, fromSub := a.rowScope, a.fromSub
	a.rowScope, a.fromSub = false, false
	defer func(n int) { a.ctes = a.ctes[:n] }(len(a.ctes))
	var rowSel *pg_query.SelectStmt
	if rows {
		rowSel = sel
	}
	a.with(sel.WithClause, rowSel)
	if union := unionAll(sel, true); rows && nested == "" && (union || setOpTree(sel)) {
		// Each query of it counts as the statement's own: each shard
		// computes its rows of each, and the shards' answers together
		// are the whole (branch keeps their tables apart in finishPart).
		for _, leaf := range unionLeaves(sel, nil) {
			a.branches++
			a.rowScope, a.leaf = true, a.branches
			// Under a UNION, a query's rows that every shard repeats
			// are deduplicated like any others.
			counts := union && sel.All || !union && setOpCounts(sel)
			if sc := a.query(leaf, ""); (sc == nil || !shardedRows(sc)) && a.unionErr == nil && counts {
				what := map[pg_query.SetOperation]string{pg_query.SetOperation_SETOP_INTERSECT: "INTERSECT", pg_query.SetOperation_SETOP_EXCEPT: "EXCEPT"}[sel.Op]
				switch {
				case union:
					a.unionErr = unsupported(hintOneShard, "a query of UNION ALL that reads no sharded table would answer its rows once per shard")
				case what != "" && sel.All && isLeafQuery(sel.Larg) && isLeafQuery(sel.Rarg):
					a.unionErr = unsupported(hintOneShard, "a query of %s ALL that reads no sharded table would count its rows once per shard", what)
				default:
					a.unionErr = unsupported(hintOneShard, "a query of a set operation with ALL that reads no sharded table would count its rows once per shard")
				}
			}
		}
		return nil
	}
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED {
		why := map[pg_query.SetOperation]string{
			pg_query.SetOperation_SETOP_UNION:     "UNION",
			pg_query.SetOperation_SETOP_INTERSECT: "INTERSECT",
			pg_query.SetOperation_SETOP_EXCEPT:    "EXCEPT",
		}[sel.Op]
		if nested != "" {
			why = nested
		}
		a.query(sel.Larg, why)
		a.query(sel.Rarg, why)
		a.exprs(nested, sel.SortClause...)
		a.exprs(nested, sel.LimitCount, sel.LimitOffset)
		return nil
	}
	sc := a.enter(nested)
	sc.rows, sc.fromSub = rows, fromSub
	defer a.leave(sc)
	sc.targets = sel.TargetList
	for _, item := range sel.FromClause {
		a.from(sc, item, false)
	}
	for _, item := range sel.FromClause {
		a.joinRows(item)
	}
	sc.restrict = append(sc.restrict, sel.WhereClause)
	sc.exprs = append(sc.exprs, sel.WhereClause, sel.HavingClause)
	sc.exprs = append(sc.exprs, sel.TargetList...)
	sc.exprs = append(sc.exprs, sel.GroupClause...)
	sc.exprs = append(sc.exprs, sel.SortClause...)
	for _, row := range sel.ValuesLists {
		a.exprs(nested, row)
	}
	a.exprs(nested, sel.TargetList...)
	a.exprs(nested, sel.WhereClause, sel.HavingClause, sel.LimitCount, sel.LimitOffset)
	a.exprs(nested, sel.GroupClause...)
	a.exprs(nested, sel.SortClause...)
	a.exprs(nested, sel.DistinctClause...)
	a.exprs(nested, sel.WindowClause...)
	a.finish(sc)
	return sc
}

// exprs analyzes the subqueries inside expressions.
func (a *analyzer) exprs(nested string, ns ...*pg_query.Node) {
	why := "subquery"
	if nested != "" {
		why = nested
	}
	for _, n := range ns {
		walkExpr(n, nil, func(sl *pg_query.SubLink) {
			if sl.Subselect == a.countSub {
				// SELECT EXISTS (subquery): merged on its own (count.go).
				a.rowScope, a.fromSub = true, true
				a.countScope = a.stmt(sl.Subselect, "")
				return
			}
			if sc := a.stmt(sl.Subselect, why); sc != nil {
				if a.subs == nil {
					a.subs = map[*pg_query.SubLink]*scope{}
				}
				a.subs[sl] = sc
			}
		})
	}
}

// from adds one FROM item to a scope and returns the entries it added.
// nullable is true below the NULL-extended side of an outer join, whose ON
// conditions do not restrict the result rows.
func (a *analyzer) from(sc *scope, n *pg_query.Node, nullable bool) []entry {
	start := len(sc.entries)
	switch {
	case n.GetRangeVar() != nil:
		a.addTable(sc, n.GetRangeVar())
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		lnull, rnull := nullable, nullable
		switch j.Jointype {
		case pg_query.JoinType_JOIN_LEFT:
			rnull = true
		case pg_query.JoinType_JOIN_RIGHT:
			lnull = true
		case pg_query.JoinType_JOIN_FULL:
			lnull, rnull = true, true
		}
		left := a.from(sc, j.Larg, lnull)
		right := a.from(sc, j.Rarg, rnull)
		if j.Jointype == pg_query.JoinType_JOIN_INNER && !nullable {
			sc.restrict = append(sc.restrict, j.Quals)
		} else {
			sc.joins = append(sc.joins, j.Quals)
		}
		sc.exprs = append(sc.exprs, j.Quals)
		a.exprs(sc.nested, j.Quals)
		for _, u := range j.UsingClause {
			a.pairOn(sc, left, right, str(u))
		}
		if j.IsNatural {
			for _, l := range left {
				if l.inst != nil && l.inst.key != nil {
					a.pairOn(sc, left, right, l.inst.key.column)
				}
			}
		}
		if j.Alias != nil {
			sc.entries = append(sc.entries, entry{name: j.Alias.Aliasname})
		}
	case n.GetRangeSubselect() != nil:
		rs := n.GetRangeSubselect()
		if rs.Subquery == a.countSub {
			// Merged on its own, its rows counted (buildCountMerge).
			a.rowScope, a.fromSub = true, true
			a.countScope = a.stmt(rs.Subquery, "")
			sc.entries = append(sc.entries, entry{name: aliasName(rs.Alias), rows: true})
			break
		}
		if sc.rows && !nullable && !rs.Lateral && rowSource(rs.Subquery.GetSelectStmt()) {
			// Its rows are each shard's own: its tables count as this
			// scope's (scope.rows).
			a.rowScope, a.fromSub = true, true
			inner := a.stmt(rs.Subquery, "")
			e := entry{name: aliasName(rs.Alias), rows: inner != nil && shardedRows(inner)}
			if e.rows {
				// Its sharding key, if it passes it on unchanged, is
				// the table's: joins and semi-joins on it co-locate.
				e.inst = exposedKey(inner, rs.Subquery.GetSelectStmt())
				if a.rowSubs == nil {
					a.rowSubs = map[*pg_query.RangeSubselect]bool{}
				}
				a.rowSubs[rs] = true
			}
			sc.entries = append(sc.entries, e)
			break
		}
		why := "subquery"
		if sc.nested != "" {
			why = sc.nested
		}
		a.stmt(rs.Subquery, why)
		sc.entries = append(sc.entries, entry{name: aliasName(rs.Alias)})
	case n.GetRangeFunction() != nil:
		rf := n.GetRangeFunction()
		a.exprs(sc.nested, rf.Functions...)
		sc.entries = append(sc.entries, entry{name: aliasName(rf.Alias)})
	case n.GetRangeTableSample() != nil:
		if rv := n.GetRangeTableSample().Relation.GetRangeVar(); rv != nil {
			a.addTable(sc, rv)
		}
	default:
		// XMLTABLE, JSON_TABLE and the like: no table, maybe subqueries.
		a.exprs(sc.nested, n)
		sc.entries = append(sc.entries, entry{})
	}
	return sc.entries[start:len(sc.entries):len(sc.entries)]
}

func aliasName(al *pg_query.Alias) string {
	if al == nil {
		return ""
	}
	return al.Aliasname
}

// pairOn records that JOIN … USING (column) equates the sharding keys of
// the tables on either side that are sharded by column.
func (a *analyzer) pairOn(sc *scope, left, right []entry, column string) {
	l, r := keyedBy(left, column), keyedBy(right, column)
	if l != nil && r != nil {
		sc.pairs = append(sc.pairs, [2]*instance{l, r})
	}
}

// keyedBy returns the only table of entries sharded by column.
func keyedBy(entries []entry, column string) *instance {
	var found *instance
	for _, e := range entries {
		if e.inst != nil && e.inst.key != nil && e.inst.key.column == column {
			if found != nil {
				return nil
			}
			found = e.inst
		}
	}
	return found
}

// finish records which sharded tables of a scope are co-located: those
// whose sharding keys are equal in every row (JOIN … ON a.key = b.key,
// USING, a subquery's WHERE o.key = outer.key, outer.key IN (SELECT o.key
// …)). group turns them into groups once every scope is finished.
func (a *analyzer) finish(sc *scope) {
	a.resolveUnknown(sc)
	for _, p := range sc.pairs {
		union(p[0], p[1])
	}
	for _, list := range [][]*pg_query.Node{sc.restrict, sc.joins} {
		for _, n := range list {
			for _, c := range conjuncts(n) {
				if l, r := sc.keyEquality(c); l != nil {
					union(l, r)
				}
			}
		}
	}
	for _, n := range sc.restrict {
		for _, c := range conjuncts(n) {
			a.semiJoin(sc, c)
		}
	}
	for _, e := range sc.entries {
		if in := e.inst; in != nil && (in.class == pinnedTable || in.class == pathTable) {
			a.pin(in)
		}
	}
	a.scopes = append(a.scopes, sc)
}

// joinRows says how the rows of a FROM item are spread: split between the
// shards (a sharded table, a row scope over one: each row on one shard),
// or replicated (an omni or catalog table, a function, VALUES: every shard
// has them all). An outer join that keeps replicated rows and NULL-extends
// split ones would make every shard add the replicated rows it has no
// match for — a row repeated once per shard: joinRows records the
// refusal (a.outerJoin) and names the kept item.
func (a *analyzer) joinRows(n *pg_query.Node) (split bool, name string) {
	switch {
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		if in := a.byRV[rv]; in != nil {
			return in.class == shardedTable || in.class == pinnedTable || in.class == pathTable, in.name
		}
		return a.rowCTEs[rv.Relname], rv.Relname
	case n.GetRangeTableSample() != nil:
		if rv := n.GetRangeTableSample().Relation.GetRangeVar(); rv != nil {
			return a.joinRows(n.GetRangeTableSample().Relation)
		}
	case n.GetRangeSubselect() != nil:
		rs := n.GetRangeSubselect()
		return a.rowSubs[rs], "subquery " + aliasName(rs.Alias)
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		ls, ln := a.joinRows(j.Larg)
		rs, rn := a.joinRows(j.Rarg)
		kept := ""
		switch j.Jointype {
		case pg_query.JoinType_JOIN_LEFT:
			if !ls && rs {
				kept = ln
			}
		case pg_query.JoinType_JOIN_RIGHT:
			if ls && !rs {
				kept = rn
			}
		case pg_query.JoinType_JOIN_FULL:
			if ls != rs {
				kept = map[bool]string{true: rn, false: ln}[ls]
			}
		}
		if kept != "" && a.outerJoin == nil {
			a.outerJoin = unsupported("Constrain the sharding key to one shard in WHERE, or route the statement to one shard.",
				"an outer join that keeps the rows of %s, which every shard holds, and NULL-extends rows of sharded tables would repeat them once per shard", kept)
		}
		return ls || rs, ln
	case n.GetRangeFunction() != nil:
		for _, f := range n.GetRangeFunction().Functions {
			for _, item := range f.GetList().GetItems() {
				if fc := item.GetFuncCall(); fc != nil {
					return false, funcName(fc) + "()"
				}
			}
		}
	}
	return false, "a table function"
}

// semiJoin recognizes outer.key IN (SELECT inner.key …) as a condition
// every result row satisfies: the inner rows that matter are on the outer
// row's shard. (Under NOT, or for ALL, the inner rows with other keys would
// matter, so only a positive term of WHERE counts.)
func (a *analyzer) semiJoin(sc *scope, n *pg_query.Node) {
	sl := n.GetSubLink()
	if sl == nil || sl.SubLinkType != pg_query.SubLinkType_ANY_SUBLINK {
		return
	}
	if op := names(sl.OperName); len(op) > 0 && op[len(op)-1] != "=" {
		return
	}
	inner := a.subs[sl]
	outer := sc.keyColumn(sl.Testexpr)
	if inner == nil || outer == nil || len(inner.targets) != 1 {
		return
	}
	if rt := inner.targets[0].GetResTarget(); rt != nil {
		if in := inner.keyColumn(rt.Val); in != nil {
			union(outer, in)
		}
	}
}

// group makes the co-location groups of the statement's sharded tables and
// the constraint on each group's sharding key, taken from the WHERE of the
// group's outermost scope: conditions inside a subquery narrow its rows,
// not the rows of the query around it. It runs once, after the whole
// statement is analyzed.
func (a *analyzer) group() {
	if a.grouped {
		return
	}
	a.grouped = true
	byRoot := map[*instance]*group{}
	for _, sc := range a.scopes {
		for _, e := range sc.entries {
			in := e.inst
			if in == nil || in.class != shardedTable {
				continue
			}
			root := in.root()
			g := byRoot[root]
			if g == nil {
				g = &group{root: root, sc: sc, nested: in.nested}
				byRoot[root] = g
				a.groups = append(a.groups, g)
			}
			if !slices.Contains(g.tables, in.name) {
				g.tables = append(g.tables, in.name)
			}
			if in.nested == "" {
				g.nested = ""
			}
			if sc.depth < g.sc.depth {
				g.sc = sc
			}
			if sc.fromSub && !slices.Contains(g.subs, sc) {
				g.subs = append(g.subs, sc)
			}
		}
	}
	for _, g := range byRoot {
		// The WHERE of the group's outermost scope, and of the subqueries
		// in FROM its rows come through, which narrow them too.
		var cs []*cond
		for _, sc := range append([]*scope{g.sc}, g.subs...) {
			if sc != g.sc && sc.depth <= g.sc.depth {
				continue
			}
			for _, n := range sc.restrict {
				cs = append(cs, sc.keyCond(n, g.root))
			}
		}
		g.cond = and(cs...)
	}
}

// branch is the query of a top-level UNION ALL the group's tables are in
// (scope.branch), 0 for none.
func (g *group) branch() int {
	if g.sc == nil {
		return 0
	}
	return g.sc.branch
}

// union puts two instances in one co-location group when their rules place
// equal keys on the same shard.
func union(l, r *instance) {
	if l.key == nil || r.key == nil || l.key.class != r.key.class {
		return
	}
	if lr, rr := l.root(), r.root(); lr != rr {
		rr.parent = lr
	}
}

// conjuncts splits an AND tree into its terms.
func conjuncts(n *pg_query.Node) []*pg_query.Node {
	if n == nil {
		return nil
	}
	if b := n.GetBoolExpr(); b != nil && b.Boolop == pg_query.BoolExprType_AND_EXPR {
		var out []*pg_query.Node
		for _, k := range b.Args {
			out = append(out, conjuncts(k)...)
		}
		return out
	}
	return []*pg_query.Node{n}
}

// keyEquality recognizes a.key = b.key between two sharded tables.
func (sc *scope) keyEquality(n *pg_query.Node) (*instance, *instance) {
	e := n.GetAExpr()
	if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || operatorName(e) != "=" {
		return nil, nil
	}
	l, r := sc.keyColumn(e.Lexpr), sc.keyColumn(e.Rexpr)
	if l == nil || r == nil {
		return nil, nil
	}
	return l, r
}

// keyColumn returns the sharded table whose sharding key n names, or nil.
// A qualified name may refer to a table of an enclosing query (a
// correlated subquery); an unqualified one only to this scope, as another
// table of the scope could have a column of that name.
func (sc *scope) keyColumn(n *pg_query.Node) *instance {
	fields := columnRef(n)
	if fields == nil {
		return nil
	}
	col := fields[len(fields)-1]
	if len(fields) == 1 {
		var found *instance
		for _, e := range sc.entries {
			if e.inst == nil || e.inst.key == nil || e.inst.key.column != col {
				continue
			}
			if found != nil && found.root() != e.inst.root() {
				return nil // ambiguous: PostgreSQL rejects it
			}
			if found == nil {
				found = e.inst
			}
		}
		return found
	}
	qual := fields[len(fields)-2]
	schema := ""
	if len(fields) >= 3 {
		schema = fields[len(fields)-3]
	}
	for s := sc; s != nil; s = s.parent {
		for _, e := range s.entries {
			if e.name != qual || (schema != "" && e.schema != schema) {
				continue
			}
			if e.inst != nil && e.inst.key != nil && e.inst.key.column == col {
				return e.inst
			}
			return nil
		}
	}
	return nil
}

// keyCond returns the constraint n puts on the sharding key of group g.
func (sc *scope) keyCond(n *pg_query.Node, g *instance) *cond {
	if n == nil {
		return nil
	}
	if b := n.GetBoolExpr(); b != nil {
		var kids []*cond
		for _, k := range b.Args {
			kids = append(kids, sc.keyCond(k, g))
		}
		switch b.Boolop {
		case pg_query.BoolExprType_AND_EXPR:
			return and(kids...)
		case pg_query.BoolExprType_OR_EXPR:
			return or(kids...)
		}
		return nil
	}
	e := n.GetAExpr()
	if e == nil || operatorName(e) != "=" {
		return nil
	}
	side := func(col, val *pg_query.Node) *cond {
		in := sc.keyColumn(col)
		if in == nil || in.root() != g {
			return nil
		}
		switch e.Kind {
		case pg_query.A_Expr_Kind_AEXPR_OP, pg_query.A_Expr_Kind_AEXPR_NOT_DISTINCT:
			if o, ok := scalarOperand(in.key, val); ok {
				return leaf(in.key, []operand{o})
			}
		case pg_query.A_Expr_Kind_AEXPR_IN:
			return leaf(in.key, listOperands(in.key, val))
		case pg_query.A_Expr_Kind_AEXPR_OP_ANY:
			return leaf(in.key, arrayOperands(in.key, val))
		}
		return nil
	}
	if c := side(e.Lexpr, e.Rexpr); c != nil {
		return c
	}
	if e.Kind == pg_query.A_Expr_Kind_AEXPR_OP || e.Kind == pg_query.A_Expr_Kind_AEXPR_NOT_DISTINCT {
		return side(e.Rexpr, e.Lexpr)
	}
	return nil
}
