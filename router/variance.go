package router

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// stddev, stddev_samp, stddev_pop, variance, var_samp and var_pop across
// shards.
//
// The shards compute the client's call as it is written, which gives the
// column its name, its type (numeric for integer and numeric x, double
// precision for real and double precision x) and PostgreSQL's own errors
// (42883 for stddev(text) or stddev(interval)), and, in hidden columns,
// the moments of x in their group, under the call's FILTER:
//
//	count(x)                                 N
//	sum(x::numeric)                          sum(X), exact
//	sum(x::numeric OPERATOR(pg_catalog.*) x::numeric)   sum(X*X), exact
//	avg(x)                                   Sx/N of the float8 accumulator
//	var_pop(x)                               Sxx/N of the float8 accumulator
//
// The router cannot know x's type; the executor picks the moments by the
// type of the client's column. Over integers and numeric, the exact sums
// add up to the ones PostgreSQL's accumulator holds (with their display
// scales: the largest of the values', twice that for the squares), and
// the executor finishes them as numeric_stddev_internal does. Over
// floats, the shards' accumulators combine as float8_combine combines
// parallel workers' (executor/variance.go). The moments a type does not
// use cost the shards an aggregate each, but never an error: x::numeric
// takes every float, NaN and the infinities; avg and var_pop every value
// stddev takes. Aggregates over one input share their transition state
// in PostgreSQL, so the client's call and var_pop(x) cost one.

// isVariance reports whether f is one of the stddev and variance
// aggregates.
func isVariance(f AggFunc) bool {
	switch f {
	case AggStddevSamp, AggStddevPop, AggVarSamp, AggVarPop:
		return true
	}
	return false
}

// checkVariance refuses the calls of a stddev or variance aggregate whose
// moments the shards cannot return: DISTINCT, whose values may be on
// several shards (and whose numeric scale would be that of whichever equal
// value PostgreSQL keeps), and calls of other than one argument.
func checkVariance(fc *pg_query.FuncCall) error {
	name := funcName(fc)
	switch {
	case fc.AggDistinct:
		return unsupported(hintVarianceDistinct, "%s(DISTINCT …) is not supported across shards", name)
	case fc.AggStar || len(fc.Args) != 1:
		return rejectf("%s() of %d arguments", name, len(fc.Args))
	}
	return nil
}

const hintVarianceDistinct = "Compute it over a subquery that returns each value once (SELECT stddev(x) FROM (SELECT DISTINCT x …) s), or route the statement to one shard with /* shard: N */ or SET shardgate.shard."

// momentRefs are the hidden columns of a stddev or variance call.
type momentRefs struct {
	count, sum, sumSq, avg, varPop ref
}

// Moments are the hidden columns of the moments of a stddev or variance
// aggregate's argument x in each shard's group (under its FILTER).
type Moments struct {
	Count  Column // count(x), bigint
	Sum    Column // sum(x::numeric)
	SumSq  Column // sum(x::numeric * x::numeric)
	Avg    Column // avg(x): Sx/N for float x
	VarPop Column // var_pop(x): Sxx/N for float x
}

// hideMoments appends the moments of call fc to the hidden columns.
func (b *mergeBuilder) hideMoments(fc *pg_query.FuncCall) momentRefs {
	x := fc.Args[0]
	sq := pg_query.MakeAExprNode(pg_query.A_Expr_Kind_AEXPR_OP,
		[]*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("*")}, numericCast(x), numericCast(x), -1)
	return momentRefs{
		count:  b.hide(momentCall(fc, "count", nil)),
		sum:    b.hide(momentCall(fc, "sum", numericCast(x))),
		sumSq:  b.hide(momentCall(fc, "sum", sq)),
		avg:    b.hide(momentCall(fc, "avg", nil)),
		varPop: b.hide(momentCall(fc, "var_pop", nil)),
	}
}

// momentCall is pg_catalog.name(arg) with fc's FILTER and ORDER BY; a nil
// arg keeps fc's argument.
func momentCall(fc *pg_query.FuncCall, name string, arg *pg_query.Node) *pg_query.Node {
	c := proto.Clone(fc).(*pg_query.FuncCall)
	c.Funcname = []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode(name)}
	if arg != nil {
		c.Args = []*pg_query.Node{arg}
	}
	return &pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: c}}
}

// numericCast is n::pg_catalog.numeric.
func numericCast(n *pg_query.Node) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
		Arg:      proto.Clone(n).(*pg_query.Node),
		TypeName: &pg_query.TypeName{Names: []*pg_query.Node{pg_query.MakeStrNode("pg_catalog"), pg_query.MakeStrNode("numeric")}, Typemod: -1},
	}}}
}

// momentColumns turns the hidden columns of a call into Columns.
func (b *mergeBuilder) momentColumns(r momentRefs) Moments {
	return Moments{Count: b.column(r.count), Sum: b.column(r.sum), SumSq: b.column(r.sumSq), Avg: b.column(r.avg), VarPop: b.column(r.varPop)}
}
