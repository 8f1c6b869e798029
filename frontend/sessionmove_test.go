package frontend

import "testing"

// TestPrepareText: the PREPARE a cutover replays for a SQL-level statement
// is the statement text pg_prepared_statements kept when that is the one
// PREPARE, else the PREPARE's own part of the Query (the last of that name).
func TestPrepareText(t *testing.T) {
	tests := []struct {
		name, src, stmt string
		want            string
		err             bool
	}{
		{"alone", "PREPARE p(int) AS SELECT $1", "p", "PREPARE p(int) AS SELECT $1", false},
		{"alone with semicolon", "prepare P as select 1;", "p", "prepare P as select 1;", false},
		{"first of two", "PREPARE p AS SELECT 1; SELECT 2", "p", "PREPARE p AS SELECT 1", false},
		{"after a statement", "SELECT 2;  PREPARE p AS SELECT $1::int8 * 2", "p", "PREPARE p AS SELECT $1::int8 * 2", false},
		{"the last of that name", "PREPARE p AS SELECT 1; DEALLOCATE p; PREPARE p AS SELECT 2", "p", "PREPARE p AS SELECT 2", false},
		{"quoted name", `PREPARE "P" AS SELECT 1; SELECT 1`, "P", `PREPARE "P" AS SELECT 1`, false},
		{"another name", "PREPARE q AS SELECT 1; SELECT 1", "p", "", true},
		{"no PREPARE", "SELECT f()", "p", "", true},
		{"does not parse", "PREPARE p AS SELEC 1", "p", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := prepareText(tc.src, tc.stmt)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("prepareText(%q, %q) = %q, %v; want %q (error: %v)", tc.src, tc.stmt, got, err, tc.want, tc.err)
			}
		})
	}
}

// TestSessionObjectsString: the 57P01 of a session that cannot move names
// exactly the kinds it holds.
func TestSessionObjectsString(t *testing.T) {
	tests := []struct {
		held sessionObjects
		want string
	}{
		{0, "no session objects"},
		{objTemp, "temporary objects"},
		{objAdvisoryLock | objHoldCursor, "session advisory locks and cursors WITH HOLD"},
		{objTemp | objAdvisoryLock | objHoldCursor, "temporary objects, session advisory locks and cursors WITH HOLD"},
		{(objTemp | objListen | objSQLPrepared) &^ objMovable, "temporary objects"},
	}
	for _, tc := range tests {
		if got := tc.held.String(); got != tc.want {
			t.Errorf("%08b: %q, want %q", uint8(tc.held), got, tc.want)
		}
	}
}

// TestTextArray: names become a text[] literal whose elements PostgreSQL
// reads back as they are.
func TestTextArray(t *testing.T) {
	if got, want := textArray([]string{"a", `b"c`, `d\e`, "f,g"}), `{"a","b\"c","d\\e","f,g"}`; got != want {
		t.Errorf("textArray: %s, want %s", got, want)
	}
}
