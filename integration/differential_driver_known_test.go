package integration

import (
	"slices"
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

// diffKnownClasses are the known classes of differences: none today (the
// last, proxy-made errors without psql's LOCATION, went with wire/origin.go).
var diffKnownClasses = []diffKnownClass{}

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
