package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// events writes go test -json lines: each spec is "action test" or
// "action test output", with the package pgconn.
func events(specs ...string) string {
	var b strings.Builder
	for _, s := range specs {
		f := strings.SplitN(s, " ", 3)
		test := ""
		if len(f) > 1 && f[1] != "-" {
			test = f[1]
		}
		out := ""
		if len(f) > 2 {
			out = f[2] + "\n"
		}
		fmt.Fprintf(&b, `{"Action":%q,"Package":"github.com/jackc/pgx/v5/pgconn","Test":%q,"Output":%q}`+"\n", f[0], test, out)
	}
	return b.String()
}

func parseRun(t *testing.T, mode, json string) *testRun {
	t.Helper()
	r := newTestRun(mode)
	if err := r.parse(strings.NewReader(json)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParse(t *testing.T) {
	r := parseRun(t, "direct", events(
		"start -",
		"run TestA",
		"output TestA ok",
		"pass TestA",
		"run TestB",
		"run TestB/x",
		"skip TestB/x",
		"fail TestB",
		"run TestC",
		"output - panic: boom",
		"fail -",
	)+"not json\n")
	for _, tc := range []struct {
		name string
		want status
	}{
		{"TestA", statusPass},
		{"TestB", statusFail},
		{"TestB/x", statusSkip},
		{"TestC", statusIncomplete},
		{"TestD", statusMissing},
	} {
		if got := r.status(testID{"pgconn", tc.name}); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := r.pkgs["pgconn"].status; got != statusFail {
		t.Errorf("package: got %v, want failed", got)
	}
	if got := r.pkgs["(go)"].output; !slices.Equal(got, []string{"not json\n"}) {
		t.Errorf("(go) output: %q", got)
	}
	if got := abortedPackages(r)["pgconn"]; got != "panic: boom" {
		t.Errorf("aborted: %q", got)
	}
}

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"TestA/b": "TestA/b",
		"TestParseConfigSSLCertMode/servicefile='/tmp/TestParseConfigSSLCertMode3641882693/001/pg_service.conf'_service=test": "TestParseConfigSSLCertMode/servicefile='/tmp/TestParseConfigSSLCertMode*/001/pg_service.conf'_service=test",
		"TestX/Stress_9": "TestX/Stress_9",
	} {
		if got := normalizeName(in); got != want {
			t.Errorf("normalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestShortPackage(t *testing.T) {
	for in, want := range map[string]string{
		"github.com/jackc/pgx/v5":                 ".",
		"github.com/jackc/pgx/v5/pgconn":          "pgconn",
		"github.com/jackc/pgx/v5/pgtype/zeronull": "pgtype/zeronull",
	} {
		if got := shortPackage(in); got != want {
			t.Errorf("shortPackage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	direct := parseRun(t, "direct", events(
		"run TestPass", "pass TestPass",
		"run TestFail", "fail TestFail",
		"run TestSub", "run TestSub/a", "pass TestSub/a", "run TestSub/b", "pass TestSub/b", "pass TestSub",
		"run TestSkipped", "pass TestSkipped",
		"run TestGone", "pass TestGone",
		"run TestPooler", "skip TestPooler",
		"run TestExpected", "pass TestExpected",
		"run TestFixed", "pass TestFixed",
		"run TestParent", "run TestParent/a", "pass TestParent/a", "pass TestParent",
		"pass -",
	))
	proxied := parseRun(t, "transaction", events(
		"run TestPass", "pass TestPass",
		"run TestFail", "fail TestFail", // failed directly too: not compared
		"run TestSub", "run TestSub/a", "pass TestSub/a", "run TestSub/b", "fail TestSub/b", "fail TestSub",
		"run TestSkipped", "skip TestSkipped",
		"run TestPooler", "fail TestPooler",
		"run TestExpected", "fail TestExpected",
		"run TestFixed", "pass TestFixed",
		"run TestParent", "fail TestParent", // TestParent/a did not run: its parent explains it
		"fail -",
	))
	exps, err := parseExpectations(strings.NewReader(`
# comment
transaction pgconn TestExpected nature session state across transactions
both        pgconn TestFixed    bug    open: was broken
session     pgconn TestPass     bug    another mode
transaction pgconn TestNoSuch   nature stale
`), "expected.txt")
	if err != nil {
		t.Fatal(err)
	}
	m := compare(direct, proxied, exps, false)
	var got []string
	for _, r := range m.regressions {
		s := r.id.name + ":" + r.proxied.String()
		if r.expected != nil {
			s += " (expected)"
		}
		got = append(got, s)
	}
	want := []string{
		"TestExpected:failed (expected)",
		"TestGone:did not run",
		"TestParent:failed",
		"TestPooler:failed",
		"TestSkipped:skipped",
		"TestSub/b:failed",
	}
	if !slices.Equal(got, want) {
		t.Errorf("regressions:\n got %q\nwant %q", got, want)
	}
	if len(m.unexpected()) != 5 {
		t.Errorf("unexpected: got %d, want 5", len(m.unexpected()))
	}
	if len(m.nowPassing) != 1 || m.nowPassing[0].test != "TestFixed" {
		t.Errorf("now passing: %v", m.nowPassing)
	}
	if len(m.unmatched) != 1 || m.unmatched[0].test != "TestNoSuch" {
		t.Errorf("unmatched: %v", m.unmatched)
	}
	if c := countRun(proxied); c != (counts{pass: 3, fail: 6, skip: 1}) {
		t.Errorf("counts: %+v", c)
	}
}

func TestParseExpectationsErrors(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"short", "transaction pgconn TestX nature", "want: mode package test class reason"},
		{"mode", "direct pgconn TestX nature why", `mode "direct"`},
		{"class", "both pgconn TestX flaky why", `class "flaky"`},
		{"twice", "both pgconn TestX nature why\nsession pgconn TestX bug why", "already listed at line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseExpectations(strings.NewReader(tc.in), "x.txt")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestMatchMostSpecific(t *testing.T) {
	exps, err := parseExpectations(strings.NewReader(`
both pgconn TestA       nature parent
transaction pgconn TestA/b bug child
`), "x.txt")
	if err != nil {
		t.Fatal(err)
	}
	if e := match(exps, "transaction", testID{"pgconn", "TestA/b/c"}); e == nil || e.test != "TestA/b" {
		t.Errorf("got %v, want TestA/b", e)
	}
	if e := match(exps, "session", testID{"pgconn", "TestA/b"}); e == nil || e.test != "TestA" {
		t.Errorf("got %v, want TestA", e)
	}
	if e := match(exps, "session", testID{"pgconn", "TestAB"}); e != nil {
		t.Errorf("TestAB matched %v", e)
	}
}

// TestExpectedFailuresFile checks that the committed list parses.
func TestExpectedFailuresFile(t *testing.T) {
	if _, err := readExpectations("expected_failures.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("run.sh"); err != nil {
		t.Fatal(err)
	}
}
