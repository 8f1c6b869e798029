package router

import (
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
// the query's set. A value written differently from the GROUP BY item it
// equals (t.a and a) would make GROUPING tag two sets alike; the tags of
// the other sets then differ from the expected ones, and the executor
// refuses the answer instead of merging it.

// maxTagSets bounds the grouping sets of a query's DISTINCT values:
// GROUPING takes at most 31 arguments, and each set costs the shards a
// grouping of all their rows.
const maxTagSets = 16

// tagBuilder holds the grouping sets of the DISTINCT values while the
// Merge is built.
type tagBuilder struct {
	sets   []*pg_query.Node // the values that have a grouping set
	setOf  []int            // for each of distinctArgs, its index in sets or -1
	values []ref            // the hidden column of each of sets
	at     ref              // the hidden tag column
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
		if b.isGroupExpr(v) {
			t.setOf = append(t.setOf, -1)
			continue
		}
		if v.GetRowExpr() != nil {
			// GROUPING SETS would read (x, y) as a set of two columns.
			return rejectf("DISTINCT aggregates of a row value together with DISTINCT aggregates of other values")
		}
		t.setOf = append(t.setOf, len(t.sets))
		t.sets = append(t.sets, v)
	}
	if len(t.sets) > maxTagSets {
		return rejectf("DISTINCT aggregates of more than %d different values (or FILTERs)", maxTagSets)
	}
	for _, v := range t.sets {
		t.values = append(t.values, b.hide(proto.Clone(v).(*pg_query.Node)))
	}
	t.at = b.hide(t.expr())
	b.sortRefs = append(append(append([]ref{}, b.groupRefs...), t.at), t.values...)
	b.tag = t
	return nil
}

// isGroupExpr reports whether n is written like a GROUP BY expression.
func (b *mergeBuilder) isGroupExpr(n *pg_query.Node) bool {
	for _, g := range b.groupExprs {
		if sameExpr(g.expr, n) {
			return true
		}
	}
	return false
}

// expr is the tag column: GROUPING over the values that have a set, or
// 0 when every value is a GROUP BY expression (one set).
func (t *tagBuilder) expr() *pg_query.Node {
	if len(t.sets) == 0 {
		return pg_query.MakeAConstIntNode(0, -1)
	}
	f := &pg_query.GroupingFunc{}
	for _, v := range t.sets {
		f.Args = append(f.Args, proto.Clone(v).(*pg_query.Node))
	}
	return &pg_query.Node{Node: &pg_query.Node_GroupingFunc{GroupingFunc: f}}
}

// groupingSets is what the shards add to GROUP BY: GROUPING SETS ((),
// v1, v2, …), which crossed with the query's GROUP BY gives its groups
// alone and with each value; nil when no value has a set.
func (t *tagBuilder) groupingSets() *pg_query.Node {
	if len(t.sets) == 0 {
		return nil
	}
	s := &pg_query.GroupingSet{Kind: pg_query.GroupingSetKind_GROUPING_SET_SETS}
	s.Content = append(s.Content, &pg_query.Node{Node: &pg_query.Node_GroupingSet{GroupingSet: &pg_query.GroupingSet{Kind: pg_query.GroupingSetKind_GROUPING_SET_EMPTY}}})
	for _, v := range t.sets {
		s.Content = append(s.Content, proto.Clone(v).(*pg_query.Node))
	}
	return &pg_query.Node{Node: &pg_query.Node_GroupingSet{GroupingSet: s}}
}

// plain is the tag of the rows of the query's groups alone: GROUPING's
// bit of every value set.
func (t *tagBuilder) plain() int64 { return 1<<len(t.sets) - 1 }

// tagOf is the tag of the rows an aggregate deduping distinctArgs[value]
// combines (value -1: one that dedupes nothing). GROUPING's first
// argument is its most significant bit.
func (t *tagBuilder) tagOf(value int) int64 {
	if value < 0 || t.setOf[value] < 0 {
		return t.plain()
	}
	return t.plain() &^ (1 << (len(t.sets) - 1 - t.setOf[value]))
}

// merge describes the tags for the executor, once columns are final.
func (t *tagBuilder) merge(b *mergeBuilder) *Tagged {
	m := &Tagged{Column: b.column(t.at), Plain: t.plain()}
	for i, v := range t.values {
		m.Sets = append(m.Sets, TaggedSet{Tag: t.tagOf(t.setIndex(i)), Value: b.column(v)})
	}
	return m
}

// setIndex returns the index in distinctArgs of the value of set i.
func (t *tagBuilder) setIndex(i int) int {
	for k, s := range t.setOf {
		if s == i {
			return k
		}
	}
	return -1
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
func presentOne(v *pg_query.Node) *pg_query.Node {
	one := &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
		Arg:      pg_query.MakeAConstIntNode(1, -1),
		TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("int8")}, Typemod: -1},
	}}}
	n := catalogCall("max", one)
	n.GetFuncCall().AggFilter = &pg_query.Node{Node: &pg_query.Node_NullTest{NullTest: &pg_query.NullTest{
		Arg: proto.Clone(v).(*pg_query.Node), Nulltesttype: pg_query.NullTestType_IS_NOT_NULL,
	}}}
	return n
}
