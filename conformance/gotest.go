package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"time"
)

// pgxModule is the import path of pgx; packages are shown relative to it.
const pgxModule = "github.com/jackc/pgx/v5"

// status is a test's result in one run.
type status int

const (
	// statusMissing: the test did not appear in the run at all.
	statusMissing status = iota
	// statusPass: the test passed.
	statusPass
	// statusFail: the test failed (a panicking test fails too).
	statusFail
	// statusSkip: the test skipped itself.
	statusSkip
	// statusIncomplete: the test started but never finished, because the
	// test binary exited: another test panicked, or the timeout hit.
	statusIncomplete
)

func (s status) String() string {
	switch s {
	case statusMissing:
		return "did not run"
	case statusPass:
		return "passed"
	case statusFail:
		return "failed"
	case statusSkip:
		return "skipped"
	case statusIncomplete:
		return "did not finish"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// testID names a test or subtest: the package relative to pgx's module
// ("." for pgx itself) and the name go test prints.
type testID struct{ pkg, name string }

func (id testID) String() string { return id.pkg + " " + id.name }

// shortPackage makes an import path relative to pgx's module.
func shortPackage(importPath string) string {
	if importPath == pgxModule {
		return "."
	}
	return strings.TrimPrefix(importPath, pgxModule+"/")
}

// maxOutputLines bounds the output kept per test and package; the whole
// output is in the run's JSON file.
const maxOutputLines = 2000

// testResult is one test's result and output in one run.
type testResult struct {
	status  status
	elapsed float64 // seconds
	output  []string
}

func (r *testResult) addOutput(s string) {
	if len(r.output) < maxOutputLines {
		r.output = append(r.output, s)
	}
}

// testRun is the result of one go test invocation.
type testRun struct {
	mode     string
	duration time.Duration
	tests    map[testID]*testResult
	order    []testID               // tests in the order they started
	pkgs     map[string]*testResult // package-level result and output
	events   int                    // JSON events parsed
}

func newTestRun(mode string) *testRun {
	return &testRun{mode: mode, tests: map[testID]*testResult{}, pkgs: map[string]*testResult{}}
}

// testEvent is a line of go test -json (cmd/test2json).
type testEvent struct {
	Action      string
	Package     string
	ImportPath  string // build-output events
	FailedBuild string // a package's fail event when its build failed
	Test        string
	Elapsed     float64
	Output      string
}

// parse reads go test -json output into r. Lines that are not JSON are kept
// as output of the package "(go)".
func (r *testRun) parse(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	build := map[string][]string{} // build output by import path
	for sc.Scan() {
		line := sc.Bytes()
		var ev testEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			r.pkg("(go)").addOutput(string(line) + "\n")
			continue
		}
		r.events++
		if ev.Action == "build-output" {
			path, _, _ := strings.Cut(ev.ImportPath, " ")
			build[path] = append(build[path], ev.Output)
			continue
		}
		if ev.Package == "" {
			continue
		}
		pkg := shortPackage(ev.Package)
		if ev.Test == "" {
			r.packageEvent(pkg, ev, build)
			continue
		}
		id := testID{pkg, normalizeName(ev.Test)}
		t := r.tests[id]
		if t == nil {
			t = &testResult{status: statusIncomplete}
			r.tests[id] = t
			r.order = append(r.order, id)
		}
		switch ev.Action {
		case "output":
			t.addOutput(ev.Output)
		case "pass":
			t.status, t.elapsed = statusPass, ev.Elapsed
		case "fail":
			t.status, t.elapsed = statusFail, ev.Elapsed
		case "skip":
			t.status, t.elapsed = statusSkip, ev.Elapsed
		}
	}
	return sc.Err()
}

func (r *testRun) packageEvent(pkg string, ev testEvent, build map[string][]string) {
	p := r.pkg(pkg)
	switch ev.Action {
	case "output":
		p.addOutput(ev.Output)
	case "pass":
		p.status, p.elapsed = statusPass, ev.Elapsed
	case "skip":
		p.status, p.elapsed = statusSkip, ev.Elapsed
	case "fail":
		p.status, p.elapsed = statusFail, ev.Elapsed
		if ev.FailedBuild != "" {
			for _, l := range build[ev.FailedBuild] {
				p.addOutput(l)
			}
		}
	}
}

func (r *testRun) pkg(name string) *testResult {
	p := r.pkgs[name]
	if p == nil {
		p = &testResult{status: statusIncomplete}
		r.pkgs[name] = p
	}
	return p
}

// tempDirName matches a t.TempDir path inside a subtest's name: the test's
// name, random digits, and the directory's sequence number.
var tempDirName = regexp.MustCompile(`([A-Za-z_])[0-9]+/([0-9]{3})\b`)

// normalizeName drops the random part of temporary directories from a test
// name, so that the same subtest has the same name in every run.
func normalizeName(name string) string {
	return tempDirName.ReplaceAllString(name, "${1}*/${2}")
}

// status returns the status of id in r, statusMissing if it did not run.
func (r *testRun) status(id testID) status {
	if t := r.tests[id]; t != nil {
		return t.status
	}
	return statusMissing
}

// goTestOptions say what to run.
type goTestOptions struct {
	dir      string              // pgx's copy
	pkgs     []string            // ./pgconn, ...
	run      string              // -run, "" for every test
	skip     map[string][]string // top-level tests not to run, by package ("." or "pgconn")
	timeout  time.Duration       // go test's -timeout, per package
	jsonPath string              // where the raw output goes
}

// goTest runs pgx's tests with env added to a copy of this process's
// environment without its PG* variables, and parses the result. Each
// package is a go test of its own, one after another: packages share the
// database, and each gets its own -skip.
func goTest(ctx context.Context, mode string, o goTestOptions, env map[string]string) (*testRun, error) {
	f, err := os.Create(o.jsonPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := newTestRun(mode)
	start := time.Now()
	for _, pkg := range o.pkgs {
		if err := goTestPackage(ctx, r, f, o, pkg, env); err != nil {
			return r, err
		}
	}
	r.duration = time.Since(start)
	return r, nil
}

func goTestPackage(ctx context.Context, r *testRun, f io.Writer, o goTestOptions, pkg string, env map[string]string) error {
	args := []string{"test", "-json", "-count=1", "-timeout", o.timeout.String()}
	if o.run != "" {
		args = append(args, "-run", o.run)
	}
	if skip := o.skip[shortPackage(path.Join(pgxModule, pkg))]; len(skip) > 0 {
		quoted := make([]string, len(skip))
		for i, s := range skip {
			quoted[i] = regexp.QuoteMeta(s)
		}
		args = append(args, "-skip", "^("+strings.Join(quoted, "|")+")$")
	}
	args = append(args, pkg)
	// The margin covers building and go test's own cleanup after the
	// test binary's timeout.
	ctx, cancel := context.WithTimeout(ctx, o.timeout+2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.dir
	cmd.Env = testEnv(env)
	cmd.WaitDelay = 10 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("go test: %w", err)
	}
	before := r.events
	parseErr := r.parse(io.TeeReader(out, f))
	_, _ = io.Copy(io.Discard, out)
	waitErr := cmd.Wait()
	for l := range strings.Lines(stderr.String()) {
		r.pkg("(go)").addOutput(l)
	}
	if parseErr != nil {
		return fmt.Errorf("go test %s: reading its output: %w", pkg, parseErr)
	}
	// go test exits 1 when a test fails; only a run without any result
	// is an error of its own.
	var ee *exec.ExitError
	if waitErr != nil && (!errors.As(waitErr, &ee) || ctx.Err() != nil || r.events == before) {
		return fmt.Errorf("go test %s: %w\n%s", strings.Join(args[1:], " "), waitErr, lastLines(stderr.String(), 30))
	}
	return nil
}

// testEnv is this process's environment without PG* variables, which would
// redirect pgx's tests, plus env.
func testEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "GOWORK=") {
			out = append(out, kv)
		}
	}
	out = append(out, "GOWORK=off")
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
