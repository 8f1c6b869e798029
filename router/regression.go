package router

import pg_query "github.com/pganalyze/pg_query_go/v6"

// corr, covar_pop, covar_samp and the regr_ aggregates across shards.
//
// PostgreSQL computes these two-argument aggregates of (y, x), all of
// double precision arguments, from one transition state, float8_regr_accum's
// N, Sx, Sxx, Sy, Syy and Sxy (Youngs–Cramer: Sxx is the sum of squared
// deviations from the mean, not of squares). regr_count returns N, a
// bigint: the shards' counts add up, as count's do. For the others, the
// shards compute the client's call as it is written, which gives the
// column its name, its type and PostgreSQL's own errors (42883 for
// corr(text, text)), and, in hidden columns, under the call's FILTER,
// their state in aggregates over the call's own arguments:
//
//	regr_count(y, x)   N
//	regr_avgx(y, x)    Sx/N
//	regr_avgy(y, x)    Sy/N
//	regr_sxx(y, x)     Sxx
//	regr_syy(y, x)     Syy
//	regr_sxy(y, x)     Sxy
//
// The executor combines the shards' states as float8_regr_combine combines
// parallel workers' and finishes them as the call's final function does
// (executor/regression.go). Aggregates over the same arguments share one
// transition state in PostgreSQL, so the hidden columns cost each shard a
// final function each. DISTINCT forms are refused: a pair may be on
// several shards.

// regressionNames are the SQL names of the float8_regr_accum aggregates.
var regressionNames = map[AggFunc]string{
	AggCorr: "corr", AggCovarPop: "covar_pop", AggCovarSamp: "covar_samp", AggRegrAvgX: "regr_avgx",
	AggRegrAvgY: "regr_avgy", AggRegrIntercept: "regr_intercept", AggRegrR2: "regr_r2", AggRegrSlope: "regr_slope",
	AggRegrSXX: "regr_sxx", AggRegrSXY: "regr_sxy", AggRegrSYY: "regr_syy", AggRegrCount: "regr_count",
}

// isRegression reports whether f is one of the aggregates of
// float8_regr_accum's state, regr_count included.
func isRegression(f AggFunc) bool {
	_, ok := regressionNames[f]
	return ok
}

// checkRegression refuses the calls whose state the shards cannot return:
// DISTINCT, whose pairs may be on several shards, and calls of other than
// two arguments.
func checkRegression(fc *pg_query.FuncCall) error {
	name := funcName(fc)
	switch {
	case fc.AggDistinct:
		return unsupported(hintRegressionDistinct, "%s(DISTINCT …) is not supported across shards", name)
	case fc.AggStar || len(fc.Args) != 2:
		return rejectf("%s() of %d arguments", name, len(fc.Args))
	}
	return nil
}

const hintRegressionDistinct = "Compute it over a subquery that returns each pair once (SELECT corr(y, x) FROM (SELECT DISTINCT y, x …) s), or route the statement to one shard with /* shard: N */ or SET shardgate.shard."

// regrRefs are the hidden columns of a corr, covar_ or regr_ call.
type regrRefs struct {
	count, avgX, avgY, sxx, syy, sxy ref
}

// Regression are the hidden columns of the state of a corr, covar_ or
// regr_ aggregate (y, x) in each shard's group (under its FILTER).
type Regression struct {
	Count Column // regr_count(y, x): N, bigint
	AvgX  Column // regr_avgx(y, x): Sx/N
	AvgY  Column // regr_avgy(y, x): Sy/N
	SXX   Column // regr_sxx(y, x): Sxx
	SYY   Column // regr_syy(y, x): Syy
	SXY   Column // regr_sxy(y, x): Sxy
}

// hideRegression appends the state of call fc to the hidden columns.
func (b *mergeBuilder) hideRegression(fc *pg_query.FuncCall) regrRefs {
	return regrRefs{
		count: b.hide(momentCall(fc, "regr_count", nil)),
		avgX:  b.hide(momentCall(fc, "regr_avgx", nil)),
		avgY:  b.hide(momentCall(fc, "regr_avgy", nil)),
		sxx:   b.hide(momentCall(fc, "regr_sxx", nil)),
		syy:   b.hide(momentCall(fc, "regr_syy", nil)),
		sxy:   b.hide(momentCall(fc, "regr_sxy", nil)),
	}
}

// regressionColumns turns the hidden columns of a call into Columns.
func (b *mergeBuilder) regressionColumns(r regrRefs) Regression {
	return Regression{Count: b.column(r.count), AvgX: b.column(r.avgX), AvgY: b.column(r.avgY),
		SXX: b.column(r.sxx), SYY: b.column(r.syy), SXY: b.column(r.sxy)}
}
