package router

import "testing"

// distinctCases: shards group by the DISTINCT value too and sort by the
// group key then the value.
var distinctCases = []mergeCase{
	{name: "count DISTINCT", sql: "SELECT count(DISTINCT country) FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 0, Func: AggCount, Distinct: true}}, SortedBy: []SortKey{{Column: -1}}, HiddenColumns: 1,
			Rewritten: "SELECT count(DISTINCT country), country AS __shardgate_1 FROM accounts GROUP BY country ORDER BY 2"}},
	{name: "GROUP BY, avg and sum DISTINCT with FILTER, plain aggregates", sql: "SELECT country, avg(DISTINCT balance) FILTER (WHERE id > 1), " +
		"sum(DISTINCT balance) FILTER (WHERE id > 1), count(*), max(name) FROM accounts GROUP BY 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 2, SortedBy: []SortKey{{Column: 0}, {Column: -1}}, Aggregates: []Aggregate{
			{Column: 1, Func: AggAvg, Count: -2, Distinct: true}, {Column: 2, Func: AggSum, Distinct: true}, {Column: 3, Func: AggCount}, {Column: 4, Func: AggMax}},
			Rewritten: "SELECT country, sum(DISTINCT balance) FILTER (WHERE id > 1) AS avg, sum(DISTINCT balance) FILTER (WHERE id > 1), count(*), max(name), " +
				"count(DISTINCT balance) FILTER (WHERE id > 1) AS __shardgate_1, CASE WHEN id > 1 THEN balance END AS __shardgate_2 " +
				"FROM accounts GROUP BY 1, CASE WHEN id > 1 THEN balance END ORDER BY 1, 7"}},
	{name: "without GROUP BY, other items are computed", sql: "SELECT 'all' AS scope, count(DISTINCT name) + 1 FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 2, SortedBy: []SortKey{{Column: -1}}, Aggregates: []Aggregate{{Column: -2, Func: AggCount, Distinct: true}},
			Outer: &Outer{SQL: `SELECT 'all' AS scope, __shardgate_in.i1 + 1 AS "?column?" FROM __shardgate_in`, Inputs: []Column{-2}, Outputs: []Column{0, 1}},
			Rewritten: `SELECT CASE WHEN false THEN 'all' END AS scope, CASE WHEN false THEN count(DISTINCT name) + 1 END AS "?column?", ` +
				`count(DISTINCT name) AS __shardgate_1, name AS __shardgate_2 FROM accounts GROUP BY name ORDER BY 4`}},
	{name: "min DISTINCT is min", sql: "SELECT country, min(DISTINCT name), bool_or(DISTINCT active) FROM accounts GROUP BY 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggMin}, {Column: 2, Func: AggBoolOr}}}},

	{name: "different values", sql: "SELECT count(DISTINCT name), count(DISTINCT country) FROM accounts", msg: "DISTINCT aggregates of different values"},
	{name: "different FILTERs", sql: "SELECT count(DISTINCT name), count(DISTINCT name) FILTER (WHERE active) FROM accounts", msg: "DISTINCT aggregates of different values"},
	{name: "other aggregate", sql: "SELECT json_object_agg(DISTINCT name, id) FROM accounts", msg: "aggregate json_object_agg()"},
}

func TestMergeDistinctAggregates(t *testing.T) { testMerge(t, distinctCases) }
