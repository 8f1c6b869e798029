package router

import (
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Collecting aggregates across shards: string_agg, array_agg, json_agg,
// jsonb_agg.
//
// Each shard computes the aggregate as the client wrote it, and the
// executor concatenates the shards' partial results. Without ORDER BY in
// the aggregate the order of its values is unspecified in PostgreSQL; the
// executor appends the partials shard after shard. With ORDER BY y, shards
// group by y as well, within the query's groups, and return their rows
// sorted by the group key then y (in the aggregate's directions): each
// row's partial holds the values of one y, and the executor, merging the
// shards' sorted rows, appends them in y order (Merge.SortedBy). The
// shards sort with the memory PostgreSQL gives a sort; the proxy holds one
// row per shard and, as for any grouped query, one entry per group. Every
// ordered collecting aggregate of a query must have the same ORDER BY,
// and none may be combined with DISTINCT aggregates, which order the rows
// by their value.
//
// string_agg puts the separator of each value's own row before it: shards
// return the separator of a row's partial in a hidden column (typed as
// the aggregate's argument), and group by it too when it is not a
// constant, so that one separator serves the whole partial. json_agg
// writes "\n " before the elements after the first when its argument is
// an array or a composite: a hidden column asks the shard's catalog.

// collects reports whether f concatenates its values.
func collects(f AggFunc) bool {
	switch f {
	case AggStringAgg, AggArrayAgg, AggJSONAgg, AggJSONBAgg:
		return true
	}
	return false
}

// collectArgs is the number of arguments of a collecting aggregate.
func collectArgs(f AggFunc) int {
	if f == AggStringAgg {
		return 2
	}
	return 1
}

// noteCollect records what a collecting aggregate call needs of the
// shards' grouping and order.
func (b *mergeBuilder) noteCollect(fc *pg_query.FuncCall) error {
	f, ok := mergeable[funcName(fc)]
	if !ok || !collects(f) || fc.AggDistinct {
		return nil // DISTINCT: ordered by the value (distinct.go)
	}
	if f == AggStringAgg && len(fc.Args) == 2 && hasColumnRef(fc.Args[1]) && !b.hasSubgroup(fc.Args[1]) {
		b.subgroups = append(b.subgroups, proto.Clone(fc.Args[1]).(*pg_query.Node))
	}
	if len(fc.AggOrder) == 0 {
		return nil
	}
	for _, n := range fc.AggOrder {
		if s := n.GetSortBy(); s == nil || s.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(s.UseOp) > 0 {
			return rejectf("%s(… ORDER BY … USING)", funcName(fc))
		}
	}
	switch {
	case b.collectOrder == nil:
		b.collectOrder = fc.AggOrder
	case !sameExprs(b.collectOrder, fc.AggOrder):
		return rejectf("aggregates with different ORDER BY")
	}
	return nil
}

// checkCollect rejects what the shards cannot sort for: ordered collecting
// aggregates together with DISTINCT ones.
func (b *mergeBuilder) checkCollect() error {
	if b.collectOrder != nil && len(b.distinctArgs) > 0 {
		return rejectf("DISTINCT aggregates together with an aggregate's ORDER BY")
	}
	return nil
}

// subgrouped reports whether shards group more finely than the query, so
// that an aggregate without GROUP BY may get no row from a shard.
func (b *mergeBuilder) subgrouped() bool {
	return len(b.distinctArgs) > 0 || b.collectOrder != nil || len(b.subgroups) > 0
}

func (b *mergeBuilder) hasSubgroup(n *pg_query.Node) bool {
	for _, g := range b.subgroups {
		if sameExpr(g, n) {
			return true
		}
	}
	return false
}

// newAgg makes the aggregate column at of call fc, with the hidden
// columns it needs: avg's count, string_agg's separator, json_agg's
// argument kind.
func (b *mergeBuilder) newAgg(fc *pg_query.FuncCall, at, count ref, f AggFunc, value int) (mergeAgg, error) {
	a := mergeAgg{at: at, count: count, f: f, distinct: value >= 0, value: value}
	switch f {
	case AggStringAgg:
		a.sep = b.hide(separator(fc))
	case AggJSONAgg:
		n, err := structured(fc.Args[0])
		if err != nil {
			return a, err
		}
		a.structured = b.hide(n)
	case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
		a.moments = b.hideMoments(fc)
	}
	if isRegression(f) && f != AggRegrCount {
		a.regression = b.hideRegression(fc)
	}
	return a, nil
}

// separator is the hidden column of string_agg(x, sep)'s separator:
// CASE WHEN false THEN string_agg(x, sep) ELSE sep END, which gives a
// constant separator the type the aggregate gives it (bytea for bytea
// values) and whose aggregate the planner drops unevaluated.
func separator(fc *pg_query.FuncCall) *pg_query.Node {
	agg := &pg_query.FuncCall{
		Funcname: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("string_agg")},
		Args:     []*pg_query.Node{proto.Clone(fc.Args[0]).(*pg_query.Node), proto.Clone(fc.Args[1]).(*pg_query.Node)},
	}
	n := placeholder(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: agg}})
	n.GetCaseExpr().Defresult = proto.Clone(fc.Args[1]).(*pg_query.Node)
	return n
}

// structuredSQL says whether the type of __shardgate_x, domains resolved,
// is one json_agg sets apart with a newline (json_categorize_type's
// JSONTYPE_ARRAY and JSONTYPE_COMPOSITE): a true array, a composite or
// record. The aggregate min() belongs to the enclosing query.
const structuredSQL = `SELECT (WITH RECURSIVE __shardgate_t(oid, typtype, typbasetype, typelem, typsubscript) AS (
	SELECT t.oid, t.typtype, t.typbasetype, t.typelem, t.typsubscript FROM pg_catalog.pg_type t
	WHERE t.oid = pg_catalog.min(pg_catalog.pg_typeof(__shardgate_x)::pg_catalog.oid)
	UNION ALL SELECT t.oid, t.typtype, t.typbasetype, t.typelem, t.typsubscript FROM pg_catalog.pg_type t
	JOIN __shardgate_t d ON t.oid = d.typbasetype WHERE d.typtype = 'd')
	SELECT t.typtype = 'c' OR t.oid = 'pg_catalog.record'::pg_catalog.regtype
		OR t.typelem <> 0 AND t.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc
	FROM __shardgate_t t WHERE t.typtype <> 'd')`

// structured is the hidden column that says whether json_agg's argument x
// is structured (structuredSQL with x in place of __shardgate_x).
func structured(x *pg_query.Node) (*pg_query.Node, error) {
	tree, err := pg_query.Parse(structuredSQL)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, fmt.Errorf("router: json_agg's argument kind: %v", err)
	}
	n := tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().Val
	walk(n, func(c *pg_query.Node) bool {
		if fc := c.GetFuncCall(); fc != nil && funcName(fc) == "pg_typeof" && len(fc.Args) == 1 {
			if f := columnRef(fc.Args[0]); len(f) == 1 && f[0] == "__shardgate_x" {
				fc.Args[0] = proto.Clone(x).(*pg_query.Node)
				return false
			}
		}
		return true
	})
	return n, nil
}

// hasColumnRef reports whether an expression reads a column (outside
// subqueries, which a GROUP BY could not hold anyway).
func hasColumnRef(n *pg_query.Node) bool {
	found := false
	walkExpr(n, func(x *pg_query.Node) bool {
		if x.GetColumnRef() != nil {
			found = true
		}
		return !found
	}, func(*pg_query.SubLink) { found = true })
	return found
}

func sameExprs(a, b []*pg_query.Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !sameExpr(a[i], b[i]) {
			return false
		}
	}
	return true
}

// sortedCollect makes the shards group by the ORDER BY keys of the
// collecting aggregates and sort by the group key then those keys.
func (b *mergeBuilder) sortedCollect() {
	if b.collectOrder == nil {
		return
	}
	b.sortRefs = append([]ref{}, b.groupRefs...)
	b.sortDirs = make([]SortKey, len(b.groupRefs))
	for _, n := range b.collectOrder {
		s := n.GetSortBy()
		b.sortRefs = append(b.sortRefs, b.hide(s.Node))
		b.sortDirs = append(b.sortDirs, sortKey(s))
	}
}
