package integration

import (
	"testing"
	"time"

	"github.com/claimd/claimd/integration/harness"
	"github.com/claimd/claimd/structs"
)

// `claimd system gc` removes finished allocations whose claims are freed
// (the release done), and nothing else: a running allocation stays, and
// the removed one's volume is claimable again.
func TestSystemGC_RemovesFinishedAllocationsOnly(t *testing.T) {
	e := newReleaseEnv(t, "w1")
	e.register(t, "v1", structs.AccessModeSingleNodeWriter)
	e.register(t, "v2", structs.AccessModeSingleNodeWriter)
	e.run(t, "done", "w1", "v1")
	e.run(t, "running", "w1", "v2")
	e.waitAlloc(t, "done", structs.AllocClientRunning)
	e.waitAlloc(t, "running", structs.AllocClientRunning)
	if _, err := e.api.StopAllocs(harness.Ctx(t, 30*time.Second), "done"); err != nil {
		t.Fatal(err)
	}
	e.waitAlloc(t, "done", structs.AllocClientComplete)
	e.waitFreed(t, "v1", 30*time.Second)

	out, err := e.api.GarbageCollect(harness.Ctx(t, 30*time.Second), "")
	if err != nil || out.AllocsRemoved != 1 {
		t.Fatalf("system gc exp: one allocation removed got: %+v %v", out, err)
	}
	ctx := harness.Ctx(t, 10*time.Second)
	if a, _, err := e.api.Alloc(ctx, "done", structs.QueryOptions{}); err == nil && a != nil {
		t.Fatalf("done exp: removed got: %+v", a)
	}
	if a, _, err := e.api.Alloc(ctx, "running", structs.QueryOptions{}); err != nil || a == nil || a.ClientStatus != structs.AllocClientRunning {
		t.Fatalf("running exp: kept and running got: %+v %v", a, err)
	}
}
