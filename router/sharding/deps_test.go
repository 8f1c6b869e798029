package sharding

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoInternalImports keeps sharding a leaf: it imports nothing else from
// shardgate, so that every layer can use it without a cycle.
func TestNoInternalImports(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/shardgate/shardgate/router/sharding"
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/shardgate/shardgate/") && dep != self {
			t.Errorf("sharding imports %s", dep)
		}
	}
}
