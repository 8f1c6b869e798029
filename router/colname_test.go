package router

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

func TestColumnName(t *testing.T) {
	for _, tc := range []struct{ sql, want string }{
		{"SELECT a", "a"},
		{"SELECT t.a", "a"},
		{"SELECT a AS b", "b"},
		{"SELECT count(*)", "count"},
		{"SELECT count(*)::int", "count"},
		{"SELECT 1::int", "int4"},
		{"SELECT (1 + 2)::numeric(10, 2)", "numeric"},
		{"SELECT 1 + 2", "?column?"},
		{"SELECT CASE WHEN true THEN 1 END", "case"},
		{"SELECT CASE WHEN true THEN 1 ELSE max(a) END", "max"},
		{"SELECT CASE WHEN true THEN 1 ELSE 2::int END", "case"},
		{"SELECT coalesce(a, 0)", "coalesce"},
		{"SELECT nullif(a, 0)", "nullif"},
		{"SELECT greatest(a, 0), least(a, 1)", "greatest"},
		{"SELECT ARRAY[1]", "array"},
		{"SELECT ROW(1, 2)", "row"},
		{"SELECT EXISTS (SELECT 1)", "exists"},
		{"SELECT (SELECT x FROM t)", "x"},
		{"SELECT (SELECT 1)", "?column?"},
		{"SELECT current_date", "current_date"},
		{"SELECT a COLLATE \"C\"", "a"},
		{"SELECT (a).b", "b"},
		{"SELECT (arr)[1]", "arr"},
	} {
		stmt, err := parseOne(tc.sql)
		if err != nil {
			t.Fatal(err)
		}
		rt := stmt.GetSelectStmt().TargetList[0].GetResTarget()
		if got := columnName(rt); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.sql, got, tc.want)
		}
	}
}

func parseOne(sql string) (*pg_query.Node, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return nil, err
	}
	return tree.Stmts[0].Stmt, nil
}
