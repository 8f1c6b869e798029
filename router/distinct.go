package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// DISTINCT aggregates across shards.
//
// A value x of count(DISTINCT x) may be on several shards, so neither
// their counts nor their sums add up. Instead each shard groups by x as
// well, within the query's groups, and returns its rows ordered by the
// group key then x: a shard's count(DISTINCT x) in the group of one x is
// 1 (or 0 for NULL), its sum(DISTINCT x) is x. The executor merges the
// shards' sorted rows, so that equal x of a group come one after another,
// and folds a DISTINCT aggregate once per x; the other aggregates add up
// over the x as over shards. The shards sort with the memory PostgreSQL
// gives a sort; the proxy holds one row per shard and, as for any grouped
// query, one entry per group. A FILTER becomes part of the value: shards
// group by CASE WHEN filter THEN x END, the x that count.
//
// DISTINCT aggregates of several values (or FILTERs) cannot share one
// order of the shards' rows: multidistinct.go gives each value a grouping
// set of its own. min, max, bool_and, bool_or, bit_and and bit_or need no
// dedupe: DISTINCT does not change them. bit_xor does: x XOR x is 0.

// distinctValue returns what an aggregate call dedupes: its argument, or
// CASE WHEN filter THEN argument END; nil when it dedupes nothing.
func distinctValue(fc *pg_query.FuncCall) (*pg_query.Node, error) {
	if !fc.AggDistinct {
		return nil, nil
	}
	switch f := mergeable[funcName(fc)]; {
	case collects(f):
		return collectedDistinct(fc)
	case f == AggCount, f == AggSum, f == AggAvg, f == AggBitXor:
	default:
		return nil, nil
	}
	if len(fc.Args) != 1 {
		return nil, rejectf("%s(DISTINCT …) of %d arguments", funcName(fc), len(fc.Args))
	}
	arg := proto.Clone(fc.Args[0]).(*pg_query.Node)
	if fc.AggFilter == nil {
		return arg, nil
	}
	when := &pg_query.CaseWhen{Expr: proto.Clone(fc.AggFilter).(*pg_query.Node), Result: arg}
	return &pg_query.Node{Node: &pg_query.Node_CaseExpr{CaseExpr: &pg_query.CaseExpr{
		Args: []*pg_query.Node{{Node: &pg_query.Node_CaseWhen{CaseWhen: when}}},
	}}}, nil
}

// collectedDistinct returns what a collecting aggregate with DISTINCT
// dedupes: its value, which the merge of the shards' rows sorted by it
// also orders, as PostgreSQL's sort for DISTINCT does: ascending, NULLs
// last. Another ORDER BY, a separator read from rows (string_agg
// dedupes the pair) and a FILTER (whose rejected rows would share the
// NULL value with NULL values) are refused.
func collectedDistinct(fc *pg_query.FuncCall) (*pg_query.Node, error) {
	name := funcName(fc)
	switch {
	case len(fc.Args) != collectArgs(mergeable[name]):
		return nil, rejectf("%s(DISTINCT …) of %d arguments", name, len(fc.Args))
	case fc.AggFilter != nil:
		return nil, rejectf("%s(DISTINCT …) FILTER", name)
	case len(fc.Args) == 2 && hasColumnRef(fc.Args[1]):
		return nil, rejectf("%s(DISTINCT …) with a separator read from rows", name)
	}
	for _, n := range fc.AggOrder {
		s := n.GetSortBy()
		if len(fc.AggOrder) > 1 || s == nil || !sameExpr(s.Node, fc.Args[0]) || s.SortbyDir == pg_query.SortByDir_SORTBY_DESC ||
			s.SortbyDir == pg_query.SortByDir_SORTBY_USING || s.SortbyNulls == pg_query.SortByNulls_SORTBY_NULLS_FIRST {
			return nil, rejectf("%s(DISTINCT … ORDER BY) in an order other than the value's ascending one", name)
		}
	}
	return proto.Clone(fc.Args[0]).(*pg_query.Node), nil
}

// noteDistinct records the value a DISTINCT aggregate call dedupes and
// returns its index in distinctArgs, -1 when it dedupes none.
func (b *mergeBuilder) noteDistinct(fc *pg_query.FuncCall) (int, error) {
	v, err := distinctValue(fc)
	if err != nil || v == nil {
		return -1, err
	}
	for i, d := range b.distinctArgs {
		if sameExpr(d, v) {
			return i, nil
		}
	}
	b.distinctArgs = append(b.distinctArgs, v)
	return len(b.distinctArgs) - 1, nil
}

// sortedGroups makes the shards group by the DISTINCT value too and sort
// by the group key then the value, and records that order in the Merge;
// several values get grouping sets instead (taggedGroups).
func (b *mergeBuilder) sortedGroups() error {
	if hasGroupingSets(b.sel) && b.finerThanSets() {
		return rejectf("DISTINCT aggregates, and aggregates with ORDER BY, with GROUPING SETS, ROLLUP or CUBE")
	}
	switch len(b.distinctArgs) {
	case 0:
		return nil
	case 1:
	default:
		if hasGroupingSets(b.sel) {
			return rejectf("DISTINCT aggregates of several values with GROUPING SETS, ROLLUP or CUBE")
		}
		return b.taggedGroups()
	}
	b.distinctRef = b.hide(b.distinctArgs[0])
	b.sortRefs = append(append([]ref{}, b.groupRefs...), b.distinctRef)
	return nil
}

// finerThanSets reports whether the query's aggregates would make the
// shards group more finely than its grouping sets: by a DISTINCT value or
// an aggregate's ORDER BY keys, which every set would then group by too.
// The empty set () would then have no row when there are no rows, where
// PostgreSQL has one; and a DISTINCT value that is one of the sets'
// columns is not constant in the sets that do not group by it.
func (b *mergeBuilder) finerThanSets() bool {
	if b.subgrouped() {
		return true
	}
	for _, a := range b.aggs {
		if a.distinct && a.f != AggMin && a.f != AggMax && a.f != AggBoolAnd && a.f != AggBoolOr {
			return true
		}
	}
	return false
}

// shardOrder returns what shards add to GROUP BY and their ORDER BY when
// they group more finely than the query: the DISTINCT value, the
// separators of string_agg and the ORDER BY keys of collecting aggregates
// (by position: they are hidden columns), and the positions of the group
// key and those values in their select list, in Merge.SortedBy's order.
func (b *mergeBuilder) shardOrder() (group, order []*pg_query.Node) {
	pos := func(r ref) *pg_query.Node {
		p := r.i + 1
		if r.kind == 'h' {
			p += len(b.targets)
		}
		return pg_query.MakeAConstIntNode(int64(p), -1)
	}
	switch {
	case b.tag != nil:
		if s := b.tag.groupingSets(); s != nil {
			group = append(group, s)
		}
	case len(b.distinctArgs) == 1:
		group = append(group, proto.Clone(b.distinctArgs[0]).(*pg_query.Node))
	}
	for _, g := range b.subgroups {
		group = append(group, proto.Clone(g).(*pg_query.Node))
	}
	for i, r := range b.sortRefs {
		s := &pg_query.SortBy{Node: pos(r), SortbyDir: pg_query.SortByDir_SORTBY_DEFAULT, SortbyNulls: pg_query.SortByNulls_SORTBY_NULLS_DEFAULT}
		if i < len(b.sortDirs) && i >= len(b.groupRefs) {
			group = append(group, pos(r))
			if k := b.sortDirs[i]; k.Desc {
				s.SortbyDir = pg_query.SortByDir_SORTBY_DESC
				if !k.NullsFirst {
					s.SortbyNulls = pg_query.SortByNulls_SORTBY_NULLS_LAST
				}
			} else if k.NullsFirst {
				s.SortbyNulls = pg_query.SortByNulls_SORTBY_NULLS_FIRST
			}
		}
		order = append(order, &pg_query.Node{Node: &pg_query.Node_SortBy{SortBy: s}})
	}
	return group, order
}
