package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/claimd/claimd/structs"
)

// newFenceHarness: node n1 holds a write claim of a1 on v1, registered with
// the given node_lost policy.
func newFenceHarness(t *testing.T, policy structs.NodeLostPolicy) *harness {
	t.Helper()
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	v := testVolume("v1", structs.AccessModeSingleNodeWriter)
	v.NodeLost = policy
	h.registerVolumes(v)
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	return h
}

func (h *harness) markDown(node string) {
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: node, Status: structs.NodeStatusDown})
}

var leaseRanOut = time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)

func fenced(state structs.ClaimState) *structs.ClaimCheckpointRequest {
	return &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: state,
		ExpectedState: structs.ClaimStateUnpublishing, Fenced: true, LeaseExpiredAt: leaseRanOut}
}

func TestNodeLost_ClaimRecordsThePolicyItWasTakenUnder(t *testing.T) {
	for _, p := range []structs.NodeLostPolicy{"", structs.NodeLostWait, structs.NodeLostFence, structs.NodeLostManual} {
		h := newFenceHarness(t, p)
		if got := h.volume("v1").WriteClaims["a1"].NodeLost; got != p.OrWait() {
			t.Fatalf("policy %q: exp: claim records %q got: %q", p, p.OrWait(), got)
		}
	}
	h := mustNewHarness(t)
	v := testVolume("v1", structs.AccessModeSingleNodeWriter)
	v.NodeLost = "sometimes"
	err := h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{v}}, structs.CodeInvalid)
	if err == nil || !strings.Contains(err.Error(), "node_lost") {
		t.Fatalf("exp: refusal naming node_lost got: %v", err)
	}
}

func TestNodeLost_FencedCheckpointSkipsTheNodeDetachOnlyUnderFence(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostFence)
	// Live claim, node ready: refused.
	req := fenced(structs.ClaimStateNodeDetached)
	req.ExpectedState = ""
	h.mustRefuse(structs.ClaimCheckpointRequestType, req, structs.CodeConflict)
	h.markDown("n1") // a1 lost, its claim past
	if c := h.volume("v1").PastClaims["a1"]; c == nil || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("exp: past unpublishing claim got: %+v", h.volume("v1"))
	}
	// Without a lease time: refused, naming the field.
	noTime := fenced(structs.ClaimStateNodeDetached)
	noTime.LeaseExpiredAt = time.Time{}
	if err := h.mustRefuse(structs.ClaimCheckpointRequestType, noTime, structs.CodeInvalid); !strings.Contains(err.Error(), "lease_expired_at") {
		t.Fatalf("exp: error naming lease_expired_at got: %v", err)
	}
	c := mustCheckpoint(t, h, fenced(structs.ClaimStateNodeDetached))
	if !c.Fenced || !c.NodeDetachSkipped || !c.LeaseExpiredAt.Equal(leaseRanOut) || c.ReleasePath() != structs.ReleasePathFenced {
		t.Fatalf("exp: fenced claim with its lease time got: %+v", c)
	}
	// A retried fence is a no-op (S7); a fence to a later state is refused:
	// nothing is left to fence.
	again := fenced(structs.ClaimStateNodeDetached)
	again.ExpectedState = ""
	if c2 := mustCheckpoint(t, h, again); c2.ModifyIndex != c.ModifyIndex {
		t.Fatalf("exp: retried fence changes nothing got: %+v", c2)
	}
	later := fenced(structs.ClaimStateFreed)
	later.ExpectedState = ""
	h.mustRefuse(structs.ClaimCheckpointRequestType, later, structs.CodeConflict)
	// The controller detach follows as usual, and the released claim keeps
	// its path.
	mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1", State: structs.ClaimStateFreed})
	v := h.volume("v1")
	if len(v.Released) != 1 || v.Released[0].ReleasePath() != structs.ReleasePathFenced || v.HasClaims() {
		t.Fatalf("exp: freed, history says fenced got: %+v", v)
	}
}

func TestNodeLost_FenceRefusedUnlessClaimAndVolumeSayFenceAndTheNodeIsDown(t *testing.T) {
	for _, tc := range []struct {
		name        string
		claimed, ow structs.NodeLostPolicy // policy at claim time, then re-registered
		down        bool
	}{
		{"wait", structs.NodeLostWait, structs.NodeLostWait, true},
		{"manual", structs.NodeLostManual, structs.NodeLostManual, true},
		{"fence then wait", structs.NodeLostFence, structs.NodeLostWait, true},
		{"wait then fence: the node did not fence it", structs.NodeLostWait, structs.NodeLostFence, true},
		{"node ready", structs.NodeLostFence, structs.NodeLostFence, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFenceHarness(t, tc.claimed)
			v := testVolume("v1", structs.AccessModeSingleNodeWriter)
			v.NodeLost = tc.ow
			h.registerVolumes(v)
			if tc.down {
				h.markDown("n1")
			} else {
				h.release("v1", "a1")
			}
			before := h.volume("v1")
			h.mustRefuse(structs.ClaimCheckpointRequestType, fenced(structs.ClaimStateNodeDetached), structs.CodeConflict)
			if after := h.volume("v1"); after.ModifyIndex != before.ModifyIndex {
				t.Fatalf("exp: refused fence changes nothing got: modify index %d → %d", before.ModifyIndex, after.ModifyIndex)
			}
		})
	}
}

func TestNodeLost_OperatorGoAheadIsRecordedInPlace(t *testing.T) {
	h := newFenceHarness(t, structs.NodeLostManual)
	h.markDown("n1")
	c := mustCheckpoint(t, h, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateUnpublishing, ExpectedState: structs.ClaimStateUnpublishing, OperatorReleased: true})
	if !c.OperatorReleased || c.State != structs.ClaimStateUnpublishing {
		t.Fatalf("exp: go-ahead recorded, state unchanged got: %+v", c)
	}
	// A live claim takes no go-ahead (it is not being released).
	h2 := newFenceHarness(t, structs.NodeLostManual)
	c2 := mustCheckpoint(t, h2, &structs.ClaimCheckpointRequest{VolumeID: "v1", AllocID: "a1",
		State: structs.ClaimStateTaken, OperatorReleased: true})
	if c2.OperatorReleased {
		t.Fatalf("exp: live claim unchanged got: %+v", c2)
	}
}

func TestNodeEligibility_IneligibleNodeTakesNoNewClaimsAndKeepsItAcrossRegistration(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"), testAlloc("a2", "n1", "v1"))
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	h.mustRefuse(structs.NodeEligibilityRequestType, &structs.NodeEligibilityRequest{NodeID: "n1", Eligibility: "maybe"}, structs.CodeInvalid)
	h.mustRefuse(structs.NodeEligibilityRequestType, &structs.NodeEligibilityRequest{NodeID: "nope", Eligibility: structs.NodeIneligible}, structs.CodeNotFound)
	h.mustApply(structs.NodeEligibilityRequestType, &structs.NodeEligibilityRequest{NodeID: "n1", Eligibility: structs.NodeIneligible})
	// The agent registers again (new fingerprints): still ineligible.
	h.registerNode(testNode("n1"))
	res := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a2", NodeID: "n1", Mode: structs.ClaimModeWrite})
	if res[0].Error == nil || res[0].Error.Code != structs.CodeUnschedulable {
		t.Fatalf("exp: new claim on an ineligible node unschedulable got: %+v", res[0])
	}
	// The claim it holds answers a re-claim as before.
	if r := h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite); r.Claim == nil || r.New {
		t.Fatalf("exp: re-claim answered got: %+v", r)
	}
	h.mustApply(structs.NodeEligibilityRequestType, &structs.NodeEligibilityRequest{NodeID: "n1", Eligibility: structs.NodeEligible})
	h.mustClaim("v1", "a2", "n1", structs.ClaimModeWrite)
}

func TestNodeRegister_KeepsTheLastFenceReportUntilANewOne(t *testing.T) {
	h := mustNewHarness(t)
	n := testNode("n1")
	n.Lease = 5 * time.Second
	n.LastFence = &structs.FenceReport{At: leaseRanOut, Volumes: []*structs.FencedVolume{{AllocID: "a1", VolumeID: "v1", HookOK: true, Unmounted: true}}}
	h.registerNode(n)
	h.registerNode(testNode("n1"))
	got, _ := h.f.State().NodeByID(nil, "n1")
	if got.LastFence == nil || len(got.LastFence.Volumes) != 1 || got.Lease != 0 {
		t.Fatalf("exp: report kept, lease as registered got: %+v", got)
	}
	bad := testNode("n1")
	bad.Lease = time.Second
	if err := h.mustRefuse(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: bad}, structs.CodeInvalid); !strings.Contains(err.Error(), "lease") {
		t.Fatalf("exp: refusal naming lease got: %v", err)
	}
}
