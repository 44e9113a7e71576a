package fsm

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/claimd/claimd/structs"
)

func mustCheckpoint(t *testing.T, h *harness, req *structs.ClaimCheckpointRequest) *structs.Claim {
	t.Helper()
	resp := h.checkpoint(req)
	cr, ok := resp.(*structs.ClaimCheckpointResponse)
	if !ok {
		t.Fatalf("checkpoint %s: exp: *ClaimCheckpointResponse got: %v", req.State, resp)
	}
	return cr.Claim
}

func TestCheckpoint_ForwardToFreedResetsModes(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.release("v1", "a1")
	for _, st := range []structs.ClaimState{structs.ClaimStateNodeDetached, structs.ClaimStateControllerDetached} {
		c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: st})
		if c.State != st || c.ModifyIndex != h.index || c.NodeDetachSkipped {
			t.Fatalf("exp: %s at %d got: %+v", st, h.index, c)
		}
	}
	if v := h.volume("v1"); v.CurrentAccessMode != structs.AccessModeSingleNodeWriter {
		t.Fatalf("exp: current modes kept while a past claim remains got: %q", v.CurrentAccessMode)
	}
	if c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed}); c != nil {
		t.Fatalf("freed: exp: no claim got: %+v", c)
	}
	freedAt := h.index
	v := h.volume("v1")
	if v.HasClaims() || v.CurrentAccessMode != "" || v.CurrentAttachmentMode != "" || v.PastClaims != nil {
		t.Fatalf("exp: no claims, current modes reset got: %+v", v)
	}
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed}, structs.CodeNotFound)
	// Freeing the last past claim completes the eval in the same entry; the
	// watcher's own completion after it is a harmless repeat.
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusComplete || evals[0].ModifyIndex != freedAt {
		t.Fatalf("exp: eval completed by the entry that freed the last past claim got: %+v", evals)
	}
	h.mustApply(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: evals[0].ID, Status: structs.EvalStatusComplete})
}

func TestCheckpoint_EvalStaysPendingWhileAPastClaimRemains(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeMultiNodeMultiWriter)
	h.placeAllocs(testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeWrite)
	h.release("v1", "a1")
	h.release("v1", "a2")
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed, NodeDetached: true})
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusPending {
		t.Fatalf("exp: eval pending while a2's past claim remains got: %+v", evals)
	}
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a2", State: structs.ClaimStateFreed, NodeDetached: true})
	evals, _ = h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusComplete {
		t.Fatalf("exp: eval complete with the last past claim freed got: %+v", evals)
	}
}

func TestCheckpoint_NodeDetachedCoversTheNodeStep(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.release("v1", "a1")
	// Without it (or force), passing over node-detached is refused.
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed}, structs.CodeConflict)
	// It may not say so of a step before node-detached.
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateUnpublishing, NodeDetached: true}, structs.CodeInvalid)
	c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateControllerDetached, ExpectedState: structs.ClaimStateUnpublishing, NodeDetached: true})
	if c.State != structs.ClaimStateControllerDetached || c.NodeDetachSkipped || c.ForcedSkip {
		t.Fatalf("exp: controller-detached with nothing recorded as skipped got: %+v", c)
	}
}

func TestCheckpointBatch_ItemsApplyInOrderAndARefusalIsItsOwn(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeMultiNodeMultiWriter)
	h.placeAllocs(testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeWrite)
	h.release("v1", "a1")
	h.release("v1", "a2")
	before := h.volume("v1")
	resp := h.mustApply(structs.CheckpointBatchRequestType, &structs.CheckpointBatchRequest{Checkpoints: []*structs.ClaimCheckpointRequest{
		{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached, ExpectedState: structs.ClaimStateUnpublishing},
		// Sees the first item's write: a1 is node-detached now.
		{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached, ExpectedState: structs.ClaimStateUnpublishing},
		{VolumeID: "nope", AllocID: "a1", State: structs.ClaimStateFreed},
		{VolumeID: "v1", AllocID: "a2", State: structs.ClaimStateFreed, NodeDetached: true},
	}}).(*structs.CheckpointBatchResponse)
	got := make([]string, len(resp.Results))
	for i, r := range resp.Results {
		switch {
		case r.Error != nil:
			got[i] = string(r.Error.Code)
		case r.Claim == nil:
			got[i] = "freed"
		default:
			got[i] = string(r.Claim.State)
		}
	}
	exp := []string{"node-detached", string(structs.CodeConflict), string(structs.CodeNotFound), "freed"}
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Fatalf("exp: %v got: %v", exp, got)
	}
	v := h.volume("v1")
	if len(v.PastClaims) != 1 || v.PastClaims["a1"].State != structs.ClaimStateNodeDetached || v.ModifyIndex == before.ModifyIndex {
		t.Fatalf("exp: a1 node-detached, a2 freed got: %+v", v.PastClaims)
	}
	h.mustRefuse(structs.CheckpointBatchRequestType, &structs.CheckpointBatchRequest{}, structs.CodeInvalid)
}

func TestCheckpoint_OnlyForward(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.release("v1", "a1")
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached})
	for _, back := range []structs.ClaimState{structs.ClaimStateTaken, structs.ClaimStateUnpublishing} {
		h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: "v1", AllocID: "a1", State: back}, structs.CodeConflict)
	}
	// The same state again is a harmless no-op (a retried checkpoint).
	idx := h.volume("v1").ModifyIndex
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached})
	if got := h.volume("v1").ModifyIndex; got != idx {
		t.Fatalf("same-state checkpoint: exp: unchanged at %d got: %d", idx, got)
	}
	// Compare-and-set.
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateControllerDetached, ExpectedState: structs.ClaimStateUnpublishing}, structs.CodeConflict)
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateControllerDetached, ExpectedState: structs.ClaimStateNodeDetached})
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "v1", AllocID: "a1", State: "sideways"}, structs.CodeInvalid)
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "nope", AllocID: "a1", State: structs.ClaimStateFreed}, structs.CodeNotFound)
}

// TestCheckpoint_SkippingNodeDetachNeedsForce is S3's exception: a claim
// reaches controller-detached or freed without node detach only by force,
// and the claim says so.
func TestCheckpoint_SkippingNodeDetachNeedsForce(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.release("v1", "a1")
	for _, st := range []structs.ClaimState{structs.ClaimStateControllerDetached, structs.ClaimStateFreed} {
		h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
			VolumeID: "v1", AllocID: "a1", State: st}, structs.CodeConflict)
	}
	c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateControllerDetached, ForcedSkip: true})
	if !c.ForcedSkip || !c.NodeDetachSkipped {
		t.Fatalf("exp: forced skip recorded got: %+v", c)
	}
	// From node-detached, freeing without a controller detach is allowed:
	// the watcher skips it when no controller is needed.
	h2 := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h2.release("v1", "a1")
	mustCheckpoint(t, h2, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached})
	mustCheckpoint(t, h2, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed})
}

func TestCheckpoint_LiveClaimMovesToPastWithEval(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{
		VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateNodeDetached}, structs.CodeConflict)
	c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateUnpublishing})
	if c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("exp: unpublishing got: %+v", c)
	}
	if v := h.volume("v1"); v.PastClaims["a1"] == nil || v.LiveClaim("a1") != nil {
		t.Fatalf("exp: claim moved to past got: %+v", v.AllClaims())
	}
	if evals, _ := h.f.State().EvalsByStatus(nil, structs.EvalStatusPending); len(evals) != 1 {
		t.Fatalf("exp: one pending eval got: %+v", evals)
	}
}

func TestCheckpoint_PublishContext(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	pc := map[string]string{"device": "/dev/xvdb"}
	c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateTaken, ExpectedState: structs.ClaimStateTaken, PublishContext: pc})
	if !maps.Equal(c.PublishContext, pc) || c.ModifyIndex != h.index {
		t.Fatalf("exp: publish context %v at %d got: %+v", pc, h.index, c)
	}
	if got := h.volume("v1").WriteClaims["a1"].PublishContext; !maps.Equal(got, pc) {
		t.Fatalf("stored: exp: %v got: %v", pc, got)
	}
	// The re-claim returns it, so a restarted client can stage without a
	// second ControllerPublish.
	r := h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	if r.New || !maps.Equal(r.Claim.PublishContext, pc) {
		t.Fatalf("re-claim: exp: not new, with publish context got: %+v", r)
	}
	h.release("v1", "a1")
	if c := h.volume("v1").PastClaims["a1"]; !maps.Equal(c.PublishContext, pc) {
		t.Fatalf("past claim: exp: publish context kept for unpublish got: %+v", c)
	}
	h.mustRefuse(structs.ClaimCheckpointRequestType, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateNodeDetached, PublishContext: pc}, structs.CodeInvalid)
}

func TestEvals_UpsertAndComplete(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.mustApply(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
		{ID: "e-gone", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "gone"},
		{ID: "e-idle", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "v1"},
	}})
	if e, _ := h.f.State().EvalByID(nil, "e-idle"); e == nil || e.Status != structs.EvalStatusComplete {
		t.Fatalf("e-idle: exp: complete at once got: %+v", e)
	}
	// An eval lives in its volume's row: one for a volume that is not
	// registered is not kept.
	if e, _ := h.f.State().EvalByID(nil, "e-gone"); e != nil {
		t.Fatalf("e-gone: exp: not stored got: %+v", e)
	}
	h.mustRefuse(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
		{ID: "e-idle", Type: structs.EvalTypeVolumeClaimGC, VolumeID: "v1", Status: structs.EvalStatusPending}}}, structs.CodeConflict)
	h.mustRefuse(structs.EvalUpsertRequestType, &structs.EvalUpsertRequest{Evals: []*structs.Eval{
		{ID: "e-x", Type: "other", VolumeID: "v1"}}}, structs.CodeInvalid)

	h.clientUpdate("a1", structs.AllocClientComplete)
	evals, _ := h.f.State().EvalsByStatus(nil, structs.EvalStatusPending)
	if len(evals) != 1 {
		t.Fatalf("exp: one pending eval got: %+v", evals)
	}
	id := evals[0].ID
	err := h.mustRefuse(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, Status: structs.EvalStatusComplete}, structs.CodeConflict)
	if !errors.Is(err, structs.ErrConflict) {
		t.Fatalf("exp: conflict got: %v", err)
	}
	h.mustRefuse(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, Status: structs.EvalStatusPending}, structs.CodeInvalid)
	h.mustRefuse(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: "nope", Status: structs.EvalStatusFailed}, structs.CodeNotFound)
	// Named with the wrong volume, the eval is not there.
	h.mustRefuse(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, VolumeID: "gone", Status: structs.EvalStatusFailed}, structs.CodeNotFound)
	h.mustApply(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, VolumeID: "v1", Status: structs.EvalStatusFailed, StatusDescription: "plugin said no"})
	h.mustApply(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, Status: structs.EvalStatusFailed})
	h.mustRefuse(structs.EvalCompleteRequestType, &structs.EvalCompleteRequest{EvalID: id, Status: structs.EvalStatusComplete}, structs.CodeConflict)
	if e, _ := h.f.State().EvalByID(nil, id); e.StatusDescription != "plugin said no" {
		t.Fatalf("exp: permanent error shown on the eval got: %+v", e)
	}
}

func TestEvals_AVolumeKeepsItsNewestFinishedEvalsOnly(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	var created []uint64
	for i := range 10 {
		if i > 0 {
			a := fmt.Sprintf("r%d", i)
			h.placeAllocs(testAlloc(a, "n1", "v1"))
			h.mustClaim("v1", a, "n1", structs.ClaimModeWrite)
			h.release("v1", a)
			mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: a, State: structs.ClaimStateFreed, NodeDetached: true})
		} else {
			h.release("v1", "a1")
			mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed, NodeDetached: true})
		}
		evals, _ := h.f.State().EvalsByVolume(nil, "v1")
		created = created[:0]
		for _, e := range evals {
			if e.Status != structs.EvalStatusComplete {
				t.Fatalf("round %d: exp: every eval complete got: %+v", i, e)
			}
			created = append(created, e.CreateIndex)
		}
		if want := min(i+1, keepTerminalEvals+1); len(evals) != want {
			t.Fatalf("round %d: exp: %d evals got: %d", i, want, len(evals))
		}
	}
	// The ones kept are the newest.
	slices.Sort(created)
	if created[len(created)-1] != h.index-1 {
		t.Fatalf("exp: the newest eval (created by the last release at %d) kept got: %v", h.index-1, created)
	}
}
