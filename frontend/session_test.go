package frontend

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestScanEffects(t *testing.T) {
	tests := []struct {
		sql  string
		want effect
	}{
		{"SELECT 1", 0},
		{"UPDATE t SET a = 1", 0},
		{"set work_mem = '1MB'", effSettings},
		{"select 1; RESET ALL", effSettings},
		{"SELECT Set_Config('search_path', 'x', false)", effResync},
		{"CREATE TEMP TABLE t (x int)", effObjects},
		{"create table pg_temp.t (x int)", effObjects},
		{"SELECT pg_advisory_lock(1)", effObjects},
		{"SELECT PG_TRY_ADVISORY_LOCK(1)", effObjects},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1", effObjects},
		{"LISTEN ch", effObjects},
		{"PREPARE p AS SELECT 1", effObjects | effSQLPrepare},
		{"EXECUTE p", effSQLPrepare},
		{"DEALLOCATE p", effSettings | effSQLPrepare},
		{"SELECT holder FROM t", 0},
		{"/* a comment */ SET work_mem = 1", effSettings},
		{"-- set\nSELECT 1", 0},
		{"SELECT 'a;b'; reset all", effSettings},
		{"SELECT 1 -* 2 /- 3 /", 0},
		{"SELECT 1 /* unterminated", 0},
		// Every word wordEffect knows, in upper case (effectStart).
		{"CREATE TEMPORARY TABLE t (x int)", effObjects},
		{"DECLARE c CURSOR WITH HOLD FOR SELECT 1; UNLISTEN *; LISTEN x", effObjects},
		{"SELECT SET_CONFIG('a', 'b', false)", effResync},
		{"SELECT 1 FROM PG_TEMP.t", effObjects},
		{"SELECT PG_ADVISORY_XACT_LOCK(1)", effObjects},
		{"SELECT 1; Prepare p AS SELECT 1", effObjects | effSQLPrepare},
	}
	for _, tc := range tests {
		if got := scanEffects([]byte(tc.sql)); got != tc.want {
			t.Errorf("scanEffects(%q) = %b, want %b", tc.sql, got, tc.want)
		}
	}
}

// TestDiffShortcut: diff's shortcut for agreeing settings (agrees) gives
// what the full comparison gives, over random pairs of settings drawn from
// a few names (the identity ones among them) and statements ("" among
// them, which diff resets). SESSION_DIFF_SEED replays a seed.
func TestDiffShortcut(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SESSION_DIFF_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("SESSION_DIFF_SEED: %v", err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	names := []string{"work_mem", "search_path", settingRole, settingSessAuth}
	stmts := []string{"", "SET x TO 1", "SET x TO 2"}
	draw := func() map[string]string {
		m := map[string]string{}
		for _, n := range names {
			if rng.IntN(2) == 0 {
				m[n] = stmts[rng.IntN(len(stmts))]
			}
		}
		return m
	}
	shortcuts := 0
	for range 2000 {
		s := session{sets: draw()}
		have := draw()
		if rng.IntN(3) == 0 { // agreeing records are the common case
			clear(have)
			for k, v := range s.sets {
				have[k] = v
			}
		}
		if s.agrees(have) {
			shortcuts++
		}
		if got, want := s.diff(have), s.diffAll(have); got != want {
			t.Fatalf("seed %d: sets %v, have %v: diff %q, full comparison %q", seed, s.sets, have, got, want)
		}
	}
	if shortcuts == 0 {
		t.Fatalf("seed %d: no pair took the shortcut", seed)
	}
}

func TestDiffOrdersIdentityLast(t *testing.T) {
	s := session{sets: map[string]string{
		"work_mem": "SET work_mem TO '7MB'",
		"role":     "SET role TO 'r'",
	}}
	have := map[string]string{
		"role":           "SET role TO 'other'",
		"log_statement":  "SET log_statement TO 'all'",
		"statement_time": "SET statement_time TO 1",
	}
	want := "SET SESSION AUTHORIZATION DEFAULT; SET work_mem TO '7MB'; RESET \"log_statement\"; RESET \"statement_time\"; SET role TO 'r'; "
	if got := s.diff(have); got != want {
		t.Fatalf("diff:\n got %q\nwant %q", got, want)
	}
	s.syncTo(have)
	if got := s.diff(have); got != "" {
		t.Fatalf("diff after sync: %q", got)
	}
}

func TestApplyIdentityRules(t *testing.T) {
	m := map[string]string{"role": "r", "work_mem": "w", "session_authorization": "a"}
	apply(m, setOp{kind: opResetAll})
	if len(m) != 2 || m["role"] == "" || m["session_authorization"] == "" {
		t.Fatalf("RESET ALL must keep role and session authorization: %v", m)
	}
	apply(m, setOp{kind: opSet, name: "session_authorization", stmt: "b"})
	if _, ok := m["role"]; ok {
		t.Fatalf("SET SESSION AUTHORIZATION must reset the role: %v", m)
	}
	apply(m, setOp{kind: opDiscardAll})
	if len(m) != 0 {
		t.Fatalf("DISCARD ALL: %v", m)
	}
}

// BenchmarkScanEffects measures the word scan every transaction-mode
// simple Query and unnamed Parse pays for session tracking.
func BenchmarkScanEffects(b *testing.B) {
	for _, sql := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 48213;",
		"UPDATE pgbench_accounts SET abalance = abalance + -2947 WHERE aid = 48213;",
	} {
		b.Run(sql[:6], func(b *testing.B) {
			q := []byte(sql)
			b.ReportAllocs()
			for b.Loop() {
				if analyze(q).eff != 0 {
					b.Fatal("effect")
				}
			}
		})
	}
}

func TestSearchPathOfReadBack(t *testing.T) {
	for _, tc := range []struct {
		stmt string
		want []string
	}{
		{"SET search_path TO a, public", []string{"a", "public"}},
		{"SELECT pg_catalog.set_config('search_path', 'a, \"b c\"', false)", []string{"a", "b c"}},
		{"SELECT pg_catalog.set_config('search_path', E'x\\\\y, it''s', false)", []string{`x\y`, "it's"}},
	} {
		got := searchPathOf(tc.stmt)
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("searchPathOf(%q) = %q, want %q", tc.stmt, got, tc.want)
		}
	}
}

// TestStandardStrings follows standard_conforming_strings through the
// deparsed SETs and RESETs a session records, in the forms PostgreSQL
// accepts for a boolean, and the value the client logged in with.
func TestStandardStrings(t *testing.T) {
	for _, tc := range []struct {
		login bool // logged in with it off
		sql   []string
		want  bool
	}{
		{false, nil, true},
		{true, nil, false},
		{false, []string{"SET standard_conforming_strings = off"}, false},
		{false, []string{"set standard_conforming_strings to 'OFF'"}, false},
		{false, []string{"SET standard_conforming_strings = false"}, false},
		{false, []string{"SET standard_conforming_strings = 0"}, false},
		{false, []string{"SET standard_conforming_strings = no"}, false},
		{false, []string{"SET standard_conforming_strings = off", "SET standard_conforming_strings = on"}, true},
		{false, []string{"SET standard_conforming_strings = off", "RESET standard_conforming_strings"}, true},
		{true, []string{"SET standard_conforming_strings = on", "RESET ALL"}, false},
		{false, []string{"SET standard_conforming_strings = off", "DISCARD ALL"}, true},
	} {
		c := &client{nonStandardLogin: tc.login}
		for _, sql := range tc.sql {
			ops, err := sessionOps(sql)
			if err != nil {
				t.Fatal(err)
			}
			c.sess.pending = append(c.sess.pending, ops...)
		}
		if got := c.standardStrings(); got != tc.want {
			t.Errorf("login off %v, %q: standard %v, want %v", tc.login, tc.sql, got, tc.want)
		}
	}
}

// TestAnalyzeUnnamed: skipping the look at a repeated unnamed Parse
// (repeatsQuietParse) changes nothing of what analyze says, over a
// sequence of Parses; the body it compares with is the client's copy (a
// caller that reuses its buffer for another text gets that text's
// effect); a body that another path put in c.unnamed is looked at; and a
// text that names an SQL-level statement is looked at every time (its
// rewrite depends on the session's statements).
func TestAnalyzeUnnamed(t *testing.T) {
	l := &Listener{quiet: newQuietTexts()}
	c := &client{l: l}
	body := func(sql string) []byte { return append(append([]byte{0}, sql...), 0, 0, 0) }
	skipped, known := 0, 0
	parse := func(b []byte) stmtEffect { // as rewriteParse does
		repeat := c.repeatsQuietParse(b)
		if c.quietParse(b, b[1:]) {
			if repeat {
				skipped++
			} else {
				known++
			}
			return c.unnamedEffect()
		}
		c.keepUnnamed(b, parseText(b[1:]), false)
		return c.unnamedEffect()
	}
	for i, sql := range []string{"SELECT 1", "SELECT 1", "SET work_mem = 1", "SET work_mem = 1", "SELECT 1", "", "",
		"SELECT 2", "CREATE TEMP TABLE t (x int)", "SELECT 2", "SELECT 2"} {
		got, want := parse(body(sql)), analyze([]byte(sql))
		if got.eff != want.eff || len(got.ops) != len(want.ops) {
			t.Fatalf("Parse %d %q: effect %b (%d ops), analyze says %b (%d ops)", i, sql, got.eff, len(got.ops), want.eff, len(want.ops))
		}
	}
	if skipped != 3 {
		t.Fatalf("%d repeated quiet Parses skipped, want 3", skipped)
	}
	// "SELECT 1" and "SELECT 2" were found quiet twice each (the first
	// sighting only marks a text): kept proxy-wide (quietTexts); "" once;
	// the SET and the CREATE TEMP never.
	if known != 0 || l.quiet.Len() != 2 || !l.quiet.has([]byte("SELECT 1")) || !l.quiet.has([]byte("SELECT 2")) {
		t.Fatalf("%d Parses known quiet, %d texts kept; want 0, and SELECT 1 and 2 kept", known, l.quiet.Len())
	}
	// Another client of the proxy: its Parse of a kept text is known
	// quiet at once, with the effect analyze gives; one with an effect
	// is looked at, every time.
	c2 := &client{l: l}
	c2.keepUnnamed(body("SET work_mem = 2"), []byte("SET work_mem = 2"), false)
	if !c2.quietParse(body("SELECT 2"), body("SELECT 2")[1:]) || c2.unnamedEffect().eff != 0 || !c2.unnamedQuiet ||
		!bytes.Equal(c2.unnamed, body("SELECT 2")) {
		t.Fatalf("a kept text on another client: not known quiet, or kept wrong (%q, quiet %v)", c2.unnamed, c2.unnamedQuiet)
	}
	for range 3 {
		if c2.quietParse(body("SET work_mem = 2"), body("SET work_mem = 2")[1:]) {
			t.Fatal("a SET was taken for quiet")
		}
		c2.keepUnnamed(body("SET work_mem = 2"), []byte("SET work_mem = 2"), false)
		if c2.unnamedEffect().eff != effSettings {
			t.Fatalf("the SET's effect %b", c2.unnamedEffect().eff)
		}
	}
	buf := body("SELECT 1")
	parse(buf)
	copy(buf[1:], "SET a=1;") // the caller's buffer, reused for another text
	if got := parse(buf).eff; got != effSettings {
		t.Fatalf("the reused buffer's SET: effect %b, want %b", got, effSettings)
	}
	parse(body("SELECT 1"))
	// Another path (the rewrite of SQL-level statement names) replaced
	// the kept body with one that has an effect: the flag went with it.
	c.unnamed = body("SET a=1;")
	c.unnamedQuiet = false
	if got := parse(body("SET a=1;")).eff; got != effSettings {
		t.Fatalf("SET after another path kept it: effect %b, want %b", got, effSettings)
	}
	for _, sql := range []string{"EXECUTE s", "DEALLOCATE s", "/* x */ PREPARE s AS SELECT 1"} {
		skipped = 0
		parse(body(sql))
		parse(body(sql))
		if skipped != 0 {
			t.Fatalf("%q parsed again was skipped: its rewrite depends on the session", sql)
		}
	}
}
