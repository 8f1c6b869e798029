package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// regression is a test that passed directly and not through the proxy.
type regression struct {
	id       testID
	direct   status
	proxied  status
	expected *expectation // nil: unexpected
}

// counts are the numbers of tests and subtests by status in one run.
type counts struct{ pass, fail, skip, incomplete int }

func (c counts) String() string {
	s := fmt.Sprintf("%d passed, %d failed, %d skipped", c.pass, c.fail, c.skip)
	if c.incomplete > 0 {
		s += fmt.Sprintf(", %d did not finish", c.incomplete)
	}
	return s
}

func countRun(r *testRun) counts {
	var c counts
	for _, t := range r.tests {
		switch t.status {
		case statusPass:
			c.pass++
		case statusFail:
			c.fail++
		case statusSkip:
			c.skip++
		case statusIncomplete:
			c.incomplete++
		}
	}
	return c
}

// modeReport is the comparison of one proxied run with the direct run.
type modeReport struct {
	run         *testRun
	counts      counts
	regressions []regression
	nowPassing  []*expectation    // listed for this mode, but passed
	unmatched   []*expectation    // listed for this mode, but no such test ran
	aborted     map[string]string // package → why its test binary stopped early
}

func (m *modeReport) unexpected() []regression {
	var out []regression
	for _, r := range m.regressions {
		if r.expected == nil {
			out = append(out, r)
		}
	}
	return out
}

// failsOnItsOwn reports, for each failed or unfinished test of r, whether
// its failure is its own rather than only that of a subtest.
func failsOnItsOwn(r *testRun) map[testID]bool {
	hasFailingChild := map[testID]bool{}
	for id, t := range r.tests {
		if t.status != statusFail && t.status != statusIncomplete {
			continue
		}
		for name := id.name; ; {
			i := strings.LastIndexByte(name, '/')
			if i < 0 {
				break
			}
			name = name[:i]
			hasFailingChild[testID{id.pkg, name}] = true
		}
	}
	own := map[testID]bool{}
	for id, t := range r.tests {
		if (t.status == statusFail || t.status == statusIncomplete) && !hasFailingChild[id] {
			own[id] = true
		}
	}
	return own
}

// ancestorFailed reports whether a parent test of id failed or did not
// finish in r: then id not running is explained by its parent.
func ancestorFailed(r *testRun, id testID) bool {
	for name := id.name; ; {
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[:i]
		if s := r.status(testID{id.pkg, name}); s == statusFail || s == statusIncomplete {
			return true
		}
	}
}

// compare finds the regressions of proxied against direct. A test counts if
// it passed directly, or if it was skipped directly and failed through the
// proxy (pgx's pooler tests run only through the proxy).
func compare(direct, proxied *testRun, exps []*expectation, filtered bool) *modeReport {
	m := &modeReport{run: proxied, counts: countRun(proxied), aborted: abortedPackages(proxied)}
	own := failsOnItsOwn(proxied)
	ids := map[testID]bool{}
	for id := range direct.tests {
		ids[id] = true
	}
	for id := range proxied.tests {
		ids[id] = true
	}
	for _, id := range sortedIDs(ids) {
		d, p := direct.status(id), proxied.status(id)
		var bad bool
		switch d {
		case statusPass:
			switch p {
			case statusFail, statusIncomplete:
				bad = own[id]
			case statusSkip:
				bad = true
			case statusMissing:
				bad = !ancestorFailed(proxied, id)
			}
		case statusSkip, statusMissing:
			bad = (p == statusFail || p == statusIncomplete) && own[id]
		}
		if bad {
			m.regressions = append(m.regressions, regression{id: id, direct: d, proxied: p, expected: match(exps, proxied.mode, id)})
		}
	}
	// A package whose binary failed while none of its tests did (a
	// failing TestMain, a leak check) is a regression of its own.
	for pkg, p := range proxied.pkgs {
		if pkg == "(go)" || p.status != statusFail || hasFailure(proxied, pkg) {
			continue
		}
		if dp := direct.pkgs[pkg]; dp != nil && dp.status == statusPass {
			id := testID{pkg, "(package)"}
			m.regressions = append(m.regressions, regression{id: id, direct: statusPass, proxied: statusFail, expected: match(exps, proxied.mode, id)})
		}
	}
	for _, e := range exps {
		if !e.appliesTo(proxied.mode) {
			continue
		}
		id := testID{e.pkg, e.test}
		switch {
		case proxied.status(id) == statusPass && direct.status(id) == statusPass:
			m.nowPassing = append(m.nowPassing, e)
		case !filtered && direct.pkgs[e.pkg] != nil && direct.status(id) == statusMissing &&
			proxied.status(id) == statusMissing && e.test != "(package)":
			m.unmatched = append(m.unmatched, e)
		}
	}
	return m
}

func hasFailure(r *testRun, pkg string) bool {
	for id, t := range r.tests {
		if id.pkg == pkg && (t.status == statusFail || t.status == statusIncomplete) {
			return true
		}
	}
	return false
}

// abortedPackages finds the packages whose test binary stopped before its
// tests were done, and the line that says why (a panic or a timeout).
func abortedPackages(r *testRun) map[string]string {
	out := map[string]string{}
	for id, t := range r.tests {
		if t.status != statusIncomplete {
			continue
		}
		if _, ok := out[id.pkg]; !ok {
			out[id.pkg] = "the test binary exited"
		}
	}
	for pkg := range out {
		for _, lines := range outputsOf(r, pkg) {
			for _, l := range lines {
				if strings.HasPrefix(l, "panic: ") {
					out[pkg] = strings.TrimSpace(l)
				}
			}
		}
	}
	return out
}

// outputsOf returns the package's output and that of each of its tests.
func outputsOf(r *testRun, pkg string) [][]string {
	var out [][]string
	if p := r.pkgs[pkg]; p != nil {
		out = append(out, p.output)
	}
	for id, t := range r.tests {
		if id.pkg == pkg {
			out = append(out, t.output)
		}
	}
	return out
}

func sortedIDs(ids map[testID]bool) []testID {
	return slices.SortedFunc(maps.Keys(ids), func(a, b testID) int {
		return cmp.Or(cmp.Compare(a.pkg, b.pkg), cmp.Compare(a.name, b.name))
	})
}

// failedDirectly lists the tests that failed on their own in the direct run;
// they are not compared.
func failedDirectly(direct *testRun) []testID {
	own := failsOnItsOwn(direct)
	return sortedIDs(own)
}

// report writes the summary: a line per run, then every unexpected
// regression with the start of its output, the expected ones by class, and
// the expectations that can go. With full, it also lists every expected
// regression and every expectation of class nature that passed this time;
// those depend on timing and only count otherwise.
func report(w io.Writer, direct *testRun, reports []*modeReport, expectedPath string, full bool) {
	fmt.Fprintf(w, "conformance: %-12s %s (%s)\n", "direct:", countRun(direct), direct.duration.Round(time.Second))
	for _, m := range reports {
		n := len(m.unexpected())
		fmt.Fprintf(w, "conformance: %-12s %s; %d regressions: %d expected, %d unexpected (%s)\n",
			m.run.mode+":", m.counts, len(m.regressions), len(m.regressions)-n, n, m.run.duration.Round(time.Second))
	}
	if ids := failedDirectly(direct); len(ids) > 0 {
		fmt.Fprintf(w, "\nfailed directly (not compared; check the setup):\n")
		for _, id := range ids {
			fmt.Fprintf(w, "  %s: %s\n", id, direct.status(id))
		}
	}
	for _, m := range reports {
		reportMode(w, m, expectedPath, full)
	}
}

func reportMode(w io.Writer, m *modeReport, expectedPath string, full bool) {
	mode := m.run.mode
	for _, pkg := range slices.Sorted(maps.Keys(m.aborted)) {
		fmt.Fprintf(w, "\n%s: package %s stopped early: %s\n", mode, pkg, m.aborted[pkg])
	}
	un := m.unexpected()
	if len(un) > 0 {
		fmt.Fprintf(w, "\n%s: %d unexpected regressions:\n", mode, len(un))
	}
	notRun := map[string]int{} // tests of stopped packages that never started
	for _, r := range un {
		if _, stopped := m.aborted[r.id.pkg]; stopped && r.proxied == statusMissing {
			notRun[r.id.pkg]++
			continue
		}
		fmt.Fprintf(w, "  UNEXPECTED %s %s: %s through the proxy, %s directly\n", mode, r.id, r.proxied, r.direct)
		for _, l := range excerpt(m.run, r.id, 12) {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
	for _, pkg := range slices.Sorted(maps.Keys(notRun)) {
		fmt.Fprintf(w, "  UNEXPECTED %s %s: %d more tests did not run: the package stopped early\n", mode, pkg, notRun[pkg])
	}
	byClass := map[string]int{}
	var bugs []regression
	for _, r := range m.regressions {
		if r.expected == nil {
			continue
		}
		byClass[r.expected.class]++
		if r.expected.class == classBug {
			bugs = append(bugs, r)
		}
	}
	if len(byClass) > 0 {
		fmt.Fprintf(w, "\n%s: expected regressions: %d nature, %d unsupported, %d bug (open)\n",
			mode, byClass[classNature], byClass[classUnsupported], byClass[classBug])
	}
	for _, r := range m.regressions {
		if r.expected != nil && (full || r.expected.class == classBug) {
			label := r.expected.class
			if label == classBug {
				label = "bug, open"
			}
			fmt.Fprintf(w, "  expected %s %s: %s [%s: %s]\n", mode, r.id, r.proxied, label, r.expected.reason)
		}
	}
	natural := 0
	for _, e := range m.nowPassing {
		if e.class == classNature {
			natural++
			if full {
				fmt.Fprintf(w, "note: %s:%d: %s passed in %s mode this time (class nature: it depends on timing)\n",
					expectedPath, e.line, e, mode)
			}
			continue
		}
		fmt.Fprintf(w, "\nWARNING: %s:%d: %s passes in %s mode now; take it off the list for that mode\n",
			expectedPath, e.line, e, mode)
	}
	if natural > 0 && !full {
		fmt.Fprintf(w, "%s: %d entries of class nature passed this time (report.txt lists them)\n", mode, natural)
	}
	for _, e := range m.unmatched {
		fmt.Fprintf(w, "\nWARNING: %s:%d: %s matches no test that ran\n", expectedPath, e.line, e)
	}
}

// excerpt returns up to n lines of a test's output, without go test's own
// === and --- lines.
func excerpt(r *testRun, id testID, n int) []string {
	t := r.tests[id]
	if t == nil {
		if p := r.pkgs[id.pkg]; p != nil && id.name == "(package)" {
			t = p
		} else {
			return nil
		}
	}
	var out []string
	for _, l := range t.output {
		s := strings.TrimRight(l, "\n")
		trimmed := strings.TrimSpace(s)
		if trimmed == "" || strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- ") {
			continue
		}
		out = append(out, s)
		if len(out) == n {
			break
		}
	}
	return out
}

// writeFailures writes the whole output of every test that failed on its
// own in r, for a closer look than the report's excerpts.
func writeFailures(w io.Writer, r *testRun) {
	own := failsOnItsOwn(r)
	for _, id := range sortedIDs(own) {
		fmt.Fprintf(w, "==== %s %s: %s\n", r.mode, id, r.status(id))
		for _, l := range r.tests[id].output {
			io.WriteString(w, l)
		}
		fmt.Fprintln(w)
	}
	for _, pkg := range slices.Sorted(maps.Keys(r.pkgs)) {
		if p := r.pkgs[pkg]; p.status != statusPass && len(p.output) > 0 {
			fmt.Fprintf(w, "==== %s package %s: %s\n", r.mode, pkg, p.status)
			for _, l := range p.output {
				io.WriteString(w, l)
			}
			fmt.Fprintln(w)
		}
	}
}

// writeResults writes a table of every test's status in every run.
func writeResults(w io.Writer, runs []*testRun) {
	ids := map[testID]bool{}
	for _, r := range runs {
		for id := range r.tests {
			ids[id] = true
		}
	}
	fmt.Fprint(w, "package\ttest")
	for _, r := range runs {
		fmt.Fprintf(w, "\t%s", r.mode)
	}
	fmt.Fprintln(w)
	for _, id := range sortedIDs(ids) {
		fmt.Fprintf(w, "%s\t%s", id.pkg, id.name)
		for _, r := range runs {
			fmt.Fprintf(w, "\t%s", r.status(id))
		}
		fmt.Fprintln(w)
	}
}
