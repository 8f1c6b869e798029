package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Classes of expected failures.
const (
	// classNature: the test cannot pass through a pooler by its nature,
	// such as session state kept across transactions in transaction mode.
	classNature = "nature"
	// classUnsupported: the proxy lacks the feature the test needs (a
	// Unix socket, client certificates, channel binding).
	classUnsupported = "unsupported"
	// classBug: a proxy bug, open. The entry goes once the bug is fixed.
	classBug = "bug"
)

var (
	modes   = []string{"session", "transaction"}
	classes = []string{classNature, classUnsupported, classBug}
)

// expectation is one line of expected_failures.txt: a test that is allowed
// to fail through the proxy in a mode.
type expectation struct {
	mode   string // "session", "transaction" or "both"
	pkg    string // relative to pgx's module, "." for pgx itself
	test   string // a test or subtest; it covers its subtests too
	class  string
	skip   bool // not run at all in this mode: it hangs or takes its test binary down
	reason string
	line   int
}

func (e *expectation) appliesTo(mode string) bool { return e.mode == "both" || e.mode == mode }

// covers reports whether e allows id to fail.
func (e *expectation) covers(id testID) bool {
	return id.pkg == e.pkg && (id.name == e.test || strings.HasPrefix(id.name, e.test+"/"))
}

func (e *expectation) String() string {
	return fmt.Sprintf("%s %s %s", e.mode, e.pkg, e.test)
}

// readExpectations reads an expected-failures file.
func readExpectations(path string) ([]*expectation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseExpectations(f, path)
}

// parseExpectations parses lines of "mode package test class reason…";
// blank lines and lines starting with # are ignored. A class may end in
// "+skip": the test is then not run in that mode.
func parseExpectations(r io.Reader, name string) ([]*expectation, error) {
	var out []*expectation
	var errs []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			errs = append(errs, fmt.Sprintf("%s:%d: want: mode package test class reason", name, n))
			continue
		}
		class, skip := strings.CutSuffix(f[3], "+skip")
		e := &expectation{mode: f[0], pkg: f[1], test: f[2], class: class, skip: skip, reason: strings.Join(f[4:], " "), line: n}
		if skip && strings.Contains(e.test, "/") {
			errs = append(errs, fmt.Sprintf("%s:%d: +skip needs a top-level test, not the subtest %s", name, n, e.test))
		}
		if e.mode != "both" && !slices.Contains(modes, e.mode) {
			errs = append(errs, fmt.Sprintf("%s:%d: mode %q is not session, transaction or both", name, n, e.mode))
		}
		if !slices.Contains(classes, e.class) {
			errs = append(errs, fmt.Sprintf("%s:%d: class %q is not one of %s", name, n, e.class, strings.Join(classes, ", ")))
		}
		for _, o := range out {
			if o.pkg == e.pkg && o.test == e.test && (o.mode == e.mode || o.mode == "both" || e.mode == "both") {
				errs = append(errs, fmt.Sprintf("%s:%d: %s is already listed at line %d", name, n, e.test, o.line))
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

// match returns the most specific expectation for id in mode, or nil.
func match(exps []*expectation, mode string, id testID) *expectation {
	var best *expectation
	for _, e := range exps {
		if e.appliesTo(mode) && e.covers(id) && (best == nil || len(e.test) > len(best.test)) {
			best = e
		}
	}
	return best
}

// skips returns the tests not to run in mode, by package.
func skips(exps []*expectation, mode string) map[string][]string {
	out := map[string][]string{}
	for _, e := range exps {
		if e.skip && e.appliesTo(mode) {
			out[e.pkg] = append(out[e.pkg], e.test)
		}
	}
	return out
}
