package fsm

import (
	"slices"
	"testing"

	"github.com/claimd/claimd/structs"
)

// Only finished allocations without claims go: a running one, a stopped
// one whose client has not finished, and a finished one whose claim is
// still being released all stay; an unknown ID is skipped, not refused.
func TestAllocGC_RemovesOnlyFinishedAllocationsWithoutClaims(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("running", "n1", "v1"), testAlloc("done", "n1", "v1"), testAlloc("releasing", "n1", "v1"), testAlloc("stopping", "n1", "v1"))
	h.mustClaim("v1", "running", "n1", structs.ClaimModeWrite)
	h.mustClaim("v1", "releasing", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"done", "releasing", "stopping"}})
	h.mustApply(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1", Allocs: []*structs.AllocClientUpdate{
		{ID: "done", ClientStatus: structs.AllocClientComplete}, {ID: "releasing", ClientStatus: structs.AllocClientComplete}}})

	resp := h.mustApply(structs.AllocGCRequestType, &structs.AllocGCRequest{AllocIDs: []string{"running", "done", "releasing", "stopping", "unknown"}})
	got := resp.(*structs.AllocGCResponse).Removed
	if !slices.Equal(got, []string{"done"}) {
		t.Fatalf("removed exp: [done] got: %v", got)
	}
	for _, id := range []string{"running", "releasing", "stopping"} {
		if h.alloc(id) == nil {
			t.Fatalf("%s exp: kept got: removed", id)
		}
	}
	if h.alloc("done") != nil {
		t.Fatal("done exp: removed got: kept")
	}
	h.mustRefuse(structs.AllocGCRequestType, &structs.AllocGCRequest{}, structs.CodeInvalid)
}
