package router

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies keeps the router below the executor and the frontend:
// of shardgate's packages it imports only config, sharding and wire.
func TestDependencies(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/shardgate/shardgate/"
	allowed := []string{mod + "router", mod + "router/sharding", mod + "config", mod + "wire"}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, mod) && !slices.Contains(allowed, dep) {
			t.Errorf("router imports %s", dep)
		}
	}
}
