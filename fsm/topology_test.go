package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

// TestClaim_Topology: a volume with an accessible topology is claimable
// only from nodes whose plugin segments match one of its entries; the
// refusal is unschedulable, marked permanent, and names the volume, the
// node and both sides' segments.
func TestClaim_Topology(t *testing.T) {
	for _, tc := range []struct {
		name     string
		volTopo  []map[string]string
		nodeTopo map[string]string
		allowed  bool
	}{
		{"no volume topology: any node", nil, nil, true},
		{"matching entry", []map[string]string{{"zone": "b"}, {"zone": "a"}}, map[string]string{"zone": "a", "rack": "r1"}, true},
		{"entry needs every segment", []map[string]string{{"zone": "a", "rack": "r2"}}, map[string]string{"zone": "a", "rack": "r1"}, false},
		{"other zone", []map[string]string{{"zone": "a"}}, map[string]string{"zone": "b"}, false},
		{"node reports no topology", []map[string]string{{"zone": "a"}}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mustNewHarness(t)
			n := testNode("n1")
			n.CSINodePlugins["hostdir"].AccessibleTopology = tc.nodeTopo
			h.registerNode(n)
			v := testVolume("v1", structs.AccessModeSingleNodeWriter)
			v.AccessibleTopology = tc.volTopo
			h.registerVolumes(v)
			h.placeAllocs(testAlloc("a1", "n1", "v1"))
			before := h.volume("v1")
			r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite})[0]
			if tc.allowed {
				if r.Err() != nil || !r.New {
					t.Fatalf("exp: a new claim got: %v", r.Err())
				}
				return
			}
			err := r.Err()
			if !errors.Is(err, structs.ErrUnschedulable) || !structs.IsTopologyRefusal(err) {
				t.Fatalf("exp: unschedulable topology refusal got: %v", err)
			}
			for _, part := range []string{`volume "v1"`, `node "n1"`, `plugin "hostdir"`, v.TopologyText()} {
				if !strings.Contains(err.Error(), part) {
					t.Fatalf("exp: refusal naming %s got: %v", part, err)
				}
			}
			if after := h.volume("v1"); after.ModifyIndex != before.ModifyIndex || after.HasClaims() {
				t.Fatalf("exp: volume unchanged got: %+v", after)
			}
		})
	}
}

// TestClaim_OtherUnschedulableIsNotTopology: a down node is unschedulable
// too, but passes when the node returns, so it must not carry the
// permanent marker.
func TestClaim_OtherUnschedulableIsNotTopology(t *testing.T) {
	h := mustNewHarness(t)
	n := testNode("n1")
	n.CSINodePlugins["hostdir"].Healthy = false
	h.registerNode(n)
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	r := h.claims(&structs.VolumeClaimRequest{VolumeID: "v1", AllocID: "a1", NodeID: "n1", Mode: structs.ClaimModeWrite})[0]
	if !errors.Is(r.Err(), structs.ErrUnschedulable) || structs.IsTopologyRefusal(r.Err()) {
		t.Fatalf("exp: unschedulable without the topology marker got: %v", r.Err())
	}
}

func TestVolumeRegister_BadTopologyNamesField(t *testing.T) {
	h := mustNewHarness(t)
	v := testVolume("v1", structs.AccessModeSingleNodeWriter)
	v.AccessibleTopology = []map[string]string{{"zone": "a"}, {}}
	err := h.mustRefuse(structs.VolumeRegisterRequestType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{v}}, structs.CodeInvalid)
	if !strings.Contains(err.Error(), "volumes[0]: accessible_topology[1]:") {
		t.Fatalf("exp: error naming volumes[0]: accessible_topology[1] got: %v", err)
	}
	if got := h.volume("v1"); got != nil {
		t.Fatalf("exp: nothing registered got: %+v", got)
	}
}
