package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

// newLimitHarness: node n1 runs hostdir with max_volumes_per_node 2 and a
// plugin "other" without a limit; n2 runs hostdir with no limit. Volumes
// v1..v4 are hostdir multi-node-multi-writer (so claims never collide on
// the access-mode table and only the node limit is in play), o1 is other's.
// Alloc "aN" on n1 requests every volume; "b1" on n1 and "c1" on n2 too.
func newLimitHarness(t *testing.T) *harness {
	h := mustNewHarness(t)
	n1 := testNode("n1")
	n1.CSINodePlugins["hostdir"].MaxVolumes = 2
	n1.CSINodePlugins["other"] = &structs.CSIInfo{PluginID: "other", Healthy: true}
	h.registerNode(n1)
	h.registerNode(testNode("n2"))
	var vols []*structs.Volume
	ids := []string{"v1", "v2", "v3", "v4", "o1"}
	for _, id := range ids {
		v := testVolume(id, structs.AccessModeMultiNodeMultiWriter)
		if id == "o1" {
			v.PluginID = "other"
		}
		vols = append(vols, v)
	}
	h.registerVolumes(vols...)
	h.placeAllocs(testAlloc("a1", "n1", ids...), testAlloc("a2", "n1", ids...), testAlloc("a3", "n1", ids...),
		testAlloc("b1", "n1", ids...), testAlloc("c1", "n2", ids...))
	return h
}

func checkpointSteps(t *testing.T, h *harness, vol, alloc string, states ...structs.ClaimState) {
	t.Helper()
	for _, st := range states {
		if err, isErr := h.checkpoint(&structs.ClaimCheckpointRequest{VolumeID: vol, AllocID: alloc, State: st}).(error); isErr {
			t.Fatalf("checkpoint %s %s %s: exp: success got: %v", vol, alloc, st, err)
		}
	}
}

func TestClaim_NodeVolumeLimit(t *testing.T) {
	type step struct{ vol, alloc, node string }
	for _, tc := range []struct {
		name  string
		setup func(h *harness)
		claim step
		want  error // nil: a new claim
	}{
		{"under the limit", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
		}, step{"v2", "a2", "n1"}, nil},
		{"at the limit, a volume the node does not hold", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("v2", "a2", "n1", structs.ClaimModeWrite)
		}, step{"v3", "a3", "n1"}, structs.ErrMaxClaims},
		{"at the limit, a volume the node already holds shares the attachment", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("v2", "a2", "n1", structs.ClaimModeWrite)
		}, step{"v1", "b1", "n1"}, nil},
		{"at the limit by a past claim still attached", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("v2", "a2", "n1", structs.ClaimModeWrite)
			h.release("v1", "a1")
			checkpointSteps(t, h, "v1", "a1", structs.ClaimStateNodeDetached)
		}, step{"v3", "a3", "n1"}, structs.ErrMaxClaims},
		{"a freed past claim no longer counts", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("v2", "a2", "n1", structs.ClaimModeWrite)
			h.release("v1", "a1")
			checkpointSteps(t, h, "v1", "a1", structs.ClaimStateNodeDetached, structs.ClaimStateFreed)
		}, step{"v3", "a3", "n1"}, nil},
		{"another plugin's volumes do not count", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("o1", "a2", "n1", structs.ClaimModeWrite)
		}, step{"v2", "a3", "n1"}, nil},
		{"another node's volumes do not count", func(h *harness) {
			h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
			h.mustClaim("v2", "c1", "n2", structs.ClaimModeWrite)
		}, step{"v3", "a3", "n1"}, nil},
		{"no limit on the node", func(h *harness) {
			h.mustClaim("v1", "c1", "n2", structs.ClaimModeWrite)
			h.mustClaim("v2", "c1", "n2", structs.ClaimModeWrite)
		}, step{"v3", "c1", "n2"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newLimitHarness(t)
			tc.setup(h)
			before := h.volume(tc.claim.vol)
			r := h.claims(&structs.VolumeClaimRequest{VolumeID: tc.claim.vol, AllocID: tc.claim.alloc,
				NodeID: tc.claim.node, Mode: structs.ClaimModeWrite})[0]
			if tc.want == nil {
				if r.Err() != nil || !r.New {
					t.Fatalf("exp: a new claim got: %+v (%v)", r, r.Err())
				}
				return
			}
			if !errors.Is(r.Err(), tc.want) || !structs.IsRetryable(r.Err()) {
				t.Fatalf("exp: retryable %v got: %v", tc.want, r.Err())
			}
			for _, part := range []string{`node "n1"`, `plugin "hostdir"`, "is 2", `volume "v3"`} {
				if !strings.Contains(r.Err().Error(), part) {
					t.Fatalf("exp: refusal naming %s got: %v", part, r.Err())
				}
			}
			if after := h.volume(tc.claim.vol); after.ModifyIndex != before.ModifyIndex {
				t.Fatalf("exp: refused claim leaves the volume unchanged got: index %d -> %d", before.ModifyIndex, after.ModifyIndex)
			}
		})
	}
}

// TestClaim_NodeVolumeLimitWithinOneBatch: items of a batch see the
// earlier items' claims, so two new volumes in one entry cannot both take
// a node's last slot.
func TestClaim_NodeVolumeLimitWithinOneBatch(t *testing.T) {
	h := newLimitHarness(t)
	h.mustClaim("v1", "a1", "n1", structs.ClaimModeWrite)
	rs := h.claims(
		&structs.VolumeClaimRequest{VolumeID: "v2", AllocID: "a2", NodeID: "n1", Mode: structs.ClaimModeWrite},
		&structs.VolumeClaimRequest{VolumeID: "v3", AllocID: "a3", NodeID: "n1", Mode: structs.ClaimModeWrite},
		&structs.VolumeClaimRequest{VolumeID: "v2", AllocID: "b1", NodeID: "n1", Mode: structs.ClaimModeWrite},
	)
	if rs[0].Err() != nil || !errors.Is(rs[1].Err(), structs.ErrMaxClaims) || rs[2].Err() != nil {
		t.Fatalf("exp: [ok max_claims ok] got: [%v %v %v]", rs[0].Err(), rs[1].Err(), rs[2].Err())
	}
}
