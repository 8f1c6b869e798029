package router

import (
	"testing"

	"github.com/shardgate/shardgate/wire"
)

// outerCases are grouped queries with expressions over aggregates: the
// shards return the aggregates and a placeholder, the Outer statement
// computes the rest.
var outerCases = []mergeCase{
	{name: "expression over aggregate", sql: "SELECT count(*) + 1 FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: -1, Func: AggCount}}, HiddenColumns: 1,
			Outer:     &Outer{SQL: `SELECT __shardgate_in.i1 + 1 AS "?column?" FROM __shardgate_in`, Inputs: []Column{-1}, Outputs: []Column{0}},
			Rewritten: `SELECT CASE WHEN false THEN count(*) + 1 END AS "?column?", count(*) AS __shardgate_1 FROM accounts`}},
	{name: "visible aggregate as input", sql: "SELECT coalesce(sum(balance), 0) AS total, sum(balance) FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 1, Func: AggSum}},
			Outer:     &Outer{SQL: `SELECT COALESCE(__shardgate_in.i1, 0) AS total FROM __shardgate_in`, Inputs: []Column{1}, Outputs: []Column{0}},
			Rewritten: `SELECT CASE WHEN false THEN COALESCE(sum(balance), 0) END AS total, sum(balance) FROM accounts`}},
	{name: "names, casts and avg", sql: "SELECT max(balance) - min(balance), count(*)::int, round(avg(balance), 2) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 5, Aggregates: []Aggregate{
			{Column: -5, Func: AggMax}, {Column: -4, Func: AggMin}, {Column: -3, Func: AggCount}, {Column: -2, Func: AggAvg, Count: -1}},
			Outer: &Outer{SQL: `SELECT __shardgate_in.i1 - __shardgate_in.i2 AS "?column?", __shardgate_in.i3::int AS count, round(__shardgate_in.i4, 2) AS round FROM __shardgate_in`,
				Inputs: []Column{-5, -4, -3, -2}, Outputs: []Column{0, 1, 2}},
			Rewritten: `SELECT CASE WHEN false THEN max(balance) - min(balance) END AS "?column?", CASE WHEN false THEN count(*)::int END AS count, ` +
				`CASE WHEN false THEN round(avg(balance), 2) END AS round, max(balance) AS __shardgate_1, min(balance) AS __shardgate_2, ` +
				`count(*) AS __shardgate_3, sum(balance) AS __shardgate_4, count(balance) AS __shardgate_5 FROM accounts`}},
	{name: "CASE with GROUP BY", sql: "SELECT country, CASE WHEN count(*) > 0 THEN 'y' END FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -1, Func: AggCount}}, HiddenColumns: 1,
			Outer:     &Outer{SQL: `SELECT CASE WHEN __shardgate_in.i1 > 0 THEN 'y' END AS "case" FROM __shardgate_in`, Inputs: []Column{-1}, Outputs: []Column{1}},
			Rewritten: `SELECT country, CASE WHEN false THEN CASE WHEN count(*) > 0 THEN 'y' END END AS "case", count(*) AS __shardgate_1 FROM accounts GROUP BY country`}},
	{name: "HAVING OR", sql: "SELECT country FROM accounts GROUP BY country HAVING count(*) > 1 OR sum(balance) > 2",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -2, Func: AggCount}, {Column: -1, Func: AggSum}}, HiddenColumns: 2,
			Outer:     &Outer{SQL: `SELECT FROM __shardgate_in WHERE __shardgate_in.i1 > 1 OR __shardgate_in.i2 > 2`, Inputs: []Column{-2, -1}},
			Rewritten: `SELECT country, count(*) AS __shardgate_1, sum(balance) AS __shardgate_2 FROM accounts GROUP BY country HAVING CASE WHEN false THEN count(*) > 1 OR sum(balance) > 2 END IS NULL`}},
	{name: "HAVING two aggregates and a simple term", sql: "SELECT country FROM accounts GROUP BY country HAVING sum(balance) > 2 * count(*) AND count(*) > 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -2, Func: AggSum}, {Column: -1, Func: AggCount}}, HiddenColumns: 2,
			Having:    []Cond{{Column: -1, Op: ">", Value: Expr{Const: "1"}}},
			Outer:     &Outer{SQL: `SELECT FROM __shardgate_in WHERE __shardgate_in.i1 > (2 * __shardgate_in.i2)`, Inputs: []Column{-2, -1}},
			Rewritten: `SELECT country, sum(balance) AS __shardgate_1, count(*) AS __shardgate_2 FROM accounts GROUP BY country HAVING CASE WHEN false THEN sum(balance) > (2 * count(*)) AND count(*) > 1 END IS NULL`}},
	{name: "HAVING over a group column", sql: "SELECT country FROM accounts GROUP BY country HAVING lower(country) = 'x'",
		want: &Merge{Grouped: true, GroupBy: []Column{0},
			Outer:     &Outer{SQL: `SELECT FROM __shardgate_in WHERE lower(__shardgate_in.i1) = 'x'`, Inputs: []Column{0}},
			Rewritten: `SELECT country FROM accounts GROUP BY country HAVING CASE WHEN false THEN lower(country) = 'x' END IS NULL`}},
	{name: "HAVING an outer select list item", sql: "SELECT country, sum(balance) / count(*) AS r FROM accounts GROUP BY country HAVING sum(balance) / count(*) > 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -2, Func: AggSum}, {Column: -1, Func: AggCount}}, HiddenColumns: 2,
			Outer: &Outer{SQL: `SELECT __shardgate_in.i1 / __shardgate_in.i2 AS r FROM __shardgate_in WHERE (__shardgate_in.i1 / __shardgate_in.i2) > 1`,
				Inputs: []Column{-2, -1}, Outputs: []Column{1}},
			Rewritten: `SELECT country, CASE WHEN false THEN sum(balance) / count(*) END AS r, sum(balance) AS __shardgate_1, count(*) AS __shardgate_2 FROM accounts GROUP BY country HAVING CASE WHEN false THEN (sum(balance) / count(*)) > 1 END IS NULL`}},
	{name: "ORDER BY an expression over aggregates", sql: "SELECT country, sum(balance) FROM accounts GROUP BY country ORDER BY sum(balance) / count(*) DESC LIMIT 2",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggSum}, {Column: -2, Func: AggCount}}, HiddenColumns: 2,
			OrderBy: []SortKey{{Column: -1, Desc: true, NullsFirst: true}}, Limit: c("2"),
			Outer:     &Outer{SQL: `SELECT __shardgate_in.i1 / __shardgate_in.i2 FROM __shardgate_in`, Inputs: []Column{1, -2}, Outputs: []Column{-1}},
			Rewritten: `SELECT country, sum(balance), count(*) AS __shardgate_1, CASE WHEN false THEN sum(balance) / count(*) END AS __shardgate_2 FROM accounts GROUP BY country`}},
	{name: "ORDER BY over a group column", sql: "SELECT country FROM accounts GROUP BY 1 ORDER BY country || 'x'",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 1, OrderBy: []SortKey{{Column: -1}},
			Outer:     &Outer{SQL: `SELECT __shardgate_in.i1 || 'x' FROM __shardgate_in`, Inputs: []Column{0}, Outputs: []Column{-1}},
			Rewritten: `SELECT country, CASE WHEN false THEN country || 'x' END AS __shardgate_1 FROM accounts GROUP BY 1`}},
	{name: "ORDER BY an outer item by name", sql: "SELECT country AS c, count(*) * 2 AS n FROM accounts GROUP BY 1 ORDER BY n, c",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -1, Func: AggCount}}, HiddenColumns: 1,
			OrderBy:   []SortKey{{Column: 1}, {Column: 0}},
			Outer:     &Outer{SQL: `SELECT __shardgate_in.i1 * 2 AS n FROM __shardgate_in`, Inputs: []Column{-1}, Outputs: []Column{1}},
			Rewritten: `SELECT country AS c, CASE WHEN false THEN count(*) * 2 END AS n, count(*) AS __shardgate_1 FROM accounts GROUP BY 1`}},
	{name: "functionally dependent column", sql: "SELECT a.id, a.name || count(*) FROM accounts a GROUP BY a.id ORDER BY a.name",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -1, Func: AggCount}}, HiddenColumns: 2,
			OrderBy:   []SortKey{{Column: -2}},
			Outer:     &Outer{SQL: `SELECT __shardgate_in.i1 || __shardgate_in.i2 AS "?column?" FROM __shardgate_in`, Inputs: []Column{-2, -1}, Outputs: []Column{1}},
			Rewritten: `SELECT a.id, CASE WHEN false THEN a.name || count(*) END AS "?column?", a.name AS __shardgate_1, count(*) AS __shardgate_2 FROM accounts a GROUP BY a.id`}},
	{name: "GROUP BY a name that an outer item has", sql: "SELECT kind, CASE WHEN count(*) > 2 THEN note ELSE other END FROM accounts GROUP BY kind, note, other",
		want: &Merge{Grouped: true, GroupBy: []Column{0, -3, -2}, Aggregates: []Aggregate{{Column: -1, Func: AggCount}}, HiddenColumns: 3,
			Outer: &Outer{SQL: `SELECT CASE WHEN __shardgate_in.i1 > 2 THEN __shardgate_in.i2 ELSE __shardgate_in.i3 END AS other FROM __shardgate_in`,
				Inputs: []Column{-1, -3, -2}, Outputs: []Column{1}},
			Rewritten: `SELECT kind, CASE WHEN false THEN CASE WHEN count(*) > 2 THEN note ELSE other END END AS other, ` +
				`note AS __shardgate_1, other AS __shardgate_2, count(*) AS __shardgate_3 FROM accounts GROUP BY kind, note, other`}},

	{name: "subquery", sql: "SELECT count(*) + (SELECT 1) FROM accounts", msg: "a subquery in an expression over aggregates"},
	// A parameter is a hidden column of its own ($n), after a
	// placeholder of its expression that types it as the client's
	// statement does.
	{name: "parameter in HAVING", sql: "SELECT country FROM accounts GROUP BY country HAVING sum(balance) > 2 * $1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -2, Func: AggSum}}, HiddenColumns: 3,
			Outer: &Outer{SQL: `SELECT FROM __shardgate_in WHERE __shardgate_in.i1 > (2 * __shardgate_in.i2)`, Inputs: []Column{-2, -1}},
			Rewritten: `SELECT country, CASE WHEN false THEN sum(balance) > (2 * $1) END AS __shardgate_1, sum(balance) AS __shardgate_2, $1 AS __shardgate_3 ` +
				`FROM accounts GROUP BY country HAVING CASE WHEN false THEN sum(balance) > (2 * $1) END IS NULL`}},
	{name: "parameter in the select list", sql: "SELECT coalesce(sum(balance), $1) AS total FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: -2, Func: AggSum}}, HiddenColumns: 3,
			Outer: &Outer{SQL: `SELECT COALESCE(__shardgate_in.i1, __shardgate_in.i2) AS total FROM __shardgate_in`, Inputs: []Column{-2, -1}, Outputs: []Column{0}},
			Rewritten: `SELECT CASE WHEN false THEN COALESCE(sum(balance), $1) END AS total, CASE WHEN false THEN COALESCE(sum(balance), $1) END AS __shardgate_1, ` +
				`sum(balance) AS __shardgate_2, $1 AS __shardgate_3 FROM accounts`}},
	{name: "parameter in ORDER BY", sql: "SELECT country FROM accounts GROUP BY country ORDER BY sum(balance) * $1 LIMIT 3",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -3, Func: AggSum}}, HiddenColumns: 4,
			OrderBy: []SortKey{{Column: -1}}, Limit: c("3"),
			Outer: &Outer{SQL: `SELECT __shardgate_in.i1 * __shardgate_in.i2 FROM __shardgate_in`, Inputs: []Column{-3, -2}, Outputs: []Column{-1}},
			Rewritten: `SELECT country, CASE WHEN false THEN sum(balance) * $1 END AS __shardgate_1, sum(balance) AS __shardgate_2, $1 AS __shardgate_3, ` +
				`CASE WHEN false THEN sum(balance) * $1 END AS __shardgate_4 FROM accounts GROUP BY country`}},
	{name: "parameter used first in WHERE", sql: "SELECT country FROM accounts WHERE balance > $1 GROUP BY country HAVING sum(balance) > 2 * $1",
		msg: "parameter $1 in an expression over aggregates, used first in WHERE"},
	{name: "whole row", sql: "SELECT count(*)::text || row(a.*)::text FROM accounts a", msg: "whole-row reference"},
	{name: "other aggregate inside", sql: "SELECT coalesce(any_value(balance), 0) FROM accounts", msg: "aggregate any_value()"},
}

func TestMergeOuter(t *testing.T) { testMerge(t, outerCases) }

// TestMergeDistinctOrder: with DISTINCT, ORDER BY must be in the select
// list; shards of a grouped query get neither, so the router says so.
func TestMergeDistinctOrder(t *testing.T) {
	r := newTestRouter(t, nil)
	_, err := route(r, "SELECT DISTINCT count(*) FROM accounts GROUP BY country ORDER BY sum(balance)", nil, nil, Hints{})
	if errCode(err) != wire.InvalidColumnReference {
		t.Fatalf("got %v, want 42P10", err)
	}
}

// TestHavingConstants: a HAVING constant the executor would compare
// differently from PostgreSQL goes to the Outer statement.
func TestHavingConstants(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, tc := range []struct {
		having string
		simple bool
	}{
		{"count(*) > 5", true},
		{"max(name) = 'x'", false}, // a string constant is read as the column's type
		{"bool_or(name = 'a') = true", false},
		{"max(name) = $1", true},
		{"sum(balance) > $1", true},
		{"sum(balance) > $1::numeric", true},
		{"sum(balance) > 2.5", false},
		{"sum(balance) > 2.5::int", false},
		{"sum(balance) > '2'::int", false},
	} {
		plan, err := route(r, "SELECT country FROM accounts GROUP BY country HAVING "+tc.having, params("1"), nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", tc.having, err)
		}
		m := plan.Merge
		if simple := len(m.Having) == 1 && m.Outer == nil; simple != tc.simple {
			t.Errorf("%s: Having %+v, Outer %+v", tc.having, m.Having, m.Outer)
		}
	}
}
