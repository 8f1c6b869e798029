package router

import "testing"

var proxyWindowCases = []mergeCase{
	{name: "count over all rows", sql: "SELECT *, count(*) OVER () AS total FROM accounts ORDER BY name LIMIT 20 OFFSET 40",
		want: &Merge{OrderBy: []SortKey{{Column: -1}}, Limit: c("20"), Offset: c("40"), HiddenColumns: 1,
			Windows:   []Window{{Column: -2, Func: AggCount}},
			Rewritten: "SELECT *, count(*) OVER () AS total, name AS __shardgate_1 FROM accounts ORDER BY name LIMIT 60"}},
	{name: "sum and max over all rows", sql: "SELECT id, sum(balance) OVER (), max(name) OVER w FROM accounts WINDOW w AS ()",
		want: &Merge{Windows: []Window{{Column: 1, Func: AggSum}, {Column: 2, Func: AggMax}}}},
	{name: "row_number in the query's order", sql: "SELECT id, row_number() OVER (ORDER BY balance DESC, id) FROM accounts ORDER BY balance DESC, 1, name",
		want: &Merge{OrderBy: []SortKey{{Column: -2, Desc: true, NullsFirst: true}, {Column: 0}, {Column: -1}}, HiddenColumns: 2, WindowOrder: 2,
			Windows:   []Window{{Column: 1, Func: WinRowNumber}},
			Rewritten: "SELECT id, row_number() OVER (ORDER BY balance DESC, id), balance AS __shardgate_1, name AS __shardgate_2 FROM accounts ORDER BY balance DESC, 1, name"}},
	{name: "rank without ORDER BY", sql: "SELECT id, rank() OVER (ORDER BY name), dense_rank() OVER (ORDER BY name) FROM accounts",
		want: &Merge{OrderBy: []SortKey{{Column: -1}}, HiddenColumns: 1, WindowOrder: 1,
			Windows:   []Window{{Column: 1, Func: WinRank}, {Column: 2, Func: WinDenseRank}},
			Rewritten: "SELECT id, rank() OVER (ORDER BY name), dense_rank() OVER (ORDER BY name), name AS __shardgate_1 FROM accounts ORDER BY name"}},
	{name: "row_number over nothing", sql: "SELECT id, row_number() OVER () FROM accounts",
		want: &Merge{Windows: []Window{{Column: 1, Func: WinRowNumber}}}},
	{name: "ORDER BY other than the window's", sql: "SELECT id, row_number() OVER (ORDER BY name) FROM accounts ORDER BY id", msg: "begins with the window's"},
	{name: "two window orders", sql: "SELECT row_number() OVER (ORDER BY name), rank() OVER (ORDER BY id) FROM accounts", msg: "ordered differently"},
	{name: "inside an expression", sql: "SELECT id, row_number() OVER () * 2 FROM accounts", msg: "whole select list item"},
	{name: "ordered by the window", sql: "SELECT id, row_number() OVER () AS n FROM accounts ORDER BY n", msg: "in ORDER BY"},
	{name: "with DISTINCT", sql: "SELECT DISTINCT count(*) OVER () FROM accounts", msg: "DISTINCT"},
	{name: "with GROUP BY", sql: "SELECT id, count(*) OVER () FROM accounts GROUP BY id", msg: "GROUP BY"},
	{name: "running sum", sql: "SELECT id, sum(balance) OVER (ORDER BY id) FROM accounts",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}, WindowOrder: 1,
			Windows:   []Window{{Column: 1, Func: AggSum, Running: true}},
			Rewritten: "SELECT id, sum(balance) OVER (ORDER BY id) FROM accounts ORDER BY id"}},
	{name: "running count and rank", sql: "SELECT id, count(*) OVER w, rank() OVER w FROM accounts WINDOW w AS (ORDER BY name) ORDER BY name, id",
		want: &Merge{OrderBy: []SortKey{{Column: -1}, {Column: 0}}, HiddenColumns: 1, WindowOrder: 1,
			Windows:   []Window{{Column: 1, Func: AggCount, Running: true}, {Column: 2, Func: WinRank}},
			Rewritten: "SELECT id, count(*) OVER w, rank() OVER w, name AS __shardgate_1 FROM accounts WINDOW w AS (ORDER BY name) ORDER BY name, id"}},
	{name: "running sum with a frame", sql: "SELECT id, sum(balance) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) FROM accounts", msg: "window function sum()"},
	{name: "a frame", sql: "SELECT id, count(*) OVER (ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM accounts", msg: "window function count()"},
	{name: "lag", sql: "SELECT id, lag(id) OVER (ORDER BY id) FROM accounts", msg: "window function lag()"},
}

func TestMergeProxyWindows(t *testing.T) { testMerge(t, proxyWindowCases) }
