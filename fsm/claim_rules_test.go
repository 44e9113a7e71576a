package fsm

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

// outcome of a claim in the access-mode table test.
type outcome string

const (
	ok      outcome = "ok"         // a new claim
	same    outcome = "idempotent" // the existing claim, New=false
	max     outcome = "max_claims"
	invalid outcome = "invalid"
	na      outcome = "" // the existing-claims case cannot arise for this mode
)

// existing is the state of the volume before the claim under test.
type existing string

const (
	exNone      existing = "no claims"
	exLiveRead  existing = "other alloc holds a live read claim"
	exLiveWrite existing = "other alloc holds a live write claim"
	exPastRead  existing = "other alloc holds a past read claim"
	exPastWrite existing = "other alloc holds a past write claim"
	exSameAlloc existing = "same alloc already holds the claim"
)

// TestClaim_AccessModeTable checks the access-mode table of
// docs/architecture.md for every access mode × claim mode ×
// existing-claims case. The expectations are
// written out by hand, not computed, so the test does not share the
// implementation's mistakes.
func TestClaim_AccessModeTable(t *testing.T) {
	type row struct{ read, write outcome }
	table := map[structs.AccessMode]map[existing]row{
		structs.AccessModeSingleNodeReader: {
			exNone: {ok, invalid}, exLiveRead: {max, invalid}, exLiveWrite: {na, na},
			exPastRead: {max, invalid}, exPastWrite: {na, na}, exSameAlloc: {same, na},
		},
		structs.AccessModeSingleNodeWriter: {
			exNone: {ok, ok}, exLiveRead: {max, max}, exLiveWrite: {max, max},
			exPastRead: {max, max}, exPastWrite: {max, max}, exSameAlloc: {same, same},
		},
		structs.AccessModeMultiNodeReader: {
			exNone: {ok, invalid}, exLiveRead: {ok, invalid}, exLiveWrite: {na, na},
			exPastRead: {ok, invalid}, exPastWrite: {na, na}, exSameAlloc: {same, na},
		},
		structs.AccessModeMultiNodeSingleWriter: {
			exNone: {ok, ok}, exLiveRead: {ok, ok}, exLiveWrite: {ok, max},
			exPastRead: {ok, ok}, exPastWrite: {ok, max}, exSameAlloc: {same, same},
		},
		structs.AccessModeMultiNodeMultiWriter: {
			exNone: {ok, ok}, exLiveRead: {ok, ok}, exLiveWrite: {ok, ok},
			exPastRead: {ok, ok}, exPastWrite: {ok, ok}, exSameAlloc: {same, same},
		},
		structs.AccessModeSingleNodeSingleWriter: {
			exNone: {ok, ok}, exLiveRead: {max, max}, exLiveWrite: {max, max},
			exPastRead: {max, max}, exPastWrite: {max, max}, exSameAlloc: {same, same},
		},
		// "other" is on n2 and the claim under test on n1: another node
		// holds the volume, whatever the claims' modes.
		structs.AccessModeSingleNodeMultiWriter: {
			exNone: {ok, ok}, exLiveRead: {max, max}, exLiveWrite: {max, max},
			exPastRead: {max, max}, exPastWrite: {max, max}, exSameAlloc: {same, same},
		},
	}
	if len(table) != len(structs.AccessModes) {
		t.Fatalf("table exp: a row per access mode got: %d of %d", len(table), len(structs.AccessModes))
	}
	cases := []existing{exNone, exLiveRead, exLiveWrite, exPastRead, exPastWrite, exSameAlloc}
	for _, am := range structs.AccessModes {
		for _, ex := range cases {
			for _, cm := range []structs.ClaimMode{structs.ClaimModeRead, structs.ClaimModeWrite} {
				want := table[am][ex].read
				if cm == structs.ClaimModeWrite {
					want = table[am][ex].write
				}
				if want == na {
					continue
				}
				t.Run(fmt.Sprintf("%s/%s/%s", am, cm, ex), func(t *testing.T) {
					h := newTableHarness(t, am)
					setupExisting(t, h, ex, cm)
					before := h.volume("v1")
					r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me", NodeID: "n1", Mode: cm})[0]
					checkOutcome(t, h, r, want, cm, before)
				})
			}
		}
	}
}

// newTableHarness: nodes n1 and n2 with a healthy plugin, volume v1, alloc
// "me" on n1 and "other" on n2, both requesting v1.
func newTableHarness(t *testing.T, am structs.AccessMode) *harness {
	h := mustNewHarness(t)
	for _, id := range []string{"n1", "n2"} {
		n := testNode(id)
		n.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{SingleNodeMultiWriter: true}
		h.registerNode(n)
	}
	h.registerVolumes(testVolume("v1", am))
	h.placeAllocs(testAlloc("me", "n1", "v1"), testAlloc("other", "n2", "v1"))
	return h
}

func setupExisting(t *testing.T, h *harness, ex existing, cm structs.ClaimMode) {
	t.Helper()
	switch ex {
	case exNone:
	case exLiveRead, exPastRead:
		h.mustClaim("v1", "other", "n2", structs.ClaimModeRead)
	case exLiveWrite, exPastWrite:
		h.mustClaim("v1", "other", "n2", structs.ClaimModeWrite)
	case exSameAlloc:
		h.mustClaim("v1", "me", "n1", cm)
	}
	if ex == exPastRead || ex == exPastWrite {
		if r := h.release("v1", "other"); r.Error != nil {
			t.Fatalf("release: exp: success got: %v", r.Error)
		}
	}
}

func checkOutcome(t *testing.T, h *harness, r *structs.ClaimResult, want outcome, cm structs.ClaimMode, before *structs.Volume) {
	t.Helper()
	after := h.volume("v1")
	switch want {
	case ok, same:
		if r.Error != nil {
			t.Fatalf("exp: %s got: %v", want, r.Error)
		}
		if r.New != (want == ok) {
			t.Fatalf("New: exp: %v got: %v", want == ok, r.New)
		}
		if r.Claim == nil || r.Claim.AllocID != "me" || r.Claim.Mode != cm || r.Claim.State != structs.ClaimStateTaken ||
			r.Claim.ExternalNodeID != "ext-n1" {
			t.Fatalf("claim: exp: me/%s/taken on ext-n1 got: %+v", cm, r.Claim)
		}
		if got := after.LiveClaim("me"); got == nil || got.Mode != cm {
			t.Fatalf("stored claim: exp: live %s claim got: %+v", cm, got)
		}
		if after.CurrentAccessMode != after.AccessMode || after.CurrentAttachmentMode != after.AttachmentMode {
			t.Fatalf("current modes: exp: %s/%s got: %s/%s", after.AccessMode, after.AttachmentMode,
				after.CurrentAccessMode, after.CurrentAttachmentMode)
		}
		if want == same && after.ModifyIndex != before.ModifyIndex {
			t.Fatalf("idempotent re-claim: exp: volume unchanged at %d got: modified at %d", before.ModifyIndex, after.ModifyIndex)
		}
	case max, invalid:
		code := structs.ErrorCode(want)
		if r.Error == nil || r.Error.Code != code {
			t.Fatalf("exp: %s got: %v", code, r.Err())
		}
		if r.Claim != nil {
			t.Fatalf("refused claim: exp: no claim got: %+v", r.Claim)
		}
		if retry := structs.IsRetryable(r.Err()); retry != (want == max) {
			t.Fatalf("retryable: exp: %v got: %v (%v)", want == max, retry, r.Error)
		}
		if after.ModifyIndex != before.ModifyIndex {
			t.Fatalf("refused claim: exp: volume unchanged got: modified at %d", after.ModifyIndex)
		}
	}
}

// TestClaim_PastWriterBlocksNewWriterUntilFreed is the safety property the
// system exists for: a new writer waits for the old writer's detach.
func TestClaim_PastWriterBlocksNewWriterUntilFreed(t *testing.T) {
	h := newTableHarness(t, structs.AccessModeMultiNodeSingleWriter)
	h.mustClaim("v1", "other", "n2", structs.ClaimModeWrite)
	h.clientUpdate("other", structs.AllocClientComplete)
	for _, st := range []structs.ClaimState{structs.ClaimStateUnpublishing, structs.ClaimStateNodeDetached, structs.ClaimStateControllerDetached} {
		if st != structs.ClaimStateUnpublishing {
			if err, isErr := h.checkpoint(&structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "other", State: st}).(error); isErr {
				t.Fatalf("checkpoint %s: exp: success got: %v", st, err)
			}
		}
		r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me", NodeID: "n1", Mode: structs.ClaimModeWrite})[0]
		if !errors.Is(r.Err(), structs.ErrMaxClaims) {
			t.Fatalf("writer while old writer is %s: exp: max_claims got: %v", st, r.Err())
		}
	}
	h.checkpoint(&structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "other", State: structs.ClaimStateFreed})
	h.mustClaim("v1", "me", "n1", structs.ClaimModeWrite)
}

func TestClaim_Unschedulable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
	}{
		{"no plugin on any node", func(h *harness) {
			v := testVolume("v1", structs.AccessModeSingleNodeWriter)
			v.PluginID = "elsewhere"
			h.registerVolumes(v)
		}},
		{"node plugin unhealthy", func(h *harness) {
			n := testNode("n1")
			n.CSINodePlugins["hostdir"].Healthy = false
			h.registerNode(n)
		}},
		{"controller required, none healthy", func(h *harness) {
			n := testNode("n1")
			n.CSINodePlugins["hostdir"].RequiresControllerPlugin = true
			n.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: false}}
			h.registerNode(n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mustNewHarness(t)
			h.registerNode(testNode("n1"))
			h.registerNode(testNode("n2"))
			h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
			h.placeAllocs(testAlloc("me", "n1", "v1"))
			tc.setup(h)
			r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me", NodeID: "n1", Mode: structs.ClaimModeWrite})[0]
			if !errors.Is(r.Err(), structs.ErrUnschedulable) {
				t.Fatalf("exp: unschedulable got: %v", r.Err())
			}
		})
	}
}

func TestClaim_ControllerRequiredAndHealthy(t *testing.T) {
	h := mustNewHarness(t)
	n := testNode("n1")
	n.CSINodePlugins["hostdir"].RequiresControllerPlugin = true
	h.registerNode(n)
	ctrl := testNode("c1")
	ctrl.CSINodePlugins = nil
	ctrl.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, RequiresControllerPlugin: true}}
	h.registerNode(ctrl)
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("me", "n1", "v1"), testAlloc("me2", "n1", "v1"))
	h.mustClaim("v1", "me", "n1", structs.ClaimModeWrite)

	// The controller's node goes down: new claims are unschedulable, the
	// existing one stays.
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "c1", Status: structs.NodeStatusDown})
	p, _ := h.f.State().PluginByID(nil, "hostdir")
	if p.ControllersHealthy != 0 || !p.ControllerRequired || p.NodesHealthy != 1 {
		t.Fatalf("plugin: exp: 0 healthy controllers, required, 1 healthy node got: %+v", p)
	}
	r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me2", NodeID: "n1", Mode: structs.ClaimModeWrite})[0]
	if !errors.Is(r.Err(), structs.ErrUnschedulable) {
		t.Fatalf("exp: unschedulable got: %v", r.Err())
	}
	if v := h.volume("v1"); v.LiveClaim("me") == nil {
		t.Fatalf("exp: existing claim kept got: %+v", v.AllClaims())
	}
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "c1", Status: structs.NodeStatusReady})
	h.mustClaim("v1", "me2", "n1", structs.ClaimModeWrite)
}

func TestClaim_AllocChecks(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerNode(testNode("n2"))
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter), testVolume("v2", structs.AccessModeMultiNodeMultiWriter))
	ro := testAlloc("ro", "n1", "v1")
	ro.Volumes[0].ReadOnly = true
	h.placeAllocs(testAlloc("a1", "n1", "v1"), ro, testAlloc("done", "n1", "v1"), testAlloc("stopping", "n1", "v1"))
	h.clientUpdate("done", structs.AllocClientFailed)
	h.mustApply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"stopping"}})

	for _, tc := range []struct {
		name string
		req  structs.VolumeClaimRequest
		code structs.ErrorCode
	}{
		{"unknown volume", structs.VolumeClaimRequest{VolumeID: "nope", AllocID: "a1", NodeID: "n1", Mode: "read"}, structs.CodeNotFound},
		{"unknown alloc", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "nope", NodeID: "n1", Mode: "read"}, structs.CodeNotFound},
		{"alloc on another node", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n2", Mode: "read"}, structs.CodeInvalid},
		{"terminal alloc", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "done", NodeID: "n1", Mode: "read"}, structs.CodeInvalid},
		{"stopping alloc", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "stopping", NodeID: "n1", Mode: "read"}, structs.CodeInvalid},
		{"volume not requested", structs.VolumeClaimRequest{VolumeID: "v2", AllocID: "a1", NodeID: "n1", Mode: "read"}, structs.CodeInvalid},
		{"write on read-only request", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "ro", NodeID: "n1", Mode: "write"}, structs.CodeInvalid},
		{"bad mode", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: "exclusive"}, structs.CodeInvalid},
		{"wrong access mode", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: "read",
			AccessMode: structs.AccessModeSingleNodeWriter}, structs.CodeInvalid},
		{"wrong external node ID", structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: "read",
			ExternalNodeID: "someone-else"}, structs.CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			r := h.claims(&req)[0]
			if r.Error == nil || r.Error.Code != tc.code {
				t.Fatalf("exp: %s got: %v", tc.code, r.Err())
			}
		})
	}
	if v := h.volume("v1"); v.HasClaims() {
		t.Fatalf("exp: no claims after refusals got: %+v", v.AllClaims())
	}
	r := h.mustClaim("v1", "ro", "n1", structs.ClaimModeRead)
	if r.Claim.Mode != structs.ClaimModeRead {
		t.Fatalf("exp: read claim for read-only request got: %+v", r.Claim)
	}
	r = h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "ro", NodeID: "n1", Mode: "write"})[0]
	if !errors.Is(r.Err(), structs.ErrInvalid) {
		t.Fatalf("mode change by the same alloc: exp: invalid got: %v", r.Err())
	}
}

// TestClaimBatch_RefusalDoesNotFailOthers also covers S6: two writers in
// one entry, first in order wins.
func TestClaimBatch_RefusalDoesNotFailOthers(t *testing.T) {
	h := newTableHarness(t, structs.AccessModeMultiNodeSingleWriter)
	res := h.claims(
		&structs.VolumeClaimRequest{VolumeID: "nope", AllocID: "me", NodeID: "n1", Mode: "read"},
		&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "other", NodeID: "n2", Mode: "write"},
		&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me", NodeID: "n1", Mode: "write"},
		&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "me", NodeID: "n1", Mode: "read"},
		nil,
	)
	want := []structs.ErrorCode{structs.CodeNotFound, "", structs.CodeMaxClaims, "", structs.CodeInvalid}
	for i, r := range res {
		got := structs.ErrorCode("")
		if r.Error != nil {
			got = r.Error.Code
		}
		if got != want[i] {
			t.Fatalf("result %d: exp: %q got: %q (%v)", i, want[i], got, r.Error)
		}
	}
	if !res[1].New || !res[3].New {
		t.Fatalf("exp: New for the two accepted claims got: %v %v", res[1].New, res[3].New)
	}
	v := h.volume("v1")
	if len(v.WriteClaims) != 1 || v.WriteClaims["other"] == nil || len(v.ReadClaims) != 1 {
		t.Fatalf("exp: other writes, me reads got: %+v", v.AllClaims())
	}
	h.mustRefuse(structs.ClaimBatchRequestType, &structs.ClaimBatchRequest{}, structs.CodeInvalid)
}

func TestClaim_ReleaseMakesPastClaimAndEval(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	r := h.release("v1", "a1")
	if r.Error != nil || r.Claim == nil || r.Claim.State != structs.ClaimStateUnpublishing || r.New {
		t.Fatalf("release: exp: past claim unpublishing got: %+v %v", r.Claim, r.Err())
	}
	v := h.volume("v1")
	if v.LiveClaim("a1") != nil || v.PastClaims["a1"] == nil {
		t.Fatalf("exp: a1's claim past got: %+v", v.AllClaims())
	}
	evals, _ := h.f.State().EvalsByVolume(nil, "v1")
	if len(evals) != 1 || evals[0].Status != structs.EvalStatusPending || evals[0].ID != structs.DeriveEvalID(h.index, "v1") {
		t.Fatalf("exp: one pending eval with derived ID got: %+v", evals)
	}
	idx := h.index
	if r := h.release("v1", "a1"); r.Error != nil || r.Claim == nil {
		t.Fatalf("second release: exp: success, past claim got: %+v %v", r.Claim, r.Err())
	}
	if r := h.release("v1", "never"); r.Error != nil || r.Claim != nil {
		t.Fatalf("release of nothing: exp: success, no claim got: %+v %v", r.Claim, r.Err())
	}
	if v := h.volume("v1"); v.ModifyIndex != idx {
		t.Fatalf("idempotent releases: exp: volume unchanged at %d got: %d", idx, v.ModifyIndex)
	}
	// A re-claim while the old claim is being released waits: retryable
	// max_claims, so the alloc claims afresh once the old one is freed.
	r = h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: "write"})[0]
	if !errors.Is(r.Err(), structs.ErrMaxClaims) {
		t.Fatalf("re-claim while past: exp: max_claims got: %v", r.Err())
	}
}

func TestAllocTerminal_ClaimsPastWithOneEvalPerVolume(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter), testVolume("v2", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1", "v2"), testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustClaim("v2", "a1", "n1", structs.ClaimModeRead)
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeRead)

	h.mustApply(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n1",
		Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientComplete}, {ID: "a2", ClientStatus: structs.AllocClientFailed}}})
	for _, id := range []string{"v1", "v2"} {
		v := h.volume(id)
		if len(v.ReadClaims)+len(v.WriteClaims) != 0 || len(v.PastClaims) == 0 {
			t.Fatalf("%s: exp: only past claims got: %+v", id, v.AllClaims())
		}
		for _, c := range v.PastClaims {
			if c.State != structs.ClaimStateUnpublishing || c.ModifyIndex != h.index {
				t.Fatalf("%s: exp: unpublishing at %d got: %+v", id, h.index, c)
			}
		}
		evals, _ := h.f.State().EvalsByVolume(nil, id)
		if len(evals) != 1 || evals[0].Status != structs.EvalStatusPending || evals[0].CreateIndex != h.index ||
			evals[0].TriggeredBy != structs.EvalTriggerAllocTerminal {
			t.Fatalf("%s: exp: one pending eval created at %d got: %+v", id, h.index, evals)
		}
	}
	// A late, non-terminal report cannot revive the alloc.
	h.clientUpdate("a1", structs.AllocClientRunning)
	if a := h.alloc("a1"); a.ClientStatus != structs.AllocClientComplete {
		t.Fatalf("exp: a1 stays complete got: %s", a.ClientStatus)
	}
	h.mustRefuse(structs.AllocClientUpdateRequestType, &structs.AllocClientUpdateRequest{NodeID: "n2",
		Allocs: []*structs.AllocClientUpdate{{ID: "a1", ClientStatus: structs.AllocClientRunning}}}, structs.CodePermissionDenied)
}

func TestNodeDown_LosesAllocsAndReleasesClaims(t *testing.T) {
	h := newClaimedHarness(t, structs.AccessModeSingleNodeWriter)
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown})
	if a := h.alloc("a1"); a.ClientStatus != structs.AllocClientLost {
		t.Fatalf("exp: a1 lost got: %s", a.ClientStatus)
	}
	v := h.volume("v1")
	if v.PastClaims["a1"] == nil || v.LiveClaim("a1") != nil {
		t.Fatalf("exp: a1's claim past got: %+v", v.AllClaims())
	}
	claims, _ := h.f.State().ClaimsByNode(nil, "n1")
	if len(claims) != 1 || claims[0].AllocID != "a1" {
		t.Fatalf("claims by node: exp: a1's past claim got: %+v", claims)
	}
	evals, _ := h.f.State().EvalsByStatus(nil, structs.EvalStatusPending)
	if len(evals) != 1 || evals[0].TriggeredBy != structs.EvalTriggerNodeDown {
		t.Fatalf("exp: one pending node-down eval got: %+v", evals)
	}
	p, _ := h.f.State().PluginByID(nil, "hostdir")
	if p.NodesHealthy != 0 || p.Nodes["n1"] == nil || p.Nodes["n1"].Healthy {
		t.Fatalf("exp: plugin instance on down node unhealthy got: %+v", p)
	}
	// Deregistering the node keeps its past claims (it may still have the
	// volume mounted) and removes the plugin with its last instance.
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	if p, _ := h.f.State().PluginByID(nil, "hostdir"); p != nil {
		t.Fatalf("exp: plugin gone with its last node got: %+v", p)
	}
	if v := h.volume("v1"); v.PastClaims["a1"] == nil {
		t.Fatalf("exp: past claim kept after node deregister got: %+v", v.AllClaims())
	}
}

// single-node-multi-writer: any number of writers, on one node; the CSI
// 1.5 modes need the plugin's SINGLE_NODE_MULTI_WRITER capability.
func TestClaim_SingleNodeMultiWriter(t *testing.T) {
	h := mustNewHarness(t)
	for _, id := range []string{"n1", "n2", "old"} {
		n := testNode(id)
		if id != "old" {
			n.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{SingleNodeMultiWriter: true}
		}
		h.registerNode(n)
	}
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeMultiWriter))
	h.placeAllocs(testAlloc("a", "n1", "v1"), testAlloc("b", "n1", "v1"), testAlloc("c", "n2", "v1"), testAlloc("d", "old", "v1"))
	h.mustClaim("v1", "a", "n1", structs.ClaimModeWrite)
	h.mustClaim("v1", "b", "n1", structs.ClaimModeWrite)
	r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "c", NodeID: "n2", Mode: structs.ClaimModeRead})[0]
	if r.Error == nil || r.Error.Code != structs.CodeMaxClaims || !strings.Contains(r.Error.Message, "allows one node") {
		t.Fatalf("claim from a second node exp: max_claims, one node got: %v", r.Error)
	}
	r = h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "d", NodeID: "old", Mode: structs.ClaimModeWrite})[0]
	if r.Error == nil || r.Error.Code != structs.CodeInvalid || !strings.Contains(r.Error.Message, "SINGLE_NODE_MULTI_WRITER") {
		t.Fatalf("claim through a plugin without the capability exp: invalid naming it got: %v", r.Error)
	}
}
