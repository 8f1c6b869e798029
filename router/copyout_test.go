package router

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// TestCopyOutOptions: COPY (query) TO STDOUT's options as COPY TO reads
// them, its probe (the query wrapped to return no row) and the mapping of
// the probe's error positions back to the client's text.
func TestCopyOutOptions(t *testing.T) {
	cases := []struct {
		sql   string
		want  CopyOut
		probe string
		// positions in the probe and the client's position each maps to
		pos [][2]int
	}{
		{sql: "COPY (SELECT id FROM accounts ORDER BY id) TO STDOUT",
			want:  CopyOut{Format: "text", Delimiter: '\t', Null: `\N`, Quote: '"', Escape: '"'},
			probe: "COPY (SELECT * FROM (SELECT id FROM accounts ORDER BY id) __shardgate_copy WHERE false) TO STDOUT",
			pos:   [][2]int{{1, 1}, {6, 6}, {7, 0}, {22, 7}, {58, 0}, {92, 47}}},
		{sql: "/* é */ copy (select 'é' from t) to stdout with (format csv, header, delimiter ';', quote '''', escape '\\', force_quote (a, \"B\"), null 'n')",
			want:  CopyOut{Format: "csv", Delimiter: ';', Null: "n", Header: true, Quote: '\'', Escape: '\\', ForceQuote: []string{"a", "B"}},
			probe: "/* é */ copy (SELECT * FROM (select 'é' from t) __shardgate_copy WHERE false) to stdout with (format csv, header, delimiter ';', quote '''', escape '\\', force_quote (a, \"B\"), null 'n')"},
		{sql: "COPY (SELECT 1 UNION SELECT (2)) TO STDOUT CSV FORCE QUOTE *",
			want:  CopyOut{Format: "csv", Delimiter: ',', Quote: '"', Escape: '"', QuoteAll: true},
			probe: "COPY (SELECT * FROM (SELECT 1 UNION SELECT (2)) __shardgate_copy WHERE false) TO STDOUT CSV FORCE QUOTE *"},
		{sql: "COPY (SELECT 1) TO STDOUT (FORMAT binary, HEADER false)",
			want:  CopyOut{Format: "binary", Delimiter: '\t', Null: `\N`, Quote: '"', Escape: '"'},
			probe: "COPY (SELECT * FROM (SELECT 1) __shardgate_copy WHERE false) TO STDOUT (FORMAT binary, HEADER false)"},
	}
	for _, tc := range cases {
		t.Run(tc.sql, func(t *testing.T) {
			tree, err := pg_query.Parse(tc.sql)
			if err != nil {
				t.Fatal(err)
			}
			got := copyOut(tc.sql, tree.Stmts[0].Stmt.GetCopyStmt())
			if got == nil {
				t.Fatal("copyOut = nil")
			}
			if got.Probe != tc.probe {
				t.Errorf("probe\n got %s\nwant %s", got.Probe, tc.probe)
			}
			for _, p := range tc.pos {
				if m := got.ProbePosition(p[0]); m != p[1] {
					t.Errorf("ProbePosition(%d) = %d, want %d", p[0], m, p[1])
				}
			}
			got.Probe, got.queryStart, got.queryLength = "", 0, 0
			if got.Format != tc.want.Format || got.Delimiter != tc.want.Delimiter || got.Null != tc.want.Null || got.Header != tc.want.Header ||
				got.Quote != tc.want.Quote || got.Escape != tc.want.Escape || got.QuoteAll != tc.want.QuoteAll || len(got.ForceQuote) != len(tc.want.ForceQuote) {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
			for i := range got.ForceQuote {
				if got.ForceQuote[i] != tc.want.ForceQuote[i] {
					t.Errorf("FORCE_QUOTE %v, want %v", got.ForceQuote, tc.want.ForceQuote)
				}
			}
		})
	}
}
