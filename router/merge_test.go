package router

import (
	"reflect"
	"strings"
	"testing"

	"github.com/shardgate/shardgate/wire"
)

type mergeCase struct {
	name string
	sql  string
	want *Merge // nil: rows are concatenated
	msg  string // a 0A000 error mentioning this
}

func c(s string) *Expr  { return &Expr{Const: s} }
func param(n int) *Expr { return &Expr{Param: n} }

var mergeCases = []mergeCase{
	{name: "none", sql: "SELECT id, name FROM accounts WHERE balance > 0"},
	{name: "LIMIT ALL", sql: "SELECT * FROM accounts LIMIT ALL"},
	{name: "ORDER BY column", sql: "SELECT id, name FROM accounts ORDER BY name",
		want: &Merge{OrderBy: []SortKey{{Column: 1}}}},
	{name: "ORDER BY position", sql: "SELECT id, name FROM accounts ORDER BY 2 DESC NULLS LAST, 1",
		want: &Merge{OrderBy: []SortKey{{Column: 1, Desc: true}, {Column: 0}}}},
	{name: "ORDER BY alias", sql: "SELECT id AS x, name FROM accounts ORDER BY x DESC",
		want: &Merge{OrderBy: []SortKey{{Column: 0, Desc: true, NullsFirst: true}}}},
	{name: "ORDER BY expression", sql: "SELECT id, lower(name) FROM accounts ORDER BY lower(name) NULLS FIRST",
		want: &Merge{OrderBy: []SortKey{{Column: 1, NullsFirst: true}}}},
	{name: "ORDER BY qualified column", sql: "SELECT a.id FROM accounts a ORDER BY a.id",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}}},
	{name: "ORDER BY hidden", sql: "SELECT id FROM accounts ORDER BY name, balance DESC",
		want: &Merge{OrderBy: []SortKey{{Column: -2}, {Column: -1, Desc: true, NullsFirst: true}}, HiddenColumns: 2,
			Rewritten: "SELECT id, name AS __shardgate_1, balance AS __shardgate_2 FROM accounts ORDER BY name, balance DESC"}},
	{name: "star ORDER BY LIMIT OFFSET", sql: "SELECT * FROM accounts ORDER BY created_at DESC LIMIT 10 OFFSET 5",
		want: &Merge{OrderBy: []SortKey{{Column: -1, Desc: true, NullsFirst: true}}, Limit: c("10"), Offset: c("5"), HiddenColumns: 1,
			Rewritten: "SELECT *, created_at AS __shardgate_1 FROM accounts ORDER BY created_at DESC LIMIT 15"}},
	{name: "star then alias", sql: "SELECT *, balance * 2 AS b2 FROM accounts ORDER BY b2, name",
		want: &Merge{OrderBy: []SortKey{{Column: -2}, {Column: -1}}, HiddenColumns: 1,
			Rewritten: "SELECT *, balance * 2 AS b2, name AS __shardgate_1 FROM accounts ORDER BY b2, name"}},
	{name: "star position", sql: "SELECT * FROM accounts ORDER BY 2",
		want: &Merge{OrderBy: []SortKey{{Column: 1}}}},
	{name: "LIMIT OFFSET parameters", sql: "SELECT * FROM accounts LIMIT $1 OFFSET $2",
		want: &Merge{Limit: param(1), Offset: param(2), Rewritten: "SELECT * FROM accounts LIMIT $1::bigint + $2::bigint"}},
	{name: "LIMIT parameter OFFSET constant", sql: "SELECT id FROM accounts ORDER BY id LIMIT $1 OFFSET 20",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}, Limit: param(1), Offset: c("20"), Rewritten: "SELECT id FROM accounts ORDER BY id LIMIT $1::bigint + '20'::bigint"}},
	{name: "LIMIT", sql: "SELECT * FROM accounts LIMIT 5", want: &Merge{Limit: c("5")}},
	{name: "grouped LIMIT OFFSET parameters", sql: "SELECT country, count(*) FROM accounts GROUP BY 1 ORDER BY 1 LIMIT $1 OFFSET $2",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}}, OrderBy: []SortKey{{Column: 0}}, Limit: param(1), Offset: param(2),
			Rewritten: "SELECT country, count(*) FROM accounts GROUP BY 1 HAVING CASE WHEN false THEN $1::bigint END IS NULL AND CASE WHEN false THEN $2::bigint END IS NULL"}},
	{name: "FETCH FIRST", sql: "SELECT * FROM accounts FETCH FIRST 3 ROWS ONLY", want: &Merge{Limit: c("3")}},
	{name: "OFFSET", sql: "SELECT * FROM accounts OFFSET 5", want: &Merge{Offset: c("5"), Rewritten: "SELECT * FROM accounts"}},
	{name: "OFFSET parameter", sql: "SELECT id FROM accounts ORDER BY id OFFSET $1",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}, Offset: param(1), Rewritten: "SELECT id FROM accounts ORDER BY id OFFSET CASE WHEN false THEN $1::bigint END"}},
	{name: "WITH TIES", sql: "SELECT id, name FROM accounts ORDER BY name FETCH FIRST 3 ROWS WITH TIES",
		want: &Merge{OrderBy: []SortKey{{Column: 1}}, Limit: c("3"), WithTies: 1}},
	{name: "WITH TIES OFFSET", sql: "SELECT id, name FROM accounts ORDER BY name OFFSET $2 ROWS FETCH FIRST $1 ROWS WITH TIES",
		want: &Merge{OrderBy: []SortKey{{Column: 1}}, Limit: param(1), Offset: param(2), WithTies: 1,
			Rewritten: "SELECT id, name FROM accounts ORDER BY name FETCH FIRST ($1::bigint + $2::bigint) ROWS WITH TIES"}},
	{name: "UNION", sql: "SELECT id, name FROM accounts UNION SELECT parent, country FROM accounts",
		want: &Merge{OrderBy: []SortKey{{Column: 0}, {Column: 1}}, Dedup: true,
			Rewritten: "SELECT id, name FROM accounts UNION SELECT parent, country FROM accounts ORDER BY 1, 2"}},
	{name: "UNION ORDER BY LIMIT OFFSET", sql: "SELECT id AS k, name FROM accounts UNION ALL SELECT parent, country FROM accounts UNION SELECT id, name FROM accounts WHERE id > 5 ORDER BY name DESC LIMIT 5 OFFSET $1",
		want: &Merge{OrderBy: []SortKey{{Column: 1, Desc: true, NullsFirst: true}, {Column: 0}}, Dedup: true, Limit: c("5"), Offset: param(1),
			Rewritten: "(SELECT id AS k, name FROM accounts UNION ALL SELECT parent, country FROM accounts) UNION SELECT id, name FROM accounts WHERE id > 5 ORDER BY name DESC, 1 LIMIT '5'::bigint + $1::bigint"}},
	{name: "UNION OFFSET parameter", sql: "SELECT id FROM accounts UNION SELECT parent FROM accounts OFFSET $1",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}, Dedup: true, Offset: param(1),
			Rewritten: "SELECT id FROM accounts UNION SELECT parent FROM accounts ORDER BY 1 OFFSET CASE WHEN false THEN $1::bigint END"}},
	{name: "UNION ALL OFFSET parameter", sql: "SELECT id FROM accounts UNION ALL SELECT parent FROM accounts ORDER BY 1 OFFSET $1",
		want: &Merge{OrderBy: []SortKey{{Column: 0}}, Offset: param(1),
			Rewritten: "SELECT id FROM accounts UNION ALL SELECT parent FROM accounts ORDER BY 1 OFFSET CASE WHEN false THEN $1::bigint END"}},
	{name: "UNION WITH TIES", sql: "SELECT id, name FROM accounts UNION SELECT parent, country FROM accounts ORDER BY 2 OFFSET 1 FETCH FIRST 2 ROWS WITH TIES",
		want: &Merge{OrderBy: []SortKey{{Column: 1}, {Column: 0}}, Dedup: true, WithTies: 1, Limit: c("2"), Offset: c("1"),
			Rewritten: "SELECT * FROM (SELECT id, name FROM accounts UNION SELECT parent, country FROM accounts ORDER BY 2 FETCH FIRST 3 ROWS WITH TIES) __shardgate_u ORDER BY 2 ASC NULLS LAST, 1 ASC NULLS LAST"}},
	{name: "aggregates", sql: "SELECT count(*), count(name), sum(balance), min(name), max(name), avg(balance), bool_and(active), bool_or(active), every(active) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 1, Aggregates: []Aggregate{
			{Column: 0, Func: AggCount}, {Column: 1, Func: AggCount}, {Column: 2, Func: AggSum}, {Column: 3, Func: AggMin}, {Column: 4, Func: AggMax},
			{Column: 5, Func: AggAvg, Count: -1}, {Column: 6, Func: AggBoolAnd}, {Column: 7, Func: AggBoolOr}, {Column: 8, Func: AggBoolAnd}},
			Rewritten: "SELECT count(*), count(name), sum(balance), min(name), max(name), sum(balance) AS avg, bool_and(active), bool_or(active), every(active), count(balance) AS __shardgate_1 FROM accounts"}},
	{name: "FILTER", sql: "SELECT count(*) FILTER (WHERE active) AS n FROM accounts",
		want: &Merge{Grouped: true, Aggregates: []Aggregate{{Column: 0, Func: AggCount}}}},
	{name: "avg with FILTER", sql: "SELECT avg(balance) FILTER (WHERE active) FROM accounts",
		want: &Merge{Grouped: true, HiddenColumns: 1, Aggregates: []Aggregate{{Column: 0, Func: AggAvg, Count: -1}},
			Rewritten: "SELECT sum(balance) FILTER (WHERE active) AS avg, count(balance) FILTER (WHERE active) AS __shardgate_1 FROM accounts"}},
	{name: "GROUP BY HAVING ORDER BY LIMIT", sql: "SELECT country, count(*) FROM accounts GROUP BY country HAVING count(*) > 5 ORDER BY 2 DESC LIMIT 3",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}},
			Having: []Cond{{Column: 1, Op: ">", Value: Expr{Const: "5"}}}, OrderBy: []SortKey{{Column: 1, Desc: true, NullsFirst: true}}, Limit: c("3"),
			Rewritten: "SELECT country, count(*) FROM accounts GROUP BY country HAVING CASE WHEN false THEN count(*) > 5 END IS NULL"}},
	{name: "GROUP BY hidden", sql: "SELECT count(*) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{-1}, Aggregates: []Aggregate{{Column: 0, Func: AggCount}}, HiddenColumns: 1,
			Rewritten: "SELECT count(*), country AS __shardgate_1 FROM accounts GROUP BY country"}},
	{name: "GROUP BY position and alias", sql: "SELECT country AS c, sum(balance) AS s FROM accounts GROUP BY 1 ORDER BY s",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggSum}}, OrderBy: []SortKey{{Column: 1}},
			Rewritten: "SELECT country AS c, sum(balance) AS s FROM accounts GROUP BY 1"}},
	{name: "GROUP BY without aggregates", sql: "SELECT country FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, GroupBy: []Column{0}}},
	{name: "HAVING hidden aggregate, flipped", sql: "SELECT country FROM accounts GROUP BY country HAVING $1 < sum(balance)",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -1, Func: AggSum}},
			Having: []Cond{{Column: -1, Op: ">", Value: Expr{Param: 1}}}, HiddenColumns: 1,
			Rewritten: "SELECT country, sum(balance) AS __shardgate_1 FROM accounts GROUP BY country HAVING CASE WHEN false THEN $1 < sum(balance) END IS NULL"}},
	{name: "HAVING group column", sql: "SELECT balance, count(*) FROM accounts GROUP BY balance HAVING balance <> 5 AND count(*) >= 2",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}},
			Having:    []Cond{{Column: 0, Op: "<>", Value: Expr{Const: "5"}}, {Column: 1, Op: ">=", Value: Expr{Const: "2"}}},
			Rewritten: "SELECT balance, count(*) FROM accounts GROUP BY balance HAVING CASE WHEN false THEN balance <> 5 AND count(*) >= 2 END IS NULL"}},
	{name: "ORDER BY hidden avg", sql: "SELECT country FROM accounts GROUP BY country ORDER BY avg(balance) DESC",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: -2, Func: AggAvg, Count: -1}},
			OrderBy: []SortKey{{Column: -2, Desc: true, NullsFirst: true}}, HiddenColumns: 2,
			Rewritten: "SELECT country, sum(balance) AS __shardgate_1, count(balance) AS __shardgate_2 FROM accounts GROUP BY country"}},
	{name: "DISTINCT", sql: "SELECT DISTINCT country FROM accounts", want: &Merge{Distinct: true}},
	{name: "DISTINCT LIMIT OFFSET", sql: "SELECT DISTINCT country FROM accounts ORDER BY country LIMIT 10 OFFSET 10",
		want: &Merge{Distinct: true, OrderBy: []SortKey{{Column: 0}}, Limit: c("10"), Offset: c("10"),
			Rewritten: "SELECT DISTINCT country FROM accounts ORDER BY country LIMIT 20"}},
	{name: "DISTINCT ON", sql: "SELECT DISTINCT ON (country) country, id FROM accounts ORDER BY country, id DESC",
		want: &Merge{DistinctOn: []Column{0}, OrderBy: []SortKey{{Column: 0}, {Column: 1, Desc: true, NullsFirst: true}}}},
	{name: "DISTINCT grouped", sql: "SELECT DISTINCT count(*) FROM accounts GROUP BY country",
		want: &Merge{Grouped: true, Distinct: true, GroupBy: []Column{-1}, Aggregates: []Aggregate{{Column: 0, Func: AggCount}}, HiddenColumns: 1,
			Rewritten: "SELECT count(*), country AS __shardgate_1 FROM accounts GROUP BY country"}},

	{name: "window function", sql: "SELECT id, first_value(id) OVER (ORDER BY id ROWS 2 PRECEDING) FROM accounts", msg: "window function first_value()"},
	{name: "WINDOW clause", sql: "SELECT id, sum(balance) OVER w FROM accounts WINDOW w AS (PARTITION BY country)", msg: "not partitioned by the sharding key"},
	{name: "xmlagg", sql: "SELECT xmlagg(name::xml) FROM accounts", msg: "aggregate xmlagg()"},
	{name: "json_object_agg ordered", sql: "SELECT country, json_object_agg(id, name ORDER BY id) FROM accounts GROUP BY country", msg: "json_object_agg() with DISTINCT, ORDER BY"},
	{name: "JSON_ARRAYAGG", sql: "SELECT JSON_ARRAYAGG(id) FROM accounts", msg: "JSON_ARRAYAGG"},
	{name: "any_value", sql: "SELECT any_value(balance) FROM accounts", msg: "aggregate any_value()"},
	{name: "percentile", sql: "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY balance) FROM accounts", msg: "aggregate percentile_cont()"},
	{name: "ORDER BY USING", sql: "SELECT id FROM accounts ORDER BY id USING <", msg: "USING"},
	{name: "WITH TIES grouped", sql: "SELECT country, count(*) FROM accounts GROUP BY 1 ORDER BY 2 FETCH FIRST 3 ROWS WITH TIES",
		want: &Merge{Grouped: true, GroupBy: []Column{0}, Aggregates: []Aggregate{{Column: 1, Func: AggCount}}, OrderBy: []SortKey{{Column: 1}}, Limit: c("3"), WithTies: 1,
			Rewritten: "SELECT country, count(*) FROM accounts GROUP BY 1"}},
	{name: "WITH TIES DISTINCT", sql: "SELECT DISTINCT name FROM accounts ORDER BY 1 OFFSET 1 FETCH FIRST 3 ROWS WITH TIES",
		want: &Merge{Distinct: true, OrderBy: []SortKey{{Column: 0}}, Limit: c("3"), Offset: c("1"), WithTies: 1,
			Rewritten: "SELECT DISTINCT name FROM accounts ORDER BY 1 FETCH FIRST 4 ROWS WITH TIES"}},
	{name: "UNION of star", sql: "SELECT * FROM accounts UNION SELECT * FROM accounts WHERE id > 2 LIMIT 3",
		want: &Merge{Dedup: true, OrderAll: true, Limit: c("3"),
			Rewritten: "SELECT * FROM (SELECT * FROM accounts UNION SELECT * FROM accounts WHERE id > 2) __shardgate_u ORDER BY __shardgate_u LIMIT 3"}},
	{name: "UNION of star with ORDER BY", sql: "SELECT * FROM accounts UNION SELECT * FROM accounts ORDER BY 1", msg: "UNION of a select list with * and ORDER BY"},
	{name: "UNION ORDER BY USING", sql: "SELECT id FROM accounts UNION SELECT parent FROM accounts ORDER BY 1 USING <", msg: "USING"},
	{name: "star with aggregates", sql: "SELECT *, count(*) FROM accounts GROUP BY id", msg: "SELECT * with aggregates"},
	{name: "LIMIT expression", sql: "SELECT id FROM accounts LIMIT 1 + 1", msg: "LIMIT"},
	{name: "DISTINCT ON grouped", sql: "SELECT DISTINCT ON (country) country, count(*) FROM accounts GROUP BY country", msg: "DISTINCT ON with aggregates"},
}

func TestMerge(t *testing.T) { testMerge(t, mergeCases) }

func testMerge(t *testing.T, cases []mergeCase) {
	r := newTestRouter(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, err := route(r, tc.sql, nil, nil, Hints{})
			if tc.msg != "" {
				if err == nil || errCode(err) != wire.FeatureNotSupported || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("%s: got %v, want 0A000 mentioning %q", tc.sql, err, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.sql, err)
			}
			if plan.Kind != All {
				t.Fatalf("%s: %v, want a fan-out", tc.sql, plan)
			}
			if !reflect.DeepEqual(plan.Merge, tc.want) {
				t.Fatalf("%s:\n got %+v\nwant %+v", tc.sql, plan.Merge, tc.want)
			}
		})
	}
}

// TestMergeOnlyWhenFanOut checks that what cannot be merged is fine on one
// shard, and that one shard gets no merge.
func TestMergeOnlyWhenFanOut(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, sql := range []string{
		"SELECT string_agg(name, ',') FROM accounts WHERE id = 3",
		"SELECT id, row_number() OVER () FROM accounts WHERE id = $1",
		"SELECT count(*) FROM accounts WHERE id = 3 ORDER BY 1 LIMIT 1 OFFSET 2",
	} {
		plan, err := route(r, sql, params(3), nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if plan.Kind != Direct || plan.Merge != nil {
			t.Fatalf("%s: %v with merge %+v, want Direct without merge", sql, plan, plan.Merge)
		}
	}
	// A subset of shards merges too.
	plan, err := route(r, "SELECT count(*) FROM accounts WHERE id IN (2, 3)", nil, nil, Hints{})
	if err != nil || plan.Kind != Multi || plan.Merge == nil || !plan.Merge.Grouped {
		t.Fatalf("Multi count: %v %+v %v", plan, plan.Merge, err)
	}
}

func TestColumnIndex(t *testing.T) {
	for _, tc := range []struct {
		c    Column
		n    int
		want int
	}{{0, 3, 0}, {2, 3, 2}, {-1, 3, 2}, {-3, 5, 2}} {
		if got := tc.c.Index(tc.n); got != tc.want {
			t.Errorf("Column(%d).Index(%d) = %d, want %d", tc.c, tc.n, got, tc.want)
		}
	}
}

func TestExprInt(t *testing.T) {
	for _, tc := range []struct {
		e       Expr
		params  [][]byte
		formats []int16
		n       int64
		ok      bool
		code    string
	}{
		{e: Expr{Const: "10"}, n: 10, ok: true},
		{e: Expr{Null: true}},
		{e: Expr{Param: 1}, params: params(7), n: 7, ok: true},
		{e: Expr{Param: 1}, params: params(int8Binary(9)), formats: []int16{1}, n: 9, ok: true},
		{e: Expr{Param: 1}, params: params(nil)},
		{e: Expr{Param: 1}, params: params("x"), code: wire.InvalidTextRepresentation},
	} {
		n, ok, err := tc.e.Int(tc.params, tc.formats)
		if tc.code != "" {
			if err == nil || errCode(err) != tc.code {
				t.Errorf("%+v: err %v, want %s", tc.e, err, tc.code)
			}
			continue
		}
		if err != nil || n != tc.n || ok != tc.ok {
			t.Errorf("%+v: got %d %v %v, want %d %v", tc.e, n, ok, err, tc.n, tc.ok)
		}
	}
}

// TestCountUnusedOutputs: the select list items of a counted subquery that
// PostgreSQL's planner does not compute become placeholders, so that an
// error only they would raise is not raised; the others stay as written.
func TestCountUnusedOutputs(t *testing.T) {
	r := newTestRouter(t, nil)
	for _, tc := range []struct{ sql, rewritten string }{
		{"SELECT count(*) FROM (SELECT country, max(id) / 0 FROM accounts GROUP BY country) s",
			"SELECT country, CASE WHEN false THEN CASE WHEN false THEN max(id) / 0 END END AS \"case\", max(id) AS __shardgate_1 FROM accounts GROUP BY country"},
		{"SELECT count(*) FROM (SELECT id / 0, name FROM accounts) s",
			"SELECT CASE WHEN false THEN id / 0 END, name FROM accounts"},
		{"SELECT count(*) FROM (SELECT DISTINCT id / 0 FROM accounts) s",
			"SELECT DISTINCT id / 0 FROM accounts"},
		{"SELECT count(*) FROM (SELECT country, max(id) / 0 AS m FROM accounts GROUP BY country ORDER BY m) s",
			"SELECT country, CASE WHEN false THEN max(id) / 0 END AS m, max(id) AS __shardgate_1 FROM accounts GROUP BY country"},
		{"SELECT count(*) FROM (SELECT id, nextval('s') FROM accounts) s",
			"SELECT id, nextval('s') FROM accounts"},
		{"SELECT EXISTS (SELECT id / 0 FROM accounts)",
			"SELECT CASE WHEN false THEN id / 0 END FROM accounts"},
		{"SELECT EXISTS (SELECT max(id) / 0 FROM accounts)",
			"SELECT CASE WHEN false THEN max(id) / 0 END AS \"?column?\", max(id) AS __shardgate_1 FROM accounts"},
	} {
		plan, err := route(r, tc.sql, nil, nil, Hints{})
		if err != nil {
			t.Fatalf("%s: %v", tc.sql, err)
		}
		if plan.Merge == nil || plan.Merge.Rewritten != tc.rewritten {
			t.Errorf("%s:\n got %+v\nwant %s", tc.sql, plan.Merge, tc.rewritten)
		}
	}
}
