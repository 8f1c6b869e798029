package router

import (
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

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

	{name: "bit_xor DISTINCT dedupes", sql: "SELECT bit_xor(DISTINCT id) FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 0, Func: AggBitXor, Distinct: true}}, SortedBy: []SortKey{{Column: -1}}, HiddenColumns: 1,
			Rewritten: "SELECT bit_xor(DISTINCT id), id AS __shardgate_1 FROM accounts GROUP BY id ORDER BY 2"}},
	{name: "other aggregate", sql: "SELECT json_object_agg(DISTINCT name, id) FROM accounts", msg: "json_object_agg() with DISTINCT"},
}

func TestMergeDistinctAggregates(t *testing.T) { testMerge(t, distinctCases) }

// multiDistinctCases: DISTINCT aggregates of several values (or FILTERs)
// run as one statement per shard grouped by grouping sets, tagged by
// GROUPING, sorted by the group key, the tag, then the values; their
// partials are computed without DISTINCT, as they are in their own set.
var multiDistinctCases = []mergeCase{
	{name: "two values without GROUP BY", sql: "SELECT count(DISTINCT name), sum(DISTINCT balance) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 3,
			Aggregates: []Aggregate{{Column: 0, Func: AggCount, Distinct: true, Tag: 1}, {Column: 1, Func: AggSum, Distinct: true, Tag: 2}},
			SortedBy:   []SortKey{{Column: -1}, {Column: -3}, {Column: -2}},
			Tagged:     &Tagged{Column: -1, Plain: 3, Sets: []TaggedSet{{Tag: 1, Value: -3}, {Tag: 2, Value: -2}}},
			Rewritten: "SELECT CASE WHEN false THEN count(DISTINCT name) ELSE pg_catalog.max(1::bigint) FILTER (WHERE name IS NOT NULL) END AS count, " +
				"CASE WHEN false THEN sum(DISTINCT balance) ELSE pg_catalog.max(balance) END AS sum, name AS __shardgate_1, balance AS __shardgate_2, " +
				"GROUPING(name, balance) AS __shardgate_3 FROM accounts GROUP BY GROUPING SETS ((), name, balance) ORDER BY 5, 3, 4"}},
	{name: "GROUP BY, plain aggregates, FILTER, avg", sql: "SELECT country, count(DISTINCT name), count(DISTINCT name) FILTER (WHERE active), " +
		"avg(DISTINCT balance), sum(balance), min(name) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 5,
			Aggregates: []Aggregate{{Column: 1, Func: AggCount, Distinct: true, Tag: 3}, {Column: 2, Func: AggCount, Distinct: true, Tag: 5},
				{Column: 3, Func: AggAvg, Count: -5, Distinct: true, Tag: 6}, {Column: 4, Func: AggSum, Tag: 7}, {Column: 5, Func: AggMin, Tag: 7}},
			SortedBy: []SortKey{{Column: 0}, {Column: -1}, {Column: -4}, {Column: -3}, {Column: -2}},
			Tagged:   &Tagged{Column: -1, Plain: 7, Sets: []TaggedSet{{Tag: 3, Value: -4}, {Tag: 5, Value: -3}, {Tag: 6, Value: -2}}},
			Rewritten: "SELECT country, CASE WHEN false THEN count(DISTINCT name) ELSE pg_catalog.max(1::bigint) FILTER (WHERE name IS NOT NULL) END AS count, " +
				"CASE WHEN false THEN count(DISTINCT name) FILTER (WHERE active) ELSE pg_catalog.max(1::bigint) FILTER (WHERE CASE WHEN active THEN name END IS NOT NULL) END AS count, " +
				"CASE WHEN false THEN sum(DISTINCT balance) ELSE pg_catalog.max(balance) END AS avg, sum(balance), min(name), " +
				"CASE WHEN false THEN count(DISTINCT balance) ELSE pg_catalog.max(1::bigint) FILTER (WHERE balance IS NOT NULL) END AS __shardgate_1, " +
				"name AS __shardgate_2, CASE WHEN active THEN name END AS __shardgate_3, balance AS __shardgate_4, " +
				"GROUPING(name, CASE WHEN active THEN name END, balance) AS __shardgate_5 FROM accounts " +
				"GROUP BY country, GROUPING SETS ((), name, CASE WHEN active THEN name END, balance) ORDER BY 1, 11, 8, 9, 10"}},
	{name: "a value of the group key has no set", sql: "SELECT country, count(DISTINCT country), count(DISTINCT name) FROM accounts GROUP BY 1",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 2,
			Aggregates: []Aggregate{{Column: 1, Func: AggCount, Distinct: true, Tag: 1}, {Column: 2, Func: AggCount, Distinct: true, Tag: 0}},
			SortedBy:   []SortKey{{Column: 0}, {Column: -1}, {Column: -2}},
			Tagged:     &Tagged{Column: -1, Plain: 1, Sets: []TaggedSet{{Tag: 0, Value: -2}}},
			Rewritten: "SELECT country, CASE WHEN false THEN count(DISTINCT country) ELSE pg_catalog.max(1::bigint) FILTER (WHERE country IS NOT NULL) END AS count, " +
				"CASE WHEN false THEN count(DISTINCT name) ELSE pg_catalog.max(1::bigint) FILTER (WHERE name IS NOT NULL) END AS count, " +
				"name AS __shardgate_1, GROUPING(name) AS __shardgate_2 " +
				"FROM accounts GROUP BY 1, GROUPING SETS ((), name) ORDER BY 1, 5, 4"}},
	{name: "expressions, HAVING and ORDER BY over them", sql: "SELECT country, count(DISTINCT name) - count(DISTINCT balance) AS d FROM accounts " +
		"GROUP BY country HAVING count(DISTINCT name) > 1 ORDER BY d DESC, sum(DISTINCT balance)",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, HiddenColumns: 6,
			Aggregates: []Aggregate{{Column: -6, Func: AggCount, Distinct: true, Tag: 1}, {Column: -5, Func: AggCount, Distinct: true, Tag: 2},
				{Column: -4, Func: AggSum, Distinct: true, Tag: 2}},
			Having:   []Cond{{Column: -6, Op: ">", Value: Expr{Const: "1"}}},
			OrderBy:  []SortKey{{Column: 1, Desc: true, NullsFirst: true}, {Column: -4}},
			SortedBy: []SortKey{{Column: 0}, {Column: -1}, {Column: -3}, {Column: -2}},
			Tagged:   &Tagged{Column: -1, Plain: 3, Sets: []TaggedSet{{Tag: 1, Value: -3}, {Tag: 2, Value: -2}}},
			Outer:    &Outer{SQL: "SELECT __shardgate_in.i1 - __shardgate_in.i2 AS d FROM __shardgate_in", Inputs: []Column{-6, -5}, Outputs: []Column{1}},
			Rewritten: "SELECT country, CASE WHEN false THEN count(DISTINCT name) - count(DISTINCT balance) END AS d, " +
				"CASE WHEN false THEN count(DISTINCT name) ELSE pg_catalog.max(1::bigint) FILTER (WHERE name IS NOT NULL) END AS __shardgate_1, " +
				"CASE WHEN false THEN count(DISTINCT balance) ELSE pg_catalog.max(1::bigint) FILTER (WHERE balance IS NOT NULL) END AS __shardgate_2, " +
				"CASE WHEN false THEN sum(DISTINCT balance) ELSE pg_catalog.max(balance) END AS __shardgate_3, name AS __shardgate_4, balance AS __shardgate_5, " +
				"GROUPING(name, balance) AS __shardgate_6 FROM accounts GROUP BY country, GROUPING SETS ((), name, balance) " +
				"HAVING CASE WHEN false THEN count(DISTINCT name) > 1 END IS NULL ORDER BY 1, 8, 6, 7"}},
	{name: "DISTINCT values with an ordered aggregate", sql: "SELECT count(DISTINCT name), count(DISTINCT id), string_agg(name, ',' ORDER BY id) FROM accounts",
		msg: "DISTINCT aggregates together with an aggregate's ORDER BY"},
	{name: "separator read from rows", sql: "SELECT count(DISTINCT name), count(DISTINCT id), string_agg(name, country) FROM accounts",
		msg: "separator read from rows together with DISTINCT aggregates of different values"},
	{name: "bit_xor and collecting aggregates", sql: "SELECT bit_xor(DISTINCT id), string_agg(DISTINCT name, ',') FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 4,
			Aggregates: []Aggregate{{Column: 0, Func: AggBitXor, Distinct: true, Tag: 1}, {Column: 1, Func: AggStringAgg, Distinct: true, Tag: 2, Sep: -4}},
			SortedBy:   []SortKey{{Column: -1}, {Column: -3}, {Column: -2}},
			Tagged:     &Tagged{Column: -1, Plain: 3, Sets: []TaggedSet{{Tag: 1, Value: -3}, {Tag: 2, Value: -2}}},
			Rewritten: "SELECT CASE WHEN false THEN bit_xor(DISTINCT id) ELSE pg_catalog.bit_or(id) END AS bit_xor, string_agg(DISTINCT name, ','), " +
				"CASE WHEN false THEN pg_catalog.string_agg(name, ',') ELSE ',' END AS __shardgate_1, id AS __shardgate_2, name AS __shardgate_3, " +
				"GROUPING(id, name) AS __shardgate_4 FROM accounts GROUP BY GROUPING SETS ((), id, name) ORDER BY 6, 4, 5"}},
	// A row value's set groups by its fields: GROUPING SETS reads (name,
	// id) as two columns, and grouping by them is grouping by the row.
	// count counts ROW(NULL, NULL), so its rows count 1 without a FILTER.
	{name: "row value", sql: "SELECT count(DISTINCT (name, id)), count(DISTINCT id) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 3,
			Aggregates: []Aggregate{{Column: 0, Func: AggCount, Distinct: true, Tag: 0}, {Column: 1, Func: AggCount, Distinct: true, Tag: 2}},
			SortedBy:   []SortKey{{Column: -1}, {Column: -3}, {Column: -2}},
			Tagged:     &Tagged{Column: -1, Plain: 3, Sets: []TaggedSet{{Tag: 0, Value: -3, More: []Column{-2}}, {Tag: 2, Value: -2}}},
			Rewritten: "SELECT CASE WHEN false THEN count(DISTINCT (name, id)) ELSE pg_catalog.max(1::bigint) END AS count, " +
				"CASE WHEN false THEN count(DISTINCT id) ELSE pg_catalog.max(1::bigint) FILTER (WHERE id IS NOT NULL) END AS count, " +
				"name AS __shardgate_1, id AS __shardgate_2, GROUPING(name, id) AS __shardgate_3 FROM accounts " +
				"GROUP BY GROUPING SETS ((), (name, id), id) ORDER BY 5, 3, 4"}},
}

func TestMergeMultiDistinctAggregates(t *testing.T) { testMerge(t, multiDistinctCases) }

// TestMultiDistinctSpelling: a DISTINCT value written otherwise than the
// GROUP BY item it equals — qualified by the only table's name or alias,
// or not — is that item: it gets no grouping set of its own, so that the
// shards' tags are the ones the merge expects. With a join the names may
// differ, and the value keeps its set.
func TestMultiDistinctSpelling(t *testing.T) {
	r := newTestRouter(t, nil)
	sets := func(sql string) int {
		t.Helper()
		p, err := route(r, sql, nil, nil, Hints{})
		if err != nil || p.Merge == nil || p.Merge.Tagged == nil {
			t.Fatalf("%s: plan %v, error %v; want a tagged merge", sql, p, err)
		}
		return len(p.Merge.Tagged.Sets)
	}
	for sql, want := range map[string]int{
		"SELECT accounts.country, count(DISTINCT country), count(DISTINCT name) FROM accounts GROUP BY accounts.country":                     1,
		"SELECT country, count(DISTINCT accounts.country), count(DISTINCT name) FROM accounts GROUP BY country":                              1,
		"SELECT country, count(DISTINCT public.accounts.country), count(DISTINCT name) FROM public.accounts GROUP BY country":                1,
		"SELECT a.country, count(DISTINCT country), count(DISTINCT a.name), sum(DISTINCT balance) FROM accounts a GROUP BY 1":                2,
		"SELECT country, name, count(DISTINCT accounts.name), count(DISTINCT balance) FROM accounts GROUP BY country, name":                  1,
		"SELECT country, count(DISTINCT (country, name)), count(DISTINCT balance) FROM accounts GROUP BY country":                            2,
		"SELECT country, count(DISTINCT (name, balance)), count(DISTINCT ROW(balance, name)), count(DISTINCT name) FROM accounts GROUP BY 1": 2,
		"SELECT country, count(DISTINCT (accounts.country, country)), count(DISTINCT name) FROM accounts GROUP BY 1":                         1,
	} {
		if got := sets(sql); got != want {
			t.Errorf("%s: %d grouping sets, want %d", sql, got, want)
		}
	}
}

// TestMultiDistinctCollations: DISTINCT values that are one expression
// under different collations (or under another than a GROUP BY key's) are
// refused, as PostgreSQL sorts their grouping sets' rows by the one in
// place of the other; the FILTER that marks a set's values present
// parenthesizes a value PostgreSQL would otherwise bind wrongly (NOT x).
func TestMultiDistinctCollations(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, sql := range []string{
		`SELECT count(DISTINCT (name COLLATE "C")), count(DISTINCT name) FROM accounts`,
		`SELECT count(DISTINCT name), count(DISTINCT (name COLLATE "C")), count(DISTINCT id) FROM accounts`,
		`SELECT name, count(DISTINCT (name COLLATE "C")), count(DISTINCT id) FROM accounts GROUP BY name`,
	} {
		_, err := route(r, sql, nil, nil, Hints{})
		if e, ok := wire.AsError(err); !ok || e.Code != wire.FeatureNotSupported || !strings.Contains(e.Message, "under different collations") {
			t.Errorf("%s: %v, want the 0A000 of one expression under different collations", sql, err)
		}
	}
	plan, err := route(r, "SELECT count(DISTINCT (NOT (id > 3))), count(DISTINCT name) FROM accounts", nil, nil, Hints{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.Merge.Rewritten, "FILTER (WHERE CASE WHEN true THEN NOT id > 3 END IS NOT NULL)") {
		t.Errorf("rewritten: %s", plan.Merge.Rewritten)
	}
}

// TestRewriteKeepsNotUnderTests: a statement the router rewrites keeps
// (NOT x) IS NULL as PostgreSQL reads it; pg_query's deparser writes it
// NOT x IS NULL, which reads NOT (x IS NULL) (nodes.go, guardTests).
func TestRewriteKeepsNotUnderTests(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, sql := range []string{
		"SELECT avg(balance) FROM accounts WHERE (NOT (balance > 5)) IS NULL",
		"SELECT avg(balance) FROM accounts WHERE (NOT (balance > 5)) IS NOT TRUE",
	} {
		plan, err := route(r, sql, nil, nil, Hints{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan.Merge.Rewritten, "CASE WHEN true THEN NOT balance > 5 END IS ") {
			t.Errorf("%s: rewritten as %s", sql, plan.Merge.Rewritten)
		}
	}
}

// TestOuterKeepsCollation: the Outer statement that evaluates a HAVING
// term or an expression over aggregates compares a group key or min/max
// written with COLLATE in that collation: its inputs otherwise have the
// database's default, where 'a' < 'A'.
func TestOuterKeepsCollation(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, sql := range []string{
		`SELECT count(*) FROM accounts GROUP BY (name COLLATE "C") HAVING (name COLLATE "C") < 'A'`,
		`SELECT sum(id) FROM accounts GROUP BY id, country HAVING min((name COLLATE "C")) > '10'`,
	} {
		plan, err := route(r, sql, nil, nil, Hints{})
		if err != nil {
			t.Fatal(err)
		}
		if plan.Merge.Outer == nil || !strings.Contains(plan.Merge.Outer.SQL, `COLLATE "C"`) {
			t.Errorf("%s: outer statement %+v, want its input COLLATE C", sql, plan.Merge.Outer)
		}
	}
}
