package router

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// This file says which aggregates merge across shards and how the Merge
// of a grouped query reads them.

// mergeable are the aggregates whose per-shard results the executor can
// combine exactly.
var mergeable = map[string]AggFunc{
	"count": AggCount, "sum": AggSum, "min": AggMin, "max": AggMax, "avg": AggAvg,
	"bool_and": AggBoolAnd, "every": AggBoolAnd, "bool_or": AggBoolOr,
	"bit_and": AggBitAnd, "bit_or": AggBitOr, "bit_xor": AggBitXor,
	"string_agg": AggStringAgg, "array_agg": AggArrayAgg, "json_agg": AggJSONAgg, "json_agg_strict": AggJSONAgg,
	"jsonb_agg": AggJSONBAgg, "jsonb_agg_strict": AggJSONBAgg,
	"stddev": AggStddevSamp, "stddev_samp": AggStddevSamp, "stddev_pop": AggStddevPop,
	"variance": AggVarSamp, "var_samp": AggVarSamp, "var_pop": AggVarPop,
	"corr": AggCorr, "covar_pop": AggCovarPop, "covar_samp": AggCovarSamp, "regr_avgx": AggRegrAvgX, "regr_avgy": AggRegrAvgY,
	"regr_count": AggRegrCount, "regr_intercept": AggRegrIntercept, "regr_r2": AggRegrR2, "regr_slope": AggRegrSlope,
	"regr_sxx": AggRegrSXX, "regr_sxy": AggRegrSXY, "regr_syy": AggRegrSYY,
	"json_object_agg": AggJSONObjectAgg, "jsonb_object_agg": AggJSONBObjectAgg,
}

// aggregates are PostgreSQL's other built-in aggregates: across shards they
// would return one partial result per shard.
var aggregates = map[string]bool{}

func init() {
	for _, name := range strings.Fields(`json_object_agg_strict json_object_agg_unique json_object_agg_unique_strict
		jsonb_object_agg_strict jsonb_object_agg_unique jsonb_object_agg_unique_strict
		xmlagg range_agg range_intersect_agg any_value mode percentile_cont percentile_disc
		rank dense_rank percent_rank cume_dist`) {
		aggregates[name] = true
	}
}

// isAggregate reports whether a function call is an aggregate (not a
// window function).
func isAggregate(fc *pg_query.FuncCall) bool {
	if fc.Over != nil {
		return false
	}
	name := funcName(fc)
	_, ok := mergeable[name]
	return ok || aggregates[name] || fc.AggStar || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.AggFilter != nil
}

// aggFunc returns the mergeable aggregate fc calls.
func aggFunc(fc *pg_query.FuncCall) (AggFunc, error) {
	name := funcName(fc)
	f, ok := mergeable[name]
	switch {
	case !ok:
		return 0, rejectf("aggregate %s()", name)
	case fc.AggWithinGroup:
		return 0, rejectf("%s() WITHIN GROUP", name)
	case collects(f) && len(fc.Args) != collectArgs(f):
		return 0, rejectf("%s() of %d arguments", name, len(fc.Args))
	case isVariance(f):
		return f, checkVariance(fc)
	case isRegression(f):
		return f, checkRegression(fc)
	case (f == AggJSONObjectAgg || f == AggJSONBObjectAgg) && (fc.AggDistinct || len(fc.AggOrder) > 0 || len(fc.Args) != 2):
		// The shards' partial objects hold their pairs in their own
		// order; an ORDER BY would need every pair in one order.
		return 0, rejectf("%s() with DISTINCT, ORDER BY or other than two arguments", name)
	}
	return f, nil
}

// noteAgg checks an aggregate call and records what it needs.
func (b *mergeBuilder) noteAgg(fc *pg_query.FuncCall) error {
	if _, err := aggFunc(fc); err != nil {
		return err
	}
	if _, err := b.noteDistinct(fc); err != nil {
		return err
	}
	return b.noteCollect(fc)
}

// findAggregate returns an aggregate call inside an expression, outside
// subqueries.
func findAggregate(n *pg_query.Node) *pg_query.FuncCall {
	var found *pg_query.FuncCall
	walkExpr(n, func(x *pg_query.Node) bool {
		if f := x.GetFuncCall(); f != nil && found == nil && isAggregate(f) {
			found = f
		}
		return found == nil
	}, nil)
	return found
}

// countOf returns count(x) for avg(x), keeping FILTER.
func countOf(avg *pg_query.FuncCall) *pg_query.Node {
	c := proto.Clone(avg).(*pg_query.FuncCall)
	c.Funcname = []*pg_query.Node{pg_query.MakeStrNode("count")}
	return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: c}}
}

// aggRef returns the column of an aggregate call: a hidden column, with
// the hidden count an avg needs.
func (b *mergeBuilder) aggRef(n *pg_query.Node) (ref, error) {
	f := n.GetFuncCall()
	agg, err := aggFunc(f)
	if err != nil {
		return ref{}, err
	}
	value, err := b.noteDistinct(f)
	if err != nil {
		return ref{}, err
	}
	at := b.hide(n)
	for _, a := range b.aggs {
		if a.at == at {
			return at, nil
		}
	}
	count := at
	if agg == AggAvg {
		count = b.hide(countOf(f))
	}
	a, err := b.newAgg(f, at, count, agg, value)
	if err != nil {
		return ref{}, err
	}
	b.aggs = append(b.aggs, a)
	return at, nil
}

// aggregates fills the Aggregates of the Merge, once columns are final.
func (b *mergeBuilder) aggregates() {
	for _, a := range b.aggs {
		agg := Aggregate{Column: b.column(a.at), Func: a.f, Distinct: a.distinct}
		if b.tag != nil {
			agg.Tag = b.tag.tagOf(a.value)
		}
		switch a.f {
		case AggAvg:
			agg.Count = b.column(a.count)
		case AggStringAgg:
			agg.Sep = b.column(a.sep)
		case AggJSONAgg:
			agg.Structured = b.column(a.structured)
		case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
			agg.Moments = b.momentColumns(a.moments)
		}
		if isRegression(a.f) && a.f != AggRegrCount {
			agg.Regression = b.regressionColumns(a.regression)
		}
		b.m.Aggregates = append(b.m.Aggregates, agg)
	}
}
