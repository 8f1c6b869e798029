package router

import (
	"strings"
	"testing"
)

// collectCases: what shards receive for collecting and bit aggregates.
var collectCases = []mergeCase{
	{name: "string_agg without ORDER BY", sql: "SELECT string_agg(name, ',') FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 1, Aggregates: []Aggregate{{Column: 0, Func: AggStringAgg, Sep: -1}},
			Rewritten: "SELECT string_agg(name, ','), CASE WHEN false THEN pg_catalog.string_agg(name, ',') ELSE ',' END AS __shardgate_1 FROM accounts"}},
	{name: "string_agg ORDER BY DESC with GROUP BY and count", sql: "SELECT country, string_agg(name, ', ' ORDER BY id DESC), count(*) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 2,
			Aggregates: []Aggregate{{Column: 1, Func: AggStringAgg, Sep: -2}, {Column: 2, Func: AggCount}},
			SortedBy:   []SortKey{{Column: 0}, {Column: -1, Desc: true, NullsFirst: true}},
			Rewritten: "SELECT country, string_agg(name, ', ' ORDER BY id DESC), count(*), CASE WHEN false THEN pg_catalog.string_agg(name, ', ') ELSE ', ' END AS __shardgate_1, " +
				"id AS __shardgate_2 FROM accounts GROUP BY country, 5 ORDER BY 1, 5 DESC"}},
	{name: "array_agg ORDER BY two keys, NULLS FIRST, no GROUP BY", sql: "SELECT array_agg(id ORDER BY name NULLS FIRST, id), sum(balance) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 2,
			Aggregates: []Aggregate{{Column: 0, Func: AggArrayAgg}, {Column: 1, Func: AggSum}},
			SortedBy:   []SortKey{{Column: -2, NullsFirst: true}, {Column: -1}},
			Rewritten:  "SELECT array_agg(id ORDER BY name NULLS FIRST, id), sum(balance), name AS __shardgate_1, id AS __shardgate_2 FROM accounts GROUP BY 3, 4 ORDER BY 3 NULLS FIRST, 4"}},
	{name: "a separator read from rows is grouped by", sql: "SELECT string_agg(name, country) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 1, Aggregates: []Aggregate{{Column: 0, Func: AggStringAgg, Sep: -1}},
			Rewritten: "SELECT string_agg(name, country), CASE WHEN false THEN pg_catalog.string_agg(name, country) ELSE country END AS __shardgate_1 FROM accounts GROUP BY country"}},
	{name: "jsonb_agg with FILTER and ORDER BY", sql: "SELECT country, jsonb_agg(name ORDER BY id) FILTER (WHERE id > 3) FROM accounts GROUP BY 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 1,
			Aggregates: []Aggregate{{Column: 1, Func: AggJSONBAgg}},
			SortedBy:   []SortKey{{Column: 0}, {Column: -1}},
			Rewritten:  "SELECT country, jsonb_agg(name ORDER BY id) FILTER (WHERE id > 3), id AS __shardgate_1 FROM accounts GROUP BY 1, 3 ORDER BY 1, 3"}},
	{name: "unordered next to ordered", sql: "SELECT array_agg(id ORDER BY id), string_agg(name, ';') FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 2,
			Aggregates: []Aggregate{{Column: 0, Func: AggArrayAgg}, {Column: 1, Func: AggStringAgg, Sep: -2}},
			SortedBy:   []SortKey{{Column: -1}},
			Rewritten: "SELECT array_agg(id ORDER BY id), string_agg(name, ';'), CASE WHEN false THEN pg_catalog.string_agg(name, ';') ELSE ';' END AS __shardgate_1, " +
				"id AS __shardgate_2 FROM accounts GROUP BY 4 ORDER BY 4"}},
	{name: "bit aggregates", sql: "SELECT bit_and(id), bit_or(id), bit_xor(id) FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 0, Func: AggBitAnd}, {Column: 1, Func: AggBitOr}, {Column: 2, Func: AggBitXor}}}},
	{name: "expression over an ordered aggregate", sql: "SELECT country, array_length(array_agg(id ORDER BY id), 1) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 2,
			Aggregates: []Aggregate{{Column: -2, Func: AggArrayAgg}},
			SortedBy:   []SortKey{{Column: 0}, {Column: -1}},
			Outer:      &Outer{SQL: "SELECT array_length(__shardgate_in.i1, 1) AS array_length FROM __shardgate_in", Inputs: []Column{-2}, Outputs: []Column{1}},
			Rewritten: "SELECT country, CASE WHEN false THEN array_length(array_agg(id ORDER BY id), 1) END AS array_length, " +
				"array_agg(id ORDER BY id) AS __shardgate_1, id AS __shardgate_2 FROM accounts GROUP BY country, 4 ORDER BY 1, 4"}},

	{name: "DISTINCT array_agg and count, ORDER BY the value", sql: "SELECT country, array_agg(DISTINCT name ORDER BY name), count(DISTINCT name), string_agg(DISTINCT name, ';') FROM accounts GROUP BY 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 2, SortedBy: []SortKey{{Column: 0}, {Column: -1}},
			Aggregates: []Aggregate{{Column: 1, Func: AggArrayAgg, Distinct: true}, {Column: 2, Func: AggCount, Distinct: true}, {Column: 3, Func: AggStringAgg, Distinct: true, Sep: -2}},
			Rewritten: "SELECT country, array_agg(DISTINCT name ORDER BY name), count(DISTINCT name), string_agg(DISTINCT name, ';'), " +
				"CASE WHEN false THEN pg_catalog.string_agg(name, ';') ELSE ';' END AS __shardgate_1, name AS __shardgate_2 FROM accounts GROUP BY 1, name ORDER BY 1, 6"}},
	{name: "DISTINCT with FILTER", sql: "SELECT array_agg(DISTINCT name) FILTER (WHERE id > 1) FROM accounts", msg: "array_agg(DISTINCT …) FILTER"},
	{name: "DISTINCT ORDER BY DESC", sql: "SELECT array_agg(DISTINCT name ORDER BY name DESC) FROM accounts", msg: "in an order other than the value's ascending one"},
	{name: "DISTINCT with a separator column", sql: "SELECT string_agg(DISTINCT name, country) FROM accounts", msg: "separator read from rows"},
	{name: "DISTINCT of other values", sql: "SELECT array_agg(DISTINCT name), count(DISTINCT id) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 3,
			Aggregates: []Aggregate{{Column: 0, Func: AggArrayAgg, Distinct: true, Tag: 1}, {Column: 1, Func: AggCount, Distinct: true, Tag: 2}},
			SortedBy:   []SortKey{{Column: -1}, {Column: -3}, {Column: -2}},
			Tagged:     &Tagged{Column: -1, Plain: 3, Sets: []TaggedSet{{Tag: 1, Value: -3}, {Tag: 2, Value: -2}}},
			Rewritten: "SELECT array_agg(DISTINCT name), CASE WHEN false THEN count(DISTINCT id) ELSE pg_catalog.max(1::bigint) FILTER (WHERE id IS NOT NULL) END AS count, " +
				"name AS __shardgate_1, id AS __shardgate_2, GROUPING(name, id) AS __shardgate_3 " +
				"FROM accounts GROUP BY GROUPING SETS ((), name, id) ORDER BY 5, 3, 4"}},
	{name: "different ORDER BY", sql: "SELECT array_agg(id ORDER BY id), array_agg(id ORDER BY id DESC) FROM accounts", msg: "aggregates with different ORDER BY"},
	{name: "ORDER BY USING", sql: "SELECT array_agg(id ORDER BY id USING >) FROM accounts", msg: "USING"},
	{name: "ordered with DISTINCT aggregate", sql: "SELECT count(DISTINCT name), array_agg(id ORDER BY id) FROM accounts", msg: "DISTINCT aggregates together"},
	{name: "xmlagg", sql: "SELECT xmlagg(name::xml) FROM accounts", msg: "aggregate xmlagg()"},
}

func TestMergeCollectingAggregates(t *testing.T) { testMerge(t, collectCases) }

// TestMergeJSONAggKind: json_agg's hidden column asks the shard's catalog
// about the argument's type.
func TestMergeJSONAggKind(t *testing.T) {
	r := newTestRouter(t, nil)
	plan, err := route(r, "SELECT json_agg(a ORDER BY id) FROM accounts a", nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	m := plan.Merge
	if m == nil || len(m.Aggregates) != 1 || m.Aggregates[0].Func != AggJSONAgg || m.Aggregates[0].Structured != -2 {
		t.Fatalf("merge %+v", m)
	}
	for _, want := range []string{"pg_catalog.pg_typeof(a)", "array_subscript_handler", "GROUP BY 3 ORDER BY 3"} {
		if !strings.Contains(m.Rewritten, want) {
			t.Errorf("rewritten %q lacks %q", m.Rewritten, want)
		}
	}
}

// windowCases: windows partitioned by the sharding key merge as plain
// queries; others are refused.
var windowCases = []mergeCase{
	{name: "PARTITION BY key", sql: "SELECT id, row_number() OVER (PARTITION BY id ORDER BY name) FROM accounts"},
	{name: "PARTITION BY key, ORDER BY LIMIT", sql: "SELECT id, rank() OVER (PARTITION BY country, a.id ORDER BY name) AS r FROM accounts a ORDER BY r LIMIT 3",
		want: &Merge{OrderBy: []SortKey{{Column: 1}}, Limit: c("3")}},
	{name: "named window", sql: "SELECT id, sum(balance) OVER w, lag(name) OVER (w ORDER BY name) FROM accounts WINDOW w AS (PARTITION BY id)"},
	{name: "window of a window", sql: "SELECT count(*) OVER v FROM accounts WINDOW w AS (PARTITION BY id), v AS (w ORDER BY name)"},
	{name: "joined table's key", sql: "SELECT o.id, row_number() OVER (PARTITION BY a.id) FROM accounts a JOIN orders o ON o.account_id = a.id"},

	{name: "no PARTITION BY", sql: "SELECT id, lead(id, 1, 0) OVER (ORDER BY id) FROM accounts", msg: "window function lead() over a window not partitioned by the sharding key"},
	{name: "other column", sql: "SELECT sum(balance) OVER (PARTITION BY country) FROM accounts", msg: "not partitioned by the sharding key"},
	{name: "expression of the key", sql: "SELECT sum(balance) OVER (PARTITION BY id + 1) FROM accounts", msg: "not partitioned by the sharding key"},
	{name: "named window without key", sql: "SELECT sum(balance) OVER w FROM accounts WINDOW w AS (PARTITION BY name)", msg: "not partitioned by the sharding key"},
	{name: "key of a subquery", sql: "SELECT row_number() OVER (PARTITION BY s.id) FROM (SELECT id FROM accounts) s", msg: "not partitioned by the sharding key"},
	{name: "NULL-extended key", sql: "SELECT row_number() OVER (PARTITION BY o.account_id) FROM accounts a LEFT JOIN orders o ON o.account_id = a.id", msg: "not partitioned by the sharding key"},
	{name: "key of the outer side", sql: "SELECT row_number() OVER (PARTITION BY a.id) FROM accounts a LEFT JOIN orders o ON o.account_id = a.id"},
	{name: "GROUP BY the key: plain", sql: "SELECT id, stddev(balance), row_number() OVER (PARTITION BY id) FROM accounts GROUP BY id HAVING count(*) > 1"},
	{name: "GROUP BY the key's position, ORDER BY an aggregate, LIMIT", sql: "SELECT a.id, country, sum(count(*)) OVER (PARTITION BY a.id ORDER BY country) FROM accounts a GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 2 OFFSET 1",
		want: &Merge{OrderBy: []SortKey{{Column: -1, Desc: true, NullsFirst: true}}, Limit: c("2"), Offset: c("1"), HiddenColumns: 1,
			Rewritten: "SELECT a.id, country, sum(count(*)) OVER (PARTITION BY a.id ORDER BY country), count(*) AS __shardgate_1 FROM accounts a GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 3"}},
	{name: "GROUP BY the key, window without it", sql: "SELECT id, count(*), row_number() OVER (PARTITION BY country) FROM accounts GROUP BY id, country", msg: "not partitioned by the sharding key"},
	{name: "GROUP BY without the key", sql: "SELECT country, count(*), row_number() OVER (PARTITION BY country) FROM accounts GROUP BY country", msg: "not partitioned by the sharding key"},
	{name: "aggregates without GROUP BY", sql: "SELECT sum(count(*)) OVER (PARTITION BY id) FROM accounts", msg: "window functions over groups that do not hold the sharding key"},
	{name: "GROUP BY an expression of the key", sql: "SELECT count(*), row_number() OVER (PARTITION BY id) FROM accounts GROUP BY id + 1", msg: "window functions over groups"},
}

func TestMergeWindows(t *testing.T) { testMerge(t, windowCases) }
