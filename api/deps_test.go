package api

import (
	"os/exec"
	"strings"
	"testing"
)

// Schedulers import this package: it must not link the state machine's
// store or Raft (snapshot archives are inspected by package
// snapshot/inspect, which the CLI and the HTTP API import, not this one).
func TestDeps_NoStateMachineOrRaft(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	out, err := exec.Command(goTool, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "hashicorp/go-memdb") || strings.Contains(dep, "hashicorp/raft") ||
			dep == "github.com/claimd/claimd/fsm" {
			t.Errorf("api exp: does not link %s got: it does (go list -deps ./api)", dep)
		}
	}
}
