package router

import "testing"

var groupingSetCases = []mergeCase{
	{name: "ROLLUP", sql: "SELECT country, count(*) FROM accounts GROUP BY ROLLUP (country)",
		want: &Merge{Grouped: true, GroupBy: []Column{0, -1}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}}, HiddenColumns: 1,
			Rewritten: "SELECT country, count(*), GROUPING(country) AS __shardgate_1 FROM accounts GROUP BY ROLLUP (country)"}},
	{name: "CUBE of positions and a row", sql: "SELECT country, name, sum(balance) FROM accounts GROUP BY CUBE (1, (2, id)) ORDER BY 3 DESC",
		want: &Merge{Grouped: true, GroupBy: []Column{0, 1, -2, -1}, Aggregates: []Aggregate{{Column: 2, Func: AggSum}}, HiddenColumns: 2,
			OrderBy:   []SortKey{{Column: 2, Desc: true, NullsFirst: true}},
			Rewritten: "SELECT country, name, sum(balance), id AS __shardgate_1, GROUPING(country, name, id) AS __shardgate_2 FROM accounts GROUP BY CUBE (1, (2, id))"}},
	{name: "GROUPING in HAVING and ORDER BY", sql: "SELECT country, GROUPING(country) AS g, count(*) FROM accounts GROUP BY GROUPING SETS ((country), ()) HAVING GROUPING(country) = 0 ORDER BY GROUPING(country), 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0, 1, -1}, Aggregates: []Aggregate{{Column: 2, Func: AggCount}}, HiddenColumns: 1,
			Having:    []Cond{{Column: 1, Op: "=", Value: Expr{Const: "0"}}},
			OrderBy:   []SortKey{{Column: 1}, {Column: 0}},
			Rewritten: "SELECT country, GROUPING(country) AS g, count(*), GROUPING(country) AS __shardgate_1 FROM accounts GROUP BY GROUPING SETS (country, ()) HAVING CASE WHEN false THEN GROUPING(country) = 0 END IS NULL"}},
	{name: "one set needs no tag", sql: "SELECT country, count(*) FROM accounts GROUP BY GROUPING SETS ((country))",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}}}},
	{name: "GROUP BY DISTINCT", sql: "SELECT country, count(*) FROM accounts GROUP BY DISTINCT ROLLUP (country), ROLLUP (country)",
		want: &Merge{Grouped: true, GroupBy: []Column{0, -1}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}}, HiddenColumns: 1,
			Rewritten: "SELECT country, count(*), GROUPING(country) AS __shardgate_1 FROM accounts GROUP BY DISTINCT ROLLUP (country), ROLLUP (country)"}},
	{name: "repeated sets", sql: "SELECT country, count(*) FROM accounts GROUP BY country, ROLLUP (country)", msg: "repeats a grouping set"},
	{name: "a set repeated by position", sql: "SELECT country, count(*) FROM accounts GROUP BY ROLLUP (1), country", msg: "repeats a grouping set"},
	{name: "a set repeated by qualifier", sql: "SELECT a.country, count(*) FROM accounts a GROUP BY ROLLUP (a.country, country)", msg: "repeats a grouping set"},
	{name: "a set repeated by output name", sql: "SELECT country AS c, count(*) FROM accounts GROUP BY GROUPING SETS (c, country)", msg: "repeats a grouping set"},
	{name: "repeated empty sets", sql: "SELECT count(*) FROM accounts GROUP BY GROUPING SETS ((), ())", msg: "repeats a grouping set"},
	{name: "a DISTINCT aggregate", sql: "SELECT country, count(DISTINCT name) FROM accounts GROUP BY ROLLUP (country)", msg: "GROUPING SETS"},
	{name: "a DISTINCT aggregate of a set's column", sql: "SELECT country, count(DISTINCT country) FROM accounts GROUP BY ROLLUP (country)", msg: "GROUPING SETS"},
	{name: "an ordered aggregate", sql: "SELECT country, string_agg(name, ',' ORDER BY name) FROM accounts GROUP BY CUBE (country)", msg: "GROUPING SETS"},
	{name: "max DISTINCT", sql: "SELECT country, max(DISTINCT name) FROM accounts GROUP BY ROLLUP (country)",
		want: &Merge{Grouped: true, GroupBy: []Column{0, -1}, Aggregates: []Aggregate{{Column: 1, Func: AggMax}}, HiddenColumns: 1,
			Rewritten: "SELECT country, max(DISTINCT name), GROUPING(country) AS __shardgate_1 FROM accounts GROUP BY ROLLUP (country)"}},
	{name: "DISTINCT aggregates of two values", sql: "SELECT country, count(DISTINCT name), count(DISTINCT id) FROM accounts GROUP BY ROLLUP (country)", msg: "GROUPING SETS"},
}

func TestMergeGroupingSets(t *testing.T) { testMerge(t, groupingSetCases) }
