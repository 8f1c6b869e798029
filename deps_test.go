package shardgate

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// This file keeps the dependencies between shardgate's packages pointing
// one way, as STYLE.md "Layout" draws them:
//
//	cmd → {frontend, admin, replication} → {executor, router, pool} → {sharding, wire, config, metrics}
//
// mayImport lists, for every package of the module, the packages of the
// module that its non-test files may import; tests may import what they
// need. A package that is not listed fails the test, so that a new package
// is placed in a layer on purpose.
const module = "github.com/shardgate/shardgate"

// The layers, bottom up. A package may import the layers below its own;
// the exceptions inside a layer are spelled out in mayImport.
var (
	bottom = []string{"config", "metrics", "router/sharding", "wire", "internal/sockio", "internal/clock", "internal/swapsock"}
	middle = append([]string{"pool", "router"}, bottom...) // executor sits above router and pool
	upper  = append([]string{"executor"}, middle...)
	top    = append([]string{"admin", "frontend", "replication"}, upper...)
)

var mayImport = map[string][]string{
	// The bottom layer. sharding and wire import nothing else of ours;
	// nor, today, do config and metrics. internal/sockio is the raw socket
	// read and write of frontend's fdConn and replication's rawConn;
	// internal/clock the one-read clock of frontend's and pool's intervals;
	// internal/swapsock the socket under a TLS session, which pool dials
	// and frontend's event loop swaps for its own.
	"config":            nil,
	"metrics":           nil,
	"router/sharding":   nil,
	"wire":              nil,
	"internal/sockio":   nil,
	"internal/clock":    nil,
	"internal/swapsock": nil,

	// The middle layer: executor runs router's plans on pool's servers;
	// router and pool do not know each other.
	"pool":     bottom,
	"router":   bottom,
	"executor": middle,

	// The top layer. frontend, admin and replication meet through
	// interfaces that the consumer defines (admin.Proxy, replication.Gate)
	// and the wiring in internal/proxy, with one exception: admin runs the
	// resharding commands with a replication.Manager.
	"frontend":    upper,
	"admin":       append([]string{"replication"}, upper...),
	"replication": upper,

	// cmd: internal/proxy assembles the top layer (the adapters between
	// its packages live there); cmd/proxy parses flags and loads the
	// configuration. proxy demo starts its shards with internal/pgtest
	// (DESIGN.md, section 2), the one production use of a test package.
	// cluster ties the proxies of a cluster together; it implements
	// replication.Coordinator and follows cutovers with replication's
	// config rewriting.
	"cluster": {"config", "replication"},

	"internal/proxy": append([]string{"cluster"}, top...),
	"cmd/proxy":      append([]string{"internal/proxy", "internal/pgtest", "cluster"}, top...),

	// Test and tooling packages: production packages never import them
	// (testOnly). "." is this file's package, which has no other files.
	".":                               nil,
	"internal/pgtest":                 nil,
	"integration":                     nil,
	"integration/internal/crashproxy": {"internal/proxy", "config"},
	"internal/faultnet":               nil,
	"integration/internal/querygen":   nil,
	"conformance":                     {"internal/pgtest"},
	"wire/internal/gencodes":          nil, // go generate: writes wire/codes_gen.go
	"bench/relayfloor":                nil, // a benchmark's tool: the floor of a Go relay
}

// testOnly are the packages of tests and tools. Of the production packages
// only cmd/proxy (for proxy demo) reaches one, internal/pgtest.
var testOnly = []string{".", "internal/pgtest", "integration", "integration/internal/crashproxy", "internal/faultnet", "integration/internal/querygen", "conformance", "wire/internal/gencodes", "bench/relayfloor"}

// TestDependencies checks every import of every package of the module
// against mayImport, that mayImport itself points one way (no cycle), and
// that no production package depends on a test package, directly or not.
func TestDependencies(t *testing.T) {
	imports := listImports(t)
	for pkg, deps := range imports {
		allowed, ok := mayImport[pkg]
		if !ok {
			t.Errorf("package %s is not in mayImport (deps_test.go): add it with the packages it may import", pkg)
			continue
		}
		for _, dep := range deps {
			if !slices.Contains(allowed, dep) {
				t.Errorf("forbidden import %s → %s: %s may import only %s (STYLE.md, Layout)",
					pkg, dep, pkg, strings.Join(sorted(allowed), ", "))
			}
		}
	}
	for pkg := range mayImport {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("mayImport lists %s, which is not a package of the module any more", pkg)
		}
	}
	if cycle := findCycle(mayImport); cycle != nil {
		t.Errorf("mayImport allows an import cycle, so it does not point one way: %s", strings.Join(cycle, " → "))
	}
	for pkg := range imports {
		if slices.Contains(testOnly, pkg) {
			continue
		}
		for _, path := range reachable(imports, pkg) {
			dep := path[len(path)-1]
			if slices.Contains(testOnly, dep) && !(pkg == "cmd/proxy" && dep == "internal/pgtest") {
				t.Errorf("production package %s depends on test package %s: %s", pkg, dep, strings.Join(path, " → "))
			}
		}
	}
}

// TestFindCycle checks the cycle detection on rules that have one.
func TestFindCycle(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules map[string][]string
		want  []string
	}{
		{name: "layers", rules: map[string][]string{"a": {"b", "c"}, "b": {"c"}, "c": nil}},
		{name: "two packages", rules: map[string][]string{"a": {"b"}, "b": {"a"}}, want: []string{"a", "b", "a"}},
		{name: "three packages", rules: map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}, want: []string{"a", "b", "c", "a"}},
		{name: "self", rules: map[string][]string{"a": {"a"}}, want: []string{"a", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := findCycle(tc.rules); !slices.Equal(got, tc.want) {
				t.Errorf("findCycle = %v, want %v", got, tc.want)
			}
		})
	}
}

// listImports returns the module's packages, relative to the module path,
// each with the module's packages its non-test files import. Errors that go
// list reports (an import cycle, for one) fail the test.
func listImports(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.Command(goTool, "list", "-e", "-json=ImportPath,Imports,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list: %v", err)
		}
		if p.Error != nil {
			t.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkg, ok := ours(p.ImportPath)
		if !ok {
			continue
		}
		deps := []string{}
		for _, imp := range p.Imports {
			if dep, ok := ours(imp); ok {
				deps = append(deps, dep)
			}
		}
		imports[pkg] = deps
	}
	if len(imports) == 0 {
		t.Fatalf("go list found no packages of %s", module)
	}
	return imports
}

// ours returns path relative to the module, and whether it is in it.
func ours(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// reachable returns, for every package that pkg depends on directly or
// not, one import path from pkg to it.
func reachable(imports map[string][]string, pkg string) [][]string {
	var out [][]string
	seen := map[string]bool{pkg: true}
	queue := [][]string{{pkg}}
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		for _, dep := range imports[path[len(path)-1]] {
			if seen[dep] {
				continue
			}
			seen[dep] = true
			next := append(slices.Clone(path), dep)
			out = append(out, next)
			queue = append(queue, next)
		}
	}
	return out
}

// findCycle returns a cycle of rules (a → … → a), or nil if they point
// one way. Packages are visited in sorted order, so the answer is stable.
func findCycle(rules map[string][]string) []string {
	const (
		unvisited = iota
		onPath    // on the current depth-first path
		done      // every package reachable from it was visited
	)
	state := map[string]int{}
	var path []string
	var visit func(pkg string) []string
	visit = func(pkg string) []string {
		switch state[pkg] {
		case onPath:
			i := slices.Index(path, pkg)
			return append(slices.Clone(path[i:]), pkg)
		case done:
			return nil
		}
		state[pkg] = onPath
		path = append(path, pkg)
		for _, dep := range sorted(rules[pkg]) {
			if c := visit(dep); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[pkg] = done
		return nil
	}
	for _, pkg := range sorted(keys(rules)) {
		if c := visit(pkg); c != nil {
			return c
		}
	}
	return nil
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
