package fsm

import (
	"testing"

	"github.com/claimd/claimd/structs"
)

// Tests of a release carrying the holding node's
// statement that it has node-detached the claim itself.

func (h *harness) releaseDetachedBy(vol, alloc, node string) *structs.ClaimResult {
	h.t.Helper()
	var taken uint64
	if c := h.volume(vol).LiveClaim(alloc); c != nil {
		taken = c.CreateIndex
	}
	return h.claimsAs(structs.ClaimBatchDetachedRequestType, &structs.VolumeClaimRequest{VolumeID: vol, AllocID: alloc, Release: true, NodeDetached: true, NodeID: node, ClaimIndex: taken})[0]
}

// claimsAs applies a claim batch as entry type t.
func (h *harness) claimsAs(t structs.MessageType, reqs ...*structs.VolumeClaimRequest) []*structs.ClaimResult {
	h.t.Helper()
	br, ok := h.mustApply(t, &structs.ClaimBatchRequest{Claims: reqs}).(*structs.ClaimBatchResponse)
	if !ok || len(br.Results) != len(reqs) {
		h.t.Fatalf("claim batch: exp: %d results got: %+v", len(reqs), br)
	}
	return br.Results
}

// With no controller to detach, the holder's release frees the claim in
// its own entry: no past claim, no pending eval, the timeline passing
// node-detached at the release's index.
func TestReleaseDetached_ByHolderWithoutControllerFreesInTheReleaseEntry(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	r := h.releaseDetachedBy("v1", "a1", "n1")
	if r.Error != nil || r.Claim != nil {
		t.Fatalf("exp: freed (no claim left) got: %+v %v", r.Claim, r.Err())
	}
	v := h.volume("v1")
	if v.HasClaims() || v.CurrentAccessMode != "" {
		t.Fatalf("exp: no claims, modes reset got: %+v", v.AllClaims())
	}
	if len(v.Released) != 1 {
		t.Fatalf("exp: one released claim got: %d", len(v.Released))
	}
	c := v.Released[0]
	if got := stepStates(c); got != "taken,unpublishing,node-detached,freed" {
		t.Fatalf("steps: exp: taken,unpublishing,node-detached,freed got: %s", got)
	}
	for _, s := range c.Steps[1:] {
		if s.Index != h.index {
			t.Fatalf("steps: exp: all but taken at the release's index %d got: %+v", h.index, c.Steps)
		}
	}
	if v.Released[0].NodeDetachSkipped {
		t.Fatalf("exp: the node detach done, not skipped")
	}
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	for _, e := range evals {
		if e.Status == structs.EvalStatusPending {
			t.Fatalf("exp: no pending eval got: %+v", e)
		}
	}
	// The allocation may claim afresh at once.
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
}

// A statement naming another node than the claim's is ignored: the
// release takes the servers' node detach as before.
func TestReleaseDetached_OtherNodesStatementIsIgnored(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.registerNode(testNode("n2"))
	r := h.releaseDetachedBy("v1", "a1", "n2")
	if r.Error != nil || r.Claim == nil || r.Claim.State != structs.ClaimStateUnpublishing {
		t.Fatalf("exp: unpublishing got: %+v %v", r.Claim, r.Err())
	}
	if r := h.claimsAs(structs.ClaimBatchDetachedRequestType, &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", Release: true, NodeDetached: true})[0]; r.Claim == nil || r.Claim.State != structs.ClaimStateUnpublishing {
		t.Fatalf("no node named: exp: still unpublishing got: %+v %v", r.Claim, r.Err())
	}
}

// With a controller to detach, the release records node-detached and
// leaves the controller detach to the watcher (a pending eval).
func TestReleaseDetached_WithControllerStopsAtNodeDetached(t *testing.T) {
	h := mustNewHarness(t)
	n := testNode("n1")
	n.CSINodePlugins["hostdir"].RequiresControllerPlugin = true
	n.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, RequiresControllerPlugin: true,
		ControllerCapabilities: &structs.CSIControllerCapabilities{PublishUnpublish: true}}}
	h.registerNode(n)
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	r := h.releaseDetachedBy("v1", "a1", "n1")
	if r.Error != nil || r.Claim == nil || r.Claim.State != structs.ClaimStateNodeDetached {
		t.Fatalf("exp: node-detached got: %+v %v", r.Claim, r.Err())
	}
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusPending {
		t.Fatalf("exp: one pending eval got: %+v", evals)
	}
	// The watcher's one checkpoint then frees it.
	h.checkpoint(&structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed, ExpectedState: structs.ClaimStateNodeDetached})
	if v := h.volume("v1"); v.HasClaims() {
		t.Fatalf("exp: freed got: %+v", v.AllClaims())
	}
}

// A claim cannot carry the statement.
func TestReleaseDetached_ClaimWithTheStatementIsInvalid(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeMultiNodeMultiWriter)
	h.placeAllocs(testAlloc("a2", "n1", "v1"))
	r := h.claimsAs(structs.ClaimBatchDetachedRequestType, &structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a2", NodeID: "n1", Mode: structs.ClaimModeRead, NodeDetached: true})[0]
	if r.Error == nil || r.Error.Code != structs.CodeInvalid {
		t.Fatalf("exp: invalid got: %+v", r.Error)
	}
}

// The agent's path: a terminal status from the node, listing the volume
// as detached by it, frees the claim in the same entry; the same list
// without the node named (a node:write token's update: the endpoint
// drops it, and the state machine does not honour it either) leaves the
// claim unpublishing.
func TestReleaseDetached_TerminalUpdateFromTheNodeFrees(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter), testVolume("v2", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1", "v2"), testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustClaim("v2", "a1", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.AllocClientUpdateDetachedRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1", Allocs: []*structs.AllocClientUpdate{
		{ID: "a1", ClientStatus: structs.AllocClientComplete, DetachedVolumes: []string{"v1"}}}})
	if v := h.volume("v1"); v.HasClaims() {
		t.Fatalf("v1: exp: freed in the terminal entry got: %+v", v.AllClaims())
	}
	if c := h.volume("v2").PastClaims["a1"]; c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("v2 (not listed): exp: unpublishing got: %+v", c)
	}
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.AllocClientUpdateDetachedRequestType, &structs.AllocClientUpdateRequest{Allocs: []*structs.AllocClientUpdate{
		{ID: "a2", ClientStatus: structs.AllocClientComplete, DetachedVolumes: []string{"v1"}}}})
	if c := h.volume("v1").PastClaims["a2"]; c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("no node named: exp: unpublishing got: %+v", c)
	}
}

// Replay is unchanged: under the entry types every server has always
// applied (9 and 8), a statement is not honoured, as an older server,
// which does not know the fields, would not honour it.
func TestReleaseDetached_OldEntryTypesIgnoreTheStatement(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", Release: true, NodeDetached: true, NodeID: "n1"})[0]
	if r.Error != nil || r.Claim == nil || r.Claim.State != structs.ClaimStateUnpublishing {
		t.Fatalf("type 9: exp: unpublishing got: %+v %v", r.Claim, r.Err())
	}

	h = mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustApply(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1", Allocs: []*structs.AllocClientUpdate{
		{ID: "a1", ClientStatus: structs.AllocClientComplete, DetachedVolumes: []string{"v1"}}}})
	if c := h.volume("v1").PastClaims["a1"]; c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("type 8: exp: unpublishing got: %+v", c)
	}
}

// A statement is about one claim: a release naming the index of the
// allocation's earlier claim (delayed, or sent again) does not skip the
// node detach of the claim it holds now, nor does one naming none.
func TestReleaseDetached_StatementAboutAnEarlierClaimIsIgnored(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	first := h.volume("v1").LiveClaim("a1").CreateIndex
	if r := h.releaseDetachedBy("v1", "a1", "n1"); r.Error != nil || r.Claim != nil {
		t.Fatalf("first release: exp: freed got: %+v %v", r.Claim, r.Err())
	}
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	for _, idx := range []uint64{first, 0} {
		r := h.claimsAs(structs.ClaimBatchDetachedRequestType, &structs.VolumeClaimRequest{
			VolumeID: "v1", AllocID: "a1", Release: true, NodeDetached: true, NodeID: "n1", ClaimIndex: idx})[0]
		if r.Error != nil || r.Claim == nil || r.Claim.State != structs.ClaimStateUnpublishing {
			t.Fatalf("statement about index %d: exp: the current claim unpublishing (node detach by the servers) got: %+v %v", idx, r.Claim, r.Err())
		}
		h.checkpoint(&structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed, NodeDetached: true})
		h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	}
}
