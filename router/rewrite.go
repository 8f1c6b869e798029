package router

import (
	"fmt"
	"math"
	"strconv"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// rewrite returns the SQL shards run instead of the client's: avg split
// into sum and count, hidden columns appended, LIMIT widened by OFFSET,
// and for grouped queries no HAVING, ORDER BY, DISTINCT or LIMIT (the
// executor applies them to the combined groups). It returns "" when the
// client's SQL serves as it is.
func (b *mergeBuilder) rewrite(version int32) (string, error) {
	out := proto.Clone(b.sel).(*pg_query.SelectStmt)
	changed := b.addedOrder
	for i, n := range out.TargetList {
		rt := n.GetResTarget()
		switch {
		case rt == nil || i >= len(b.targets):
		case b.targets[i].agg == AggAvg:
			rt.Val.GetFuncCall().Funcname = []*pg_query.Node{pg_query.MakeStrNode("sum")}
			if rt.Name == "" {
				rt.Name = "avg"
			}
			changed = true
		case b.targets[i].outer:
			rt.Val = placeholder(rt.Val)
			rt.Name = b.targets[i].name
			changed = true
		}
	}
	avgs := map[int]bool{} // hidden avg aggregates, which shards sum
	for _, a := range b.aggs {
		if a.f == AggAvg && a.at.kind == 'h' {
			avgs[a.at.i] = true
		}
	}
	for i, h := range b.hidden {
		val := proto.Clone(h).(*pg_query.Node)
		if f := val.GetFuncCall(); f != nil && avgs[i] {
			f.Funcname = []*pg_query.Node{pg_query.MakeStrNode("sum")}
		}
		out.TargetList = append(out.TargetList, pg_query.MakeResTargetNodeWithNameAndVal(fmt.Sprintf("__shardgate_%d", i+1), val, -1))
		changed = true
	}
	switch {
	case b.grouped:
		changed = changed || out.HavingClause != nil || out.SortClause != nil || out.DistinctClause != nil || out.LimitCount != nil || out.LimitOffset != nil
		kept := keptParams(out)
		out.HavingClause, out.SortClause, out.DistinctClause = kept, nil, nil
		out.LimitCount, out.LimitOffset, out.LimitOption = nil, nil, pg_query.LimitOption_LIMIT_OPTION_DEFAULT
		b.cheapen(out.TargetList)
		if b.subgrouped() {
			group, order := b.shardOrder()
			out.GroupClause = append(out.GroupClause, group...)
			out.SortClause = order
			changed = true
		}
	case out.LimitOffset != nil:
		changed = true
		shardLimit(out, &b.m)
	}
	if !changed {
		return "", nil
	}
	sql, err := deparse(version, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: out}})
	if err != nil {
		return "", fmt.Errorf("router: rewrite for shards: %w", err)
	}
	return sql, nil
}

// keptParams returns the HAVING that shards of a grouped query get in
// place of the HAVING, LIMIT and OFFSET the proxy applies: none, or,
// when those hold parameters, a condition that is always true but names
// each parameter where the client's statement did, so that the shards'
// statement has the client's parameters, typed as PostgreSQL infers them
// there (a LIMIT's as bigint): (CASE WHEN false THEN … END) IS NULL.
func keptParams(sel *pg_query.SelectStmt) *pg_query.Node {
	var terms []*pg_query.Node
	if sel.HavingClause != nil {
		// Also without parameters: the shards analyze the HAVING where
		// the client wrote it, so that a term PostgreSQL refuses there (a
		// column neither grouped nor aggregated: 42803) fails as it would.
		terms = append(terms, sel.HavingClause)
	}
	for _, n := range []*pg_query.Node{sel.LimitCount, sel.LimitOffset} {
		if n != nil && hasParam(n) {
			terms = append(terms, int8Cast(n))
		}
	}
	if len(terms) == 0 {
		return nil
	}
	var conds []*pg_query.Node
	for _, t := range terms {
		conds = append(conds, &pg_query.Node{Node: &pg_query.Node_NullTest{NullTest: &pg_query.NullTest{
			Arg: placeholder(t), Nulltesttype: pg_query.NullTestType_IS_NULL,
		}}})
	}
	if len(conds) == 1 {
		return conds[0]
	}
	return pg_query.MakeBoolExprNode(pg_query.BoolExprType_AND_EXPR, conds, -1)
}

// placeholder is what shards return in place of an expression over
// aggregates: CASE WHEN false THEN (expr) END. The planner drops the
// branch without evaluating it (eval_const_expressions), so neither the
// expression nor its aggregates run; but the server still analyzes it
// where the client wrote it, so that its errors (an ungrouped column, a
// function that does not exist, an aggregate in GROUP BY 2) are
// PostgreSQL's own.
func placeholder(expr *pg_query.Node) *pg_query.Node {
	f := &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{}}}}}
	return &pg_query.Node{Node: &pg_query.Node_CaseExpr{CaseExpr: &pg_query.CaseExpr{
		Args: []*pg_query.Node{{Node: &pg_query.Node_CaseWhen{CaseWhen: &pg_query.CaseWhen{Expr: f, Result: expr}}}},
	}}}
}

// limitPlusOffset builds LIMIT limit + offset: a constant when both are,
// else a sum of bigint casts (so that parameter types stay inferable).
func limitPlusOffset(limit, offset *Expr) *pg_query.Node {
	if limit.Param == 0 && offset.Param == 0 {
		l, lok := parseInt64(limit.Const)
		o, ook := parseInt64(offset.Const)
		if lok && ook && l >= 0 && o >= 0 && l <= math.MaxInt64-o {
			return pg_query.MakeAConstIntNode(l+o, -1)
		}
	}
	side := func(e *Expr) *pg_query.Node {
		var n *pg_query.Node
		if e.Param != 0 {
			n = pg_query.MakeParamRefNode(int32(e.Param), -1)
		} else {
			n = pg_query.MakeAConstStrNode(e.Const, -1)
		}
		return int8Cast(n)
	}
	return pg_query.MakeAExprNode(pg_query.A_Expr_Kind_AEXPR_OP, []*pg_query.Node{pg_query.MakeStrNode("+")}, side(limit), side(offset), -1)
}

func parseInt64(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// int8Cast is n::pg_catalog.int8.
func int8Cast(n *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
		Arg:      n,
		TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("int8")}, Typemod: -1},
	}}}
}
