package router

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/shardgate/shardgate/wire"
)

// ref is a column of a fan-out SELECT while the Merge is built: an item of
// the select list, a hidden column, or a position in the expanded list.
type ref struct {
	kind byte // 't' target, 'h' hidden, 'p' position
	i    int
}

// mergeTarget is one item of the select list.
type mergeTarget struct {
	val  *pg_query.Node // nil for * and t.*
	name string         // the output column name
	agg  AggFunc
	// outer is an expression over aggregates: the Outer statement
	// computes it, shards return a placeholder.
	outer bool
}

// mergeAgg is an aggregate column; count is the hidden count of an avg.
// A distinct one folds once per DISTINCT value (distinct.go).
type mergeAgg struct {
	at, count ref
	f         AggFunc
	distinct  bool
	value     int // the index of the DISTINCT value in distinctArgs, or -1
	// sep is string_agg's separator column, structured json_agg's
	// argument kind (collect.go).
	sep, structured ref
	// moments are the hidden columns of a stddev or variance (variance.go).
	moments momentRefs
	// regression are those of corr, covar_ and regr_ (regression.go).
	regression regrRefs
}

// mergeBuilder builds the Merge of one SELECT.
type mergeBuilder struct {
	sel     *pg_query.SelectStmt
	targets []mergeTarget
	star    int              // index of the first * target, or -1
	hidden  []*pg_query.Node // expressions appended to the select list
	// hiddenLike: hidden columns (by index in hidden) in the result format
	// of a select list item (lag's argument in the window column's);
	// lagArgs, per proxy window, lag's argument ('h') or nothing.
	hiddenLike map[int]ref
	lagArgs    []ref
	groups     []*pg_query.Node // GROUP BY expressions
	aggs       []mergeAgg
	grouped    bool
	m          Merge
	// The columns of m's fields, turned into Columns once every hidden
	// column is known.
	groupRefs, havingRefs, orderRefs, distinctRefs []ref
	// groupExprs are the GROUP BY expressions (positions and output names
	// resolved) and their columns, which outer expressions read.
	groupExprs []groupExpr
	// slots are the hidden columns that are placeholders for values the
	// Outer statement computes (by index in hidden).
	slots map[int]bool
	// outerParams counts the uses of each parameter that expressions
	// over aggregates pass to the Outer statement (outerParam).
	outerParams map[int32]int
	outer       outerBuilder
	// distinctArgs are what the DISTINCT aggregates dedupe, distinctRef
	// the hidden column of the one value, sortRefs the order of the
	// shards' rows (distinct.go); tag the grouping sets of several values
	// (multidistinct.go).
	distinctArgs []*pg_query.Node
	distinctRef  ref
	tag          *tagBuilder
	sortRefs     []ref
	sortDirs     []SortKey // the direction of each of sortRefs
	// collectOrder is the ORDER BY of the collecting aggregates,
	// subgroups the separators shards group by (collect.go).
	collectOrder []*pg_query.Node
	subgroups    []*pg_query.Node
	// isKey reports whether an expression is the sharding key of a
	// sharded table the query reads at its top level (window functions).
	isKey   func(*pg_query.Node) bool
	windows bool // the query calls window functions
	// proxyWins are the window calls the proxy computes, windowRefs
	// their select list items (proxywindow.go).
	proxyWins  []proxyWindow
	windowRefs []ref
	addedOrder bool // the window's ORDER BY is the shards' (none the client's)
	// complete is set for a grouped query whose GROUP BY holds the
	// sharding key and that calls window functions: each group is on one
	// shard, so the query runs whole on each and merges as a plain one.
	complete bool
}

// groupExpr is a GROUP BY expression and the column that holds it.
type groupExpr struct {
	expr *pg_query.Node
	at   ref
}

// buildMerge returns how to combine the answers of several shards to sel,
// nil when they are simply concatenated, or a 0A000 error naming what
// cannot be combined correctly.
//
// isKey reports whether an expression is the sharding key of a sharded
// table the query reads at its top level; nil refuses window functions.
func buildMerge(sel *pg_query.SelectStmt, version int32, isKey func(*pg_query.Node) bool) (*Merge, error) {
	if sel.Op != pg_query.SetOperation_SETOP_NONE && sel.Op != pg_query.SetOperation_SET_OPERATION_UNDEFINED {
		return nil, nil // set operations over sharded tables need one shard anyway
	}
	b := &mergeBuilder{sel: sel, star: -1, slots: map[int]bool{}, isKey: isKey}
	if err := b.reject(); err != nil {
		return nil, err
	}
	if err := b.selectList(); err != nil {
		return nil, err
	}
	steps := []func() error{b.groupBy, b.outerTargets, b.having, b.orderBy, b.proxyWindows, b.checkOuterParams, b.distinct, b.limit}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	m := &b.m
	if !m.Grouped && len(m.OrderBy) == 0 && m.Limit == nil && m.Offset == nil && !m.Distinct && len(m.DistinctOn) == 0 && len(m.Windows) == 0 {
		return nil, nil
	}
	if err := b.sortedGroups(); err != nil {
		return nil, err
	}
	b.sortedCollect()
	b.columns()
	if b.tag != nil {
		m.Tagged = b.tag.merge(b)
	}
	b.aggregates()
	m.HiddenColumns = len(b.hidden)
	sql, err := b.rewrite(version)
	if err != nil {
		return nil, err
	}
	m.Rewritten = sql
	if m.Outer, err = b.outerStatement(version); err != nil {
		return nil, err
	}
	return m, nil
}

// rejectf returns the error for a construct that cannot run across shards.
func rejectf(format string, args ...any) error {
	return unsupported(hintOneShard, format+" is not supported across shards", args...)
}

// reject finds constructs whose results cannot be combined: window
// functions, grouping sets, non-mergeable aggregates, WITH TIES.
func (b *mergeBuilder) reject() error {
	sel := b.sel
	var err, aggErr error // aggErr matters only when groups are merged
	check := func(n *pg_query.Node) bool {
		switch {
		case err != nil:
			return false
		case n.GetFuncCall() != nil && n.GetFuncCall().Over != nil:
			b.windows = true
			err = b.checkWindow(n.GetFuncCall())
		case n.GetGroupingFunc() != nil:
			return false // a column the grouping determines
		case n.GetJsonArrayAgg() != nil, n.GetJsonObjectAgg() != nil:
			err = rejectf("JSON_ARRAYAGG and JSON_OBJECTAGG")
		case n.GetFuncCall() != nil && isAggregate(n.GetFuncCall()):
			b.grouped = true
			if e := b.noteAgg(n.GetFuncCall()); e != nil && aggErr == nil {
				aggErr = e
			}
			return false
		}
		return err == nil
	}
	for _, list := range [][]*pg_query.Node{sel.TargetList, sel.SortClause, sel.GroupClause, {sel.HavingClause}} {
		for _, n := range list {
			walkExpr(n, check, nil)
		}
	}
	if len(sel.GroupClause) > 0 || sel.HavingClause != nil {
		b.grouped = true
	}
	if err == nil && len(b.proxyWins) > 0 && (b.grouped || len(sel.DistinctClause) > 0) {
		err = unsupported(hintWindow, "window function %s() over a window not partitioned by the sharding key is not supported across shards with aggregates, GROUP BY or DISTINCT", funcName(b.proxyWins[0].fc))
	}
	if err == nil && b.windows && b.grouped {
		err = b.completeGroups()
	}
	b.m.Grouped = b.grouped
	if err == nil && b.grouped {
		err = aggErr
	}
	if err == nil {
		err = b.checkCollect()
	}
	return err
}

// selectList classifies the items of the select list.
func (b *mergeBuilder) selectList() error {
	for i, n := range b.sel.TargetList {
		rt := n.GetResTarget()
		if rt == nil {
			continue
		}
		if isStar(rt.Val) {
			if b.grouped {
				return rejectf("SELECT * with aggregates or GROUP BY")
			}
			if b.star < 0 {
				b.star = i
			}
			b.targets = append(b.targets, mergeTarget{})
			continue
		}
		t := mergeTarget{val: rt.Val, name: columnName(rt)}
		value := -1
		if b.complete {
			// Every group is on one shard: the shards' rows are final.
		} else if fc := rt.Val.GetFuncCall(); fc != nil && isAggregate(fc) {
			f, err := aggFunc(fc)
			if err != nil {
				return err
			}
			t.agg = f
			if value, err = b.noteDistinct(fc); err != nil {
				return err
			}
		} else if findAggregate(rt.Val) != nil || b.subgrouped() && len(b.sel.GroupClause) == 0 {
			// Without GROUP BY, shards of a query with DISTINCT
			// aggregates may return no row: the proxy computes the
			// other items of its one row itself.
			t.outer = true
		}
		b.targets = append(b.targets, t)
		if t.agg != 0 {
			at := ref{'t', len(b.targets) - 1}
			count := at
			if t.agg == AggAvg {
				count = b.hide(countOf(rt.Val.GetFuncCall()))
			}
			a, err := b.newAgg(rt.Val.GetFuncCall(), at, count, t.agg, value)
			if err != nil {
				return err
			}
			b.aggs = append(b.aggs, a)
		}
	}
	return nil
}

// hide appends an expression to the select list, or finds it there.
func (b *mergeBuilder) hide(n *pg_query.Node) ref {
	for i, h := range b.hidden {
		if !b.slots[i] && sameExpr(h, n) {
			return ref{'h', i}
		}
	}
	b.hidden = append(b.hidden, n)
	return ref{'h', len(b.hidden) - 1}
}

// find returns the select list item written like n.
func (b *mergeBuilder) find(n *pg_query.Node) (ref, bool) {
	for i, t := range b.targets {
		if t.val != nil && sameExpr(t.val, n) {
			return ref{'t', i}, true
		}
	}
	return ref{}, false
}

// byName returns the select list item named like a bare column reference.
func (b *mergeBuilder) byName(n *pg_query.Node) (ref, bool) {
	if f := columnRef(n); len(f) == 1 {
		for i, t := range b.targets {
			if t.val != nil && t.name == f[0] {
				return ref{'t', i}, true
			}
		}
	}
	return ref{}, false
}

// position reads ORDER BY 2 / GROUP BY 2.
func (b *mergeBuilder) position(n *pg_query.Node) (int, bool) {
	if v, ok := intConst(n); ok {
		return int(v) - 1, true
	}
	return 0, false
}

// groupBy records the group key: the select list items that are neither
// aggregates nor expressions over aggregates, and the GROUP BY expressions
// missing from it.
func (b *mergeBuilder) groupBy() error {
	if !b.grouped {
		return nil
	}
	var key []ref
	for i, t := range b.targets {
		if t.agg == 0 && !t.outer {
			key = append(key, ref{'t', i})
		}
	}
	items := b.sel.GroupClause
	var sets *groupingSets
	if hasGroupingSets(b.sel) {
		var err error
		if sets, err = expandGroupingSets(b.sel, b.resolveGroup); err != nil {
			return err
		}
		items = sets.cols
	}
	var tagArgs []*pg_query.Node
	for _, g := range items {
		expr := g
		r, ok, err := b.groupTarget(g)
		switch {
		case err != nil:
			return err
		case ok:
			expr = b.targets[r.i].val
		default:
			r = b.hide(g)
		}
		b.groups = append(b.groups, g)
		b.groupExprs = append(b.groupExprs, groupExpr{expr, r})
		tagArgs = append(tagArgs, expr)
		if !slices.Contains(key, r) {
			key = append(key, r)
		}
	}
	if sets != nil && len(sets.sets) > 1 {
		key = append(key, b.hide(groupingTag(tagArgs)))
	}
	b.groupRefs = key
	return nil
}

// groupTarget returns the select list item a GROUP BY item names:
// written alike, by position, or by an output name (ok false for none).
func (b *mergeBuilder) groupTarget(g *pg_query.Node) (r ref, ok bool, err error) {
	if r, ok := b.find(g); ok {
		return r, true, nil
	}
	if p, isPos := b.position(g); isPos {
		if p < 0 || p >= len(b.targets) {
			return ref{}, false, rejectf("GROUP BY position %d", p+1)
		}
		return ref{'t', p}, true, nil
	}
	if r, ok := b.byName(g); ok && b.targets[r.i].agg == 0 && !b.targets[r.i].outer {
		// A name in GROUP BY is a column of the FROM tables before it
		// is an output column, and an aggregate's output column would
		// be an error.
		return r, true, nil
	}
	return ref{}, false, nil
}

// resolveGroup returns the expression a GROUP BY item stands for: the
// select list item it names (groupTarget), else the item itself.
func (b *mergeBuilder) resolveGroup(g *pg_query.Node) *pg_query.Node {
	if r, ok, err := b.groupTarget(g); err == nil && ok && b.targets[r.i].val != nil {
		return b.targets[r.i].val
	}
	return g
}

// groupedRef resolves an expression of a grouped query that the executor
// reads after grouping: a select list item, an aggregate, a GROUP BY
// expression. ok is false for anything else.
func (b *mergeBuilder) groupedRef(n *pg_query.Node) (r ref, ok bool, err error) {
	if r, ok := b.find(n); ok {
		return r, true, nil
	}
	if f := n.GetFuncCall(); f != nil && isAggregate(f) {
		r, err := b.aggRef(n)
		return r, err == nil, err
	}
	if n.GetGroupingFunc() != nil {
		return b.hide(n), true, nil // the same for each group of a set
	}
	for _, g := range b.groupExprs {
		if sameExpr(g.expr, n) {
			return g.at, true, nil
		}
	}
	return ref{}, false, nil
}

// having turns HAVING into conditions the executor evaluates after
// grouping — comparisons of an aggregate or a group column with a constant
// or parameter — and gives the Outer statement every other term.
func (b *mergeBuilder) having() error {
	if b.complete {
		return nil // the shards apply it to their complete groups
	}
	for _, c := range conjuncts(b.sel.HavingClause) {
		cond, r, ok, err := b.simpleCond(c)
		if err != nil {
			return err
		}
		if ok {
			b.m.Having = append(b.m.Having, cond)
			b.havingRefs = append(b.havingRefs, r)
			continue
		}
		e, err := b.outerize(c)
		if err != nil {
			return err
		}
		b.outer.where = append(b.outer.where, e)
	}
	return nil
}

// simpleCond reads a HAVING term the executor can evaluate itself; ok is
// false for any other.
func (b *mergeBuilder) simpleCond(c *pg_query.Node) (cond Cond, r ref, ok bool, err error) {
	e := c.GetAExpr()
	if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP {
		return Cond{}, ref{}, false, nil
	}
	op := operatorName(e)
	flip := map[string]string{"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
	if _, ok := flip[op]; !ok {
		return Cond{}, ref{}, false, nil
	}
	side, value := e.Lexpr, e.Rexpr
	v, ok := condValue(value)
	if !ok {
		side, value, op = e.Rexpr, e.Lexpr, flip[op]
		if v, ok = condValue(value); !ok {
			return Cond{}, ref{}, false, nil
		}
	}
	if r, ok, err = b.groupedRef(side); err != nil || !ok {
		return Cond{}, ref{}, false, err
	}
	if r.kind == 't' && b.targets[r.i].outer {
		return Cond{}, ref{}, false, nil // computed only by the Outer statement
	}
	return Cond{Op: op, Value: v}, r, true, nil
}

// condValue reads the value side of a HAVING condition the executor
// compares as the column's type: a parameter (possibly cast, which only
// declares its type), or an integer constant. A string or boolean constant
// means what the column's type reads it as ('yes' is true, '2000-01-01' a
// midnight timestamp), a cast constant ('2.5'::int is 3) or a decimal one
// (compared with an integer column, 2.5 is numeric) is typed by PostgreSQL:
// all of them are left to the Outer statement.
func condValue(n *pg_query.Node) (Expr, bool) {
	if c := n.GetAConst(); c != nil {
		if _, isInt := c.Val.(*pg_query.A_Const_Ival); !isInt && !c.Isnull {
			return Expr{}, false
		}
		return exprOf(n)
	}
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	if n.GetParamRef() == nil {
		return Expr{}, false
	}
	return exprOf(n)
}

// exprOf reads a constant or parameter, possibly cast.
func exprOf(n *pg_query.Node) (Expr, bool) {
	for n.GetTypeCast() != nil {
		n = n.GetTypeCast().Arg
	}
	if p := n.GetParamRef(); p != nil && p.Number >= 1 {
		return Expr{Param: int(p.Number)}, true
	}
	if c := n.GetAConst(); c != nil {
		text, null, ok := constText(c)
		return Expr{Const: text, Null: null}, ok
	}
	return Expr{}, false
}

// orderBy records the sort keys; expressions missing from the select list
// become hidden columns.
func (b *mergeBuilder) orderBy() error {
	for _, n := range b.sel.SortClause {
		s := n.GetSortBy()
		if s == nil {
			continue
		}
		if s.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(s.UseOp) > 0 {
			return rejectf("ORDER BY … USING")
		}
		r, err := b.sortRef(s.Node, "ORDER BY")
		if err != nil {
			return err
		}
		b.orderRefs = append(b.orderRefs, r)
		b.m.OrderBy = append(b.m.OrderBy, sortKey(s))
	}
	if b.sel.LimitOption == pg_query.LimitOption_LIMIT_OPTION_WITH_TIES {
		b.m.WithTies = len(b.m.OrderBy)
	}
	return nil
}

// sortKey is the direction of an ORDER BY item.
func sortKey(s *pg_query.SortBy) SortKey {
	k := SortKey{Desc: s.SortbyDir == pg_query.SortByDir_SORTBY_DESC}
	switch s.SortbyNulls {
	case pg_query.SortByNulls_SORTBY_NULLS_FIRST:
		k.NullsFirst = true
	case pg_query.SortByNulls_SORTBY_NULLS_LAST:
	default:
		k.NullsFirst = k.Desc
	}
	return k
}

// sortRef resolves an ORDER BY or DISTINCT ON item as PostgreSQL does: a
// position, an output column name, an expression of the select list, or
// else a new (hidden) expression.
func (b *mergeBuilder) sortRef(n *pg_query.Node, what string) (ref, error) {
	if p, ok := b.position(n); ok {
		if b.grouped {
			if p < 0 || p >= len(b.targets) {
				return ref{}, rejectf("%s position %d", what, p+1)
			}
			return ref{'t', p}, nil
		}
		return ref{'p', p}, nil
	}
	if r, ok := b.byName(n); ok {
		return r, nil
	}
	if b.grouped {
		r, ok, err := b.groupedRef(n)
		switch {
		case err != nil || ok:
			return r, err
		case columnRef(n) != nil:
			return b.hide(n), nil // a column the grouping determines, or a shard's error
		}
		return b.outerSlot(n)
	}
	if r, ok := b.find(n); ok {
		return r, nil
	}
	return b.hide(n), nil
}

// distinct records DISTINCT and DISTINCT ON.
func (b *mergeBuilder) distinct() error {
	d := b.sel.DistinctClause
	switch {
	case len(d) == 0:
	case len(d) == 1 && d[0].GetNode() == nil:
		b.m.Distinct = true
		for _, r := range b.orderRefs {
			if b.grouped && r.kind == 'h' {
				// Shards get neither DISTINCT nor ORDER BY to reject it.
				return wire.Errorf(wire.InvalidColumnReference, "for SELECT DISTINCT, ORDER BY expressions must appear in select list")
			}
		}
	case b.grouped:
		return rejectf("DISTINCT ON with aggregates or GROUP BY")
	default:
		for _, n := range d {
			r, err := b.sortRef(n, "DISTINCT ON")
			if err != nil {
				return err
			}
			b.distinctRefs = append(b.distinctRefs, r)
		}
	}
	return nil
}

// limit records LIMIT and OFFSET.
func (b *mergeBuilder) limit() error {
	var err error
	b.m.Limit, b.m.Offset, err = limitExprs(b.sel.LimitCount, b.sel.LimitOffset)
	return err
}

// limitExprs reads LIMIT count and OFFSET offset (nil when absent, or
// LIMIT ALL / NULL); each must be a constant or a parameter.
func limitExprs(count, offset *pg_query.Node) (limit, off *Expr, err error) {
	for _, x := range []struct {
		n   *pg_query.Node
		dst **Expr
	}{{count, &limit}, {offset, &off}} {
		if x.n == nil {
			continue
		}
		e, ok := exprOf(x.n)
		if !ok {
			return nil, nil, rejectf("LIMIT or OFFSET other than a constant or parameter")
		}
		if !e.Null {
			*x.dst = &e
		}
	}
	return limit, off, nil
}

// columns fills the Columns of the Merge.
func (b *mergeBuilder) columns() {
	for _, r := range b.groupRefs {
		b.m.GroupBy = append(b.m.GroupBy, b.column(r))
	}
	for i, r := range b.havingRefs {
		b.m.Having[i].Column = b.column(r)
	}
	for i, r := range b.orderRefs {
		b.m.OrderBy[i].Column = b.column(r)
	}
	for _, r := range b.distinctRefs {
		b.m.DistinctOn = append(b.m.DistinctOn, b.column(r))
	}
	for i, r := range b.windowRefs {
		b.m.Windows[i].Column = b.column(r)
		if a := b.lagArgs[i]; a.kind == 'h' {
			b.m.Windows[i].Arg = b.column(a)
		}
	}
	if len(b.hiddenLike) > 0 {
		b.m.HiddenFormats = make([]Column, len(b.hidden))
		for i := range b.m.HiddenFormats {
			b.m.HiddenFormats[i] = NoColumn
			if r, ok := b.hiddenLike[i]; ok {
				b.m.HiddenFormats[i] = b.column(r)
			}
		}
	}
	for i, r := range b.sortRefs {
		k := SortKey{Column: b.column(r)}
		if i < len(b.sortDirs) {
			k.Desc, k.NullsFirst = b.sortDirs[i].Desc, b.sortDirs[i].NullsFirst
		}
		b.m.SortedBy = append(b.m.SortedBy, k)
	}
}

// column turns a ref into a Column of the rows shards return.
func (b *mergeBuilder) column(r ref) Column {
	switch r.kind {
	case 'h':
		return Column(-(len(b.hidden) - r.i))
	case 't':
		if b.star >= 0 && r.i > b.star {
			return Column(-(len(b.targets) - r.i + len(b.hidden)))
		}
	}
	return Column(r.i)
}
