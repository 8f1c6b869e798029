package router

import (
	"fmt"
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// DISTINCT aggregates of several values (or FILTERs).
//
// count(DISTINCT a) and count(DISTINCT b) need the shards' rows sorted by
// a and by b: one order cannot serve both. Each shard still runs one
// statement, on one snapshot and one scan of its rows, as PostgreSQL runs
// the client's: it groups them by grouping sets, the query's groups alone
// for the aggregates that dedupe nothing, and the query's groups with each
// value for the aggregates that dedupe it.
//
//	SELECT g, count(DISTINCT a), count(DISTINCT b), sum(c)
//	FROM t GROUP BY g
//	  shards: SELECT g, count(DISTINCT a), count(DISTINCT b), sum(c),
//	    a AS __shardgate_1, b AS __shardgate_2, GROUPING(a, b) AS __shardgate_3
//	  FROM t GROUP BY g, GROUPING SETS ((), a, b) ORDER BY 1, 7, 5, 6
//
// (with each count(DISTINCT v) computed as its set needs it, see cheapen).
//
// GROUPING tags each row with its set (Merge.Tagged): 3 for the query's
// groups, 1 for the groups of a, 2 for those of b. Every set computes
// every aggregate; the executor reads from a row only the aggregates of
// its set (Aggregate.Tag): sum(c) from the rows tagged 3, count(DISTINCT
// a) once per a from the rows tagged 1, whose count is 1 or 0 (NULL). The
// shards' rows arrive sorted by the group key, the tag, then the values,
// so that a group is one run of rows and each value of a set one run in
// it: the proxy holds one row per shard and one entry per group, never a
// set of values, as for one value. The statement's select list is the
// client's with hidden columns appended, so that its RowDescription is
// the one the client's statement has: the same names, types, type
// modifiers and table columns.
//
// A value that is also a GROUP BY expression is constant in a group and
// needs no set: its aggregates fold once per group, from the first row of
// the query's set. A column qualified by the name of the query's only
// table, or not, is the same column (md.a and a). A value written
// differently in another way from the GROUP BY item it equals would make
// GROUPING tag two sets alike; the tags of the other sets then differ
// from the expected ones, and the executor refuses the answer instead of
// merging it.
//
// A row value (a, b) gets the set of its fields, GROUPING SETS ((), (a,
// b), …): grouping by them is grouping by the row (record equality is its
// fields', NULL equal to NULL), and each field is a column of a type the
// proxy compares, where the record is not. Its count is 1 in each of its
// set's rows: a row is never NULL, even ROW(NULL, NULL).

// maxTagSets bounds the grouping sets of a query's DISTINCT values:
// GROUPING takes at most 31 arguments, and each set costs the shards a
// grouping of all their rows.
const maxTagSets = 16

// tagBuilder holds the grouping sets of the DISTINCT values while the
// Merge is built. A set groups by one column or more: a value's own, or
// the fields of a row value (a, b) that are not GROUP BY expressions —
// grouping by them is grouping by the row, whose equality is its
// fields'. GROUPING's arguments are every set's columns, each once, so
// that the tag of a set has a 0 for each of its columns and a 1 for the
// others.
type tagBuilder struct {
	sets  [][]*pg_query.Node // the columns of each grouping set
	setOf []int              // for each of distinctArgs, its index in sets or -1
	args  []*pg_query.Node   // GROUPING's arguments: the sets' columns
	cols  []ref              // the hidden column of each of args
	at    ref                // the hidden tag column
}

// taggedGroups gives each DISTINCT value that is not a GROUP BY
// expression a grouping set and makes the shards sort their rows by the
// group key, the tag, then the values.
func (b *mergeBuilder) taggedGroups() error {
	if len(b.subgroups) > 0 {
		return rejectf("string_agg with a separator read from rows together with DISTINCT aggregates of different values")
	}
	t := &tagBuilder{}
	for _, v := range b.distinctArgs {
		cols := b.setColumns(v)
		if len(cols) == 0 {
			t.setOf = append(t.setOf, -1) // constant in a group
			continue
		}
		t.setOf = append(t.setOf, t.set(cols))
	}
	if err := t.checkCollations(b); err != nil {
		return err
	}
	if len(t.sets) > maxTagSets || len(t.args) > maxGroupingArgs {
		e := unsupported(hintOneShard, "DISTINCT aggregates of more than %d different values (or FILTERs) are not supported across shards", maxTagSets)
		e.Detail = fmt.Sprintf("The query has %d; each costs every shard one more grouping of all its rows.", len(t.sets))
		if len(t.args) > maxGroupingArgs {
			e.Message = fmt.Sprintf("DISTINCT aggregates of more than %d different columns are not supported across shards", maxGroupingArgs)
			e.Detail = fmt.Sprintf("The query's DISTINCT values have %d; GROUPING, which tells their grouping sets apart, takes at most %d.", len(t.args), maxGroupingArgs)
		}
		return e
	}
	for _, c := range t.args {
		t.cols = append(t.cols, b.hide(proto.Clone(c).(*pg_query.Node)))
	}
	t.at = b.hide(t.expr())
	b.sortRefs = append(append(append([]ref{}, b.groupRefs...), t.at), t.cols...)
	b.tag = t
	return nil
}

// maxGroupingArgs is the most arguments GROUPING takes.
const maxGroupingArgs = 31

// setColumns returns what a grouping set of DISTINCT value v groups by:
// v, or the fields of a row value written (a, b) or ROW(a, b); without
// those that are GROUP BY expressions, constant in a group. None when v
// is constant in a group.
func (b *mergeBuilder) setColumns(v *pg_query.Node) []*pg_query.Node {
	fields := []*pg_query.Node{v}
	if f, _ := rowFields(v); f != nil {
		fields = f
	}
	var out []*pg_query.Node
	for _, f := range fields {
		if !b.isGroupExpr(f) && !slices.ContainsFunc(out, func(o *pg_query.Node) bool { return sameExpr(o, f) }) {
			out = append(out, f)
		}
	}
	if len(fields) > 1 && b.isGroupExpr(v) {
		return nil
	}
	return out
}

// rowFields returns the columns that group a row value v as the row
// does: the fields of ROW(a, b) or (a, b); for a FILTERed one, CASE WHEN
// filter THEN (a, b) END, each field under the filter and the filter
// (IS TRUE), so that a row the filter drops and one of NULL fields
// differ. filter is the FILTER's condition, nil without one; fields is
// nil when v is no row value.
func rowFields(v *pg_query.Node) (fields []*pg_query.Node, filter *pg_query.Node) {
	if r := v.GetRowExpr(); r != nil && len(r.Args) > 0 {
		return r.Args, nil
	}
	c := v.GetCaseExpr()
	if c == nil || c.Arg != nil || c.Defresult != nil || len(c.Args) != 1 {
		return nil, nil
	}
	w := c.Args[0].GetCaseWhen()
	if w == nil || w.Result.GetRowExpr() == nil || len(w.Result.GetRowExpr().Args) == 0 {
		return nil, nil
	}
	for _, f := range w.Result.GetRowExpr().Args {
		when := &pg_query.CaseWhen{Expr: proto.Clone(w.Expr).(*pg_query.Node), Result: proto.Clone(f).(*pg_query.Node)}
		fields = append(fields, &pg_query.Node{Node: &pg_query.Node_CaseExpr{CaseExpr: &pg_query.CaseExpr{
			Args: []*pg_query.Node{{Node: &pg_query.Node_CaseWhen{CaseWhen: when}}},
		}}})
	}
	fields = append(fields, &pg_query.Node{Node: &pg_query.Node_BooleanTest{BooleanTest: &pg_query.BooleanTest{
		Arg: proto.Clone(w.Expr).(*pg_query.Node), Booltesttype: pg_query.BoolTestType_IS_TRUE,
	}}})
	return fields, w.Expr
}

// set returns the index of the grouping set of cols, adding it unless a
// set of the same columns exists ((a, b) and (b, a) group alike).
func (t *tagBuilder) set(cols []*pg_query.Node) int {
	same := func(x, y *pg_query.Node) bool { return sameExpr(x, y) }
	for i, s := range t.sets {
		if len(s) == len(cols) && !slices.ContainsFunc(cols, func(c *pg_query.Node) bool {
			return !slices.ContainsFunc(s, func(x *pg_query.Node) bool { return same(x, c) })
		}) {
			return i
		}
	}
	for _, c := range cols {
		if !slices.ContainsFunc(t.args, func(a *pg_query.Node) bool { return same(a, c) }) {
			t.args = append(t.args, c)
		}
	}
	t.sets = append(t.sets, cols)
	return len(t.sets) - 1
}

// checkCollations refuses DISTINCT values (or a value and a GROUP BY
// expression) that are one expression under different collations (note
// and note COLLATE "C"): PostgreSQL then sorts the grouping sets' rows by
// the one in place of the other (its sort key of the second is the first
// without its COLLATE), so that a shard's rows of one set do not come in
// the order the merge needs, and equal values of two shards would be
// counted twice.
func (t *tagBuilder) checkCollations(b *mergeBuilder) error {
	exprs := slices.Clone(t.args)
	for _, g := range b.groupExprs {
		exprs = append(exprs, g.expr)
	}
	for i, x := range exprs {
		for _, y := range exprs[i+1:] {
			if !sameExpr(x, y) && sameExpr(withoutCollate(x), withoutCollate(y)) {
				return rejectf("DISTINCT aggregates of one expression under different collations")
			}
		}
	}
	return nil
}

// withoutCollate returns a copy of n without its COLLATE clauses.
func withoutCollate(n *pg_query.Node) *pg_query.Node {
	c := proto.Clone(n).(*pg_query.Node)
	for {
		cc := c.GetCollateClause()
		if cc == nil {
			break
		}
		c = cc.Arg
	}
	walk(c, func(k *pg_query.Node) bool {
		switch v := k.Node.(type) {
		case *pg_query.Node_AExpr:
			v.AExpr.Lexpr, v.AExpr.Rexpr = stripCollate(v.AExpr.Lexpr), stripCollate(v.AExpr.Rexpr)
		case *pg_query.Node_FuncCall:
			for i, a := range v.FuncCall.Args {
				v.FuncCall.Args[i] = stripCollate(a)
			}
		case *pg_query.Node_TypeCast:
			v.TypeCast.Arg = stripCollate(v.TypeCast.Arg)
		}
		return true
	})
	return c
}

// stripCollate returns n's argument when n is a COLLATE clause, else n.
func stripCollate(n *pg_query.Node) *pg_query.Node {
	for n != nil && n.GetCollateClause() != nil {
		n = n.GetCollateClause().Arg
	}
	return n
}

// isGroupExpr reports whether n is written like a GROUP BY expression,
// or differs from one only in how its columns name the query's only
// table (md.a and a): both are the same column then.
func (b *mergeBuilder) isGroupExpr(n *pg_query.Node) bool {
	for _, g := range b.groupExprs {
		if sameExpr(g.expr, n) {
			return true
		}
	}
	names := onlyTable(b.sel)
	if names == nil {
		return false
	}
	bare := unqualified(n, names)
	for _, g := range b.groupExprs {
		if sameExpr(unqualified(g.expr, names), bare) {
			return true
		}
	}
	return false
}

// onlyTable returns the qualifiers that name the only FROM item of sel
// when it is a table — its alias, else its name, with its schema or
// without — and nil otherwise: with a join or a subquery an unqualified
// name may be another item's column.
func onlyTable(sel *pg_query.SelectStmt) [][]string {
	if len(sel.FromClause) != 1 {
		return nil
	}
	rv := sel.FromClause[0].GetRangeVar()
	if rv == nil {
		return nil
	}
	if rv.Alias != nil {
		return [][]string{{rv.Alias.Aliasname}}
	}
	out := [][]string{{rv.Relname}}
	if rv.Schemaname != "" {
		out = append(out, []string{rv.Schemaname, rv.Relname})
		if rv.Catalogname != "" {
			out = append(out, []string{rv.Catalogname, rv.Schemaname, rv.Relname})
		}
	}
	return out
}

// unqualified returns a copy of n whose column references drop a
// qualifier that names the only table (onlyTable's names).
func unqualified(n *pg_query.Node, names [][]string) *pg_query.Node {
	c := proto.Clone(n).(*pg_query.Node)
	walkExpr(c, func(x *pg_query.Node) bool {
		cr := x.GetColumnRef()
		f := columnRef(x)
		if cr == nil || len(f) < 2 || len(f) != len(cr.Fields) {
			return true // not a plain column (t.*), or none
		}
		for _, q := range names {
			if slices.Equal(f[:len(f)-1], q) {
				cr.Fields = cr.Fields[len(f)-1:]
				break
			}
		}
		return true
	}, nil)
	return c
}

// expr is the tag column: GROUPING over the sets' columns, or 0 when
// every value is constant in a group (one set).
func (t *tagBuilder) expr() *pg_query.Node {
	if len(t.sets) == 0 {
		return pg_query.MakeAConstIntNode(0, -1)
	}
	f := &pg_query.GroupingFunc{}
	for _, c := range t.args {
		f.Args = append(f.Args, proto.Clone(c).(*pg_query.Node))
	}
	return &pg_query.Node{Node: &pg_query.Node_GroupingFunc{GroupingFunc: f}}
}

// groupingSets is what the shards add to GROUP BY: GROUPING SETS ((),
// v1, (a, b), …), which crossed with the query's GROUP BY gives its groups
// alone and with each set's columns; nil when no value has a set.
func (t *tagBuilder) groupingSets() *pg_query.Node {
	if len(t.sets) == 0 {
		return nil
	}
	s := &pg_query.GroupingSet{Kind: pg_query.GroupingSetKind_GROUPING_SET_SETS}
	s.Content = append(s.Content, &pg_query.Node{Node: &pg_query.Node_GroupingSet{GroupingSet: &pg_query.GroupingSet{Kind: pg_query.GroupingSetKind_GROUPING_SET_EMPTY}}})
	for _, cols := range t.sets {
		if len(cols) == 1 {
			s.Content = append(s.Content, proto.Clone(cols[0]).(*pg_query.Node))
			continue
		}
		// A parenthesised list is a set of several columns.
		r := &pg_query.RowExpr{RowFormat: pg_query.CoercionForm_COERCE_IMPLICIT_CAST}
		for _, c := range cols {
			r.Args = append(r.Args, proto.Clone(c).(*pg_query.Node))
		}
		s.Content = append(s.Content, &pg_query.Node{Node: &pg_query.Node_RowExpr{RowExpr: r}})
	}
	return &pg_query.Node{Node: &pg_query.Node_GroupingSet{GroupingSet: s}}
}

// plain is the tag of the rows of the query's groups alone: GROUPING's
// bit of every column.
func (t *tagBuilder) plain() int64 { return 1<<len(t.args) - 1 }

// tagOf is the tag of the rows an aggregate deduping distinctArgs[value]
// combines (value -1: one that dedupes nothing). GROUPING's first
// argument is its most significant bit.
func (t *tagBuilder) tagOf(value int) int64 {
	if value < 0 || t.setOf[value] < 0 {
		return t.plain()
	}
	return t.setTag(t.setOf[value])
}

// setTag is the tag of the rows of set i: a 0 for each of its columns.
func (t *tagBuilder) setTag(i int) int64 {
	tag := t.plain()
	for k, a := range t.args {
		if slices.ContainsFunc(t.sets[i], func(c *pg_query.Node) bool { return sameExpr(c, a) }) {
			tag &^= 1 << (len(t.args) - 1 - k)
		}
	}
	return tag
}

// merge describes the tags for the executor, once columns are final.
func (t *tagBuilder) merge(b *mergeBuilder) *Tagged {
	m := &Tagged{Column: b.column(t.at), Plain: t.plain()}
	for i, cols := range t.sets {
		ts := TaggedSet{Tag: t.setTag(i)}
		for n, c := range cols {
			k := slices.IndexFunc(t.args, func(a *pg_query.Node) bool { return sameExpr(a, c) })
			if n == 0 {
				ts.Value = b.column(t.cols[k])
			} else {
				ts.More = append(ts.More, b.column(t.cols[k]))
			}
		}
		m.Sets = append(m.Sets, ts)
	}
	return m
}

// cheapen replaces, in the shards' select list, the partials of the
// DISTINCT aggregates of a tagged query (count, sum, avg and bit_xor)
// with what they are in the rows of their own set, where the value is
// one per group: count(DISTINCT v) is 1 (NULL instead of 0 for a NULL v,
// which the merge adds as nothing), sum(DISTINCT v) and avg's sum are v,
// bit_xor(DISTINCT v) is v. The set of the query's groups alone and the
// other values' sets compute every aggregate too, and a DISTINCT one
// sorts its group's rows in each of them; the replacement sorts nothing.
// It is CASE WHEN false THEN <the aggregate> ELSE <replacement> END,
// typed as the aggregate (sum's int8 over int4 values), whose aggregate
// the planner drops unevaluated, as placeholder's. Collecting
// aggregates keep their DISTINCT.
func (b *mergeBuilder) cheapen(list []*pg_query.Node) {
	if b.tag == nil {
		return
	}
	at := func(r ref) *pg_query.ResTarget {
		i := r.i
		if r.kind == 'h' {
			i += len(b.sel.TargetList)
		}
		if i < 0 || i >= len(list) {
			return nil
		}
		return list[i].GetResTarget()
	}
	for _, a := range b.aggs {
		if !a.distinct || a.value < 0 {
			continue
		}
		v := b.distinctArgs[a.value]
		switch a.f {
		case AggCount:
			cheap(at(a.at), presentOne(v))
		case AggSum:
			cheap(at(a.at), catalogCall("max", v))
		case AggAvg:
			cheap(at(a.at), catalogCall("max", v))
			cheap(at(a.count), presentOne(v))
		case AggBitXor:
			cheap(at(a.at), catalogCall("bit_or", v))
		}
	}
}

// cheap makes rt's value CASE WHEN false THEN <value> ELSE with END,
// named as before.
func cheap(rt *pg_query.ResTarget, with *pg_query.Node) {
	if rt == nil || rt.Val.GetCaseExpr() != nil {
		return // not found, or done (an aggregate named twice)
	}
	if rt.Name == "" {
		rt.Name = columnName(rt)
	}
	n := placeholder(rt.Val)
	n.GetCaseExpr().Defresult = with
	rt.Val = n
}

// catalogCall is pg_catalog.name(arg).
func catalogCall(name string, arg *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: &pg_query.FuncCall{
		Funcname: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode(name)},
		Args:     []*pg_query.Node{proto.Clone(arg).(*pg_query.Node)},
	}}}
}

// presentOne is pg_catalog.max(1::int8) FILTER (WHERE v IS NOT NULL).
// A row value is never NULL (count counts ROW(NULL, NULL); IS NOT NULL
// tests its fields): it has no FILTER, or its own aggregate's.
func presentOne(v *pg_query.Node) *pg_query.Node {
	n := catalogCall("max", int8Cast(pg_query.MakeAConstIntNode(1, -1)))
	if fields, filter := rowFields(v); fields != nil {
		if filter != nil {
			n.GetFuncCall().AggFilter = proto.Clone(filter).(*pg_query.Node)
		}
		return n
	}
	// (deparse's guardTests keeps (NOT x) IS NOT NULL as it reads)
	n.GetFuncCall().AggFilter = &pg_query.Node{Node: &pg_query.Node_NullTest{NullTest: &pg_query.NullTest{
		Arg: proto.Clone(v).(*pg_query.Node), Nulltesttype: pg_query.NullTestType_IS_NOT_NULL,
	}}}
	return n
}
