package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardgate/shardgate/internal/pgtest"
)

// The psql runner of the differential harness runs a script as one psql
// process, each statement a -c option of its own: psql sends a -c string
// without backslashes as one Query (the simple protocol), so a
// multi-statement line stays one Query, and goes on after an error. After
// each statement a \echo prints a marker line with psql's SQLSTATE and
// ROW_COUNT variables. stdout and stderr share one pipe (psql flushes stdout
// before it writes a message to stderr), so every statement's output is the
// text between two markers, exactly as psql printed it: rows in unaligned
// format with the header line and the row-count footer, the command tag of
// every statement that has no rows, and errors and notices with VERBOSITY
// verbose (SQLSTATE, DETAIL, HINT, CONTEXT, LOCATION). psql shows no
// transaction status and no column types; the run has no noise client
// between statements (the statements are all on its command line).

// psqlMarker ends each statement's output.
const psqlMarker = "@@shardgate-diff-end"

var psqlMarkerLine = regexp.MustCompile(`^` + psqlMarker + ` (\S*) (\S*)$`)

// diffPsqlRunner is the psql runner, if psql is installed.
func diffPsqlRunner(t *testing.T) (diffRunner, bool) {
	t.Helper()
	psql, err := exec.LookPath("psql")
	if err != nil {
		if dir, derr := pgtest.Binaries(); derr == nil {
			if _, serr := os.Stat(dir + "/psql"); serr == nil {
				psql, err = dir+"/psql", nil
			}
		}
	}
	if err != nil {
		driverMissing(t, "psql", "psql not found", "apt-get install postgresql-client")
		return diffRunner{}, false
	}
	return diffRunner{name: "psql", run: func(t testing.TB, url string, stmts []string, _ func()) []stmtResult {
		return runPsqlScript(t, psql, url, stmts)
	}}, true
}

// psqlScriptTimeout bounds one script's psql run.
const psqlScriptTimeout = 60 * time.Second

func runPsqlScript(t testing.TB, psql, url string, stmts []string) []stmtResult {
	t.Helper()
	args := []string{"-X", "-A", "-v", "VERBOSITY=verbose", "-v", "ON_ERROR_STOP=0", "-P", "null=NULL", "-P", "pager=off", "-d", url}
	for _, sql := range stmts {
		args = append(args, "-c", sql, "-c", `\echo `+psqlMarker+` :SQLSTATE :ROW_COUNT`)
	}
	ctx, cancel := context.WithTimeout(context.Background(), psqlScriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, args...)
	// Messages in English, whatever the machine's locale.
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGCONNECT_TIMEOUT=10")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	res := parsePsql(out.String())
	if len(res) == 0 {
		t.Fatalf("[psql] %s: no statement ran (%v): %s", url, err, abbrev(out.String(), 2000))
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res = append(res, stmtResult{Err: "non-PostgreSQL error: psql: nothing within " + psqlScriptTimeout.String()})
	}
	return res
}

// parsePsql splits psql's output at the markers into one result a
// statement: the lines it printed as Rows, SQLSTATE and ROW_COUNT as Tag,
// and its error, if any, as Err.
func parsePsql(out string) []stmtResult {
	var res []stmtResult
	var lines []string
	for _, line := range strings.Split(out, "\n") {
		m := psqlMarkerLine.FindStringSubmatch(line)
		if m == nil {
			lines = append(lines, line)
			continue
		}
		res = append(res, stmtResult{Tag: "SQLSTATE " + m[1] + " ROW_COUNT " + m[2], Rows: lines, Err: psqlErr(lines)})
		lines = nil
	}
	return res
}

var (
	psqlErrLine   = regexp.MustCompile(`^(ERROR|FATAL|PANIC):  (?:([0-9A-Z]{5}): )?(.*)$`)
	psqlFieldLine = regexp.MustCompile(`^(LINE \d+|[A-Z][A-Z ]*[A-Z]):  ?(.*)$`)
)

// psqlErr reads the first error in a statement's output as the harness
// renders errors (severity, SQLSTATE, message, detail, hint).
func psqlErr(lines []string) string {
	for i, line := range lines {
		m := psqlErrLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		msg, detail, hint := m[3], "", ""
		cur := &msg
		for _, l := range lines[i+1:] {
			f := psqlFieldLine.FindStringSubmatch(l)
			switch {
			case f != nil && f[1] == "DETAIL":
				detail, cur = f[2], &detail
			case f != nil && f[1] == "HINT":
				hint, cur = f[2], &hint
			case f != nil || psqlErrLine.MatchString(l) || psqlMarkerLine.MatchString(l):
				cur = nil
			case cur != nil:
				*cur += "\n" + l
			}
		}
		return diffErr(m[1], m[2], msg, strings.TrimSuffix(detail, "\n"), strings.TrimSuffix(hint, "\n"))
	}
	return ""
}

// TestDiffPsqlParse: psql's output splits into one result a statement,
// and its errors read as the other runners report them.
func TestDiffPsqlParse(t *testing.T) {
	out := strings.Join([]string{
		"a|b", "1|NULL", "(1 row)",
		psqlMarker + " 00000 1",
		"ERROR:  42P01: relation \"nosuch\" does not exist",
		"LINE 1: select * from nosuch",
		"                      ^",
		"LOCATION:  parserOpenTable, parse_relation.c:1392",
		psqlMarker + " 42P01 0",
		"ERROR:  P0001: two",
		"lines",
		"DETAIL:  d",
		"HINT:  h",
		"CONTEXT:  PL/pgSQL function inline_code_block line 1 at RAISE",
		psqlMarker + " P0001 0",
		"BEGIN",
		psqlMarker + " 00000 0",
		"",
	}, "\n")
	want := []stmtResult{
		{Tag: "SQLSTATE 00000 ROW_COUNT 1", Rows: []string{"a|b", "1|NULL", "(1 row)"}},
		{Tag: "SQLSTATE 42P01 ROW_COUNT 0", Err: diffErr("ERROR", "42P01", `relation "nosuch" does not exist`, "", "")},
		{Tag: "SQLSTATE P0001 ROW_COUNT 0", Err: diffErr("ERROR", "P0001", "two\nlines", "d", "h")},
		{Tag: "SQLSTATE 00000 ROW_COUNT 0", Rows: []string{"BEGIN"}},
	}
	got := parsePsql(out)
	if len(got) != len(want) {
		t.Fatalf("%d results, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].Tag != want[i].Tag || got[i].Err != want[i].Err {
			t.Errorf("result %d: tag %q error %s, want tag %q error %s", i, got[i].Tag, got[i].Err, want[i].Tag, want[i].Err)
		}
		if want[i].Rows != nil && !slices.Equal(got[i].Rows, want[i].Rows) {
			t.Errorf("result %d: rows %q, want %q", i, got[i].Rows, want[i].Rows)
		}
	}
}
