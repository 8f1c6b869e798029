package integration

import (
	"slices"
	"strings"
	"testing"
)

// diffKnownClass is a kind of difference between the proxy and PostgreSQL
// (issue 11) that the driver runners show in many statements of many
// scripts, too many to list one by one as knownDiffs: a statement whose
// answers differ in just this way does not fail the test. A test that
// expects a class checks that it was seen (diffExpectKnown), so that a fix
// fails it until the class goes.
type diffKnownClass struct {
	name    string
	runners []string
	dbs     []string // all databases when empty
	// match reports whether got (through the proxy) differs from want
	// (directly) in this way.
	match func(got, want stmtResult) bool
	// stop: the script's later statements build on this one's effect (an
	// aborted transaction) and are not compared.
	stop bool
	why  string
}

// diffKnownClasses are the known classes of differences.
var diffKnownClasses = []diffKnownClass{
	{
		name:    "proxy-made errors without LOCATION",
		runners: []string{"psql"},
		match: func(got, want stmtResult) bool {
			return got.Err == want.Err && got.Tag == want.Tag &&
				slices.Equal(withoutLocation(got.Rows), withoutLocation(want.Rows))
		},
		why: "an error or notice that the proxy makes or re-makes itself (on a sharded database: 25P02 in an aborted " +
			"transaction, 3B001 for an unknown savepoint, the WARNING of a split Query; in transaction mode also on one shard: " +
			"42P05 for a SQL PREPARE of a name in use) " +
			"has no routine, file and line fields, which PostgreSQL sends and psql prints with VERBOSITY verbose as LOCATION",
	},
}

// diffKnownClassOf returns the known class of the difference between got
// and want in runner on db, or nil.
func diffKnownClassOf(db, runner string, got, want stmtResult) *diffKnownClass {
	for i, c := range diffKnownClasses {
		if slices.Contains(c.runners, runner) && (len(c.dbs) == 0 || slices.Contains(c.dbs, db)) && c.match(got, want) {
			return &diffKnownClasses[i]
		}
	}
	return nil
}

// withoutLocation drops psql's LOCATION lines.
func withoutLocation(lines []string) []string {
	var out []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "LOCATION:  ") {
			out = append(out, l)
		}
	}
	return out
}

// diffExpectKnown fails the test unless every class named was seen: a
// class no script shows any more is fixed, and its entry must go.
func diffExpectKnown(t *testing.T, seen map[string]int, names ...string) {
	t.Helper()
	for _, n := range names {
		if seen[n] == 0 {
			t.Errorf("the known difference %q (issue 11) was not seen: fixed? Remove it from diffKnownClasses", n)
		}
	}
}
