package router

import "testing"

// TestParamCount counts a query's parameters as PostgreSQL's parse
// analysis does: the highest $n outside strings, identifiers and comments,
// or the explicit types (the only ones of the empty query); other
// statements are left to the server.
func TestParamCount(t *testing.T) {
	for _, tc := range []struct {
		sql   string
		types int
		want  int
		ok    bool
	}{
		{"SELECT $1, $3", 0, 3, true},
		{"SELECT $1", 2, 2, true},
		{"SELECT '$1', \"$2\", $$ $3 $$ /* $4 */ -- $5", 0, 0, true},
		{"  select $2 FROM t WHERE a = $1", 0, 2, true},
		{"WITH x AS (SELECT $1) SELECT * FROM x", 0, 1, true},
		{"INSERT INTO t VALUES ($1, $2)", 1, 2, true},
		{"UPDATE t SET a = $1", 0, 1, true},
		{"DELETE FROM t WHERE a = $4", 0, 4, true},
		{"VALUES ($1)", 0, 1, true},
		{"PREPARE p(int) AS SELECT $1", 0, 0, false},
		{"CREATE FUNCTION f(int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT $1; END", 0, 0, false},
		{"", 0, 0, true},
		{"", 2, 2, true},
		{" /* only a comment */ ", 1, 1, true},
		{"-- a comment\nSELECT $2", 0, 2, true},
	} {
		got, ok := ParamCount(tc.sql, tc.types)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParamCount(%q, %d) = %d, %v; want %d, %v", tc.sql, tc.types, got, ok, tc.want, tc.ok)
		}
	}
}
