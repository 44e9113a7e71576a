package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/claimd/claimd/structs"
)

// TestPlugins_CarryCapabilitiesAndNodeFacts: what nodes fingerprint about a
// plugin's capabilities reaches the plugin table, taken from the lowest
// node ID, and per-node facts (max volumes, topology) stay per instance.
func TestPlugins_CarryCapabilitiesAndNodeFacts(t *testing.T) {
	h := mustNewHarness(t)
	n1 := testNode("n1")
	n1.CSINodePlugins["hostdir"].MaxVolumes = 3
	n1.CSINodePlugins["hostdir"].AccessibleTopology = map[string]string{"zone": "a"}
	n1.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{StageUnstageVolume: true, ExpandVolume: true}
	n1.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
		ControllerCapabilities: &structs.CSIControllerCapabilities{PublishUnpublish: true, CreateDeleteVolume: true, GetCapacity: true}}}
	h.registerNode(n1)
	n2 := testNode("n2")
	n2.CSINodePlugins["hostdir"].AccessibleTopology = map[string]string{"zone": "b"}
	n2.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{GetVolumeStats: true}
	h.registerNode(n2)

	p, _ := h.f.State().PluginByID(nil, "hostdir")
	if p == nil || p.ControllerCapabilities == nil || !p.ControllerCapabilities.CreateDeleteVolume ||
		!p.ControllerCapabilities.GetCapacity || p.ControllerCapabilities.ExpandVolume {
		t.Fatalf("exp: controller capabilities create_delete_volume, get_capacity, publish got: %+v", p)
	}
	if got := p.NodeCapabilities.Names(); len(got) != 2 || got[0] != "stage_unstage_volume" || got[1] != "expand_volume" {
		t.Fatalf("exp: node capabilities from n1 (lowest ID) [stage_unstage_volume expand_volume] got: %v", got)
	}
	if n := p.Nodes["n1"]; n.MaxVolumes != 3 || n.AccessibleTopology["zone"] != "a" {
		t.Fatalf("exp: n1 instance max 3 zone=a got: %+v", n)
	}
	if n := p.Nodes["n2"]; n.MaxVolumes != 0 || n.AccessibleTopology["zone"] != "b" {
		t.Fatalf("exp: n2 instance unlimited zone=b got: %+v", n)
	}

	// The table is derived: n1 leaving takes its controller's capabilities
	// with it and n2's node capabilities take over.
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	p, _ = h.f.State().PluginByID(nil, "hostdir")
	if p.ControllerCapabilities != nil || p.NodeCapabilities == nil || !p.NodeCapabilities.GetVolumeStats {
		t.Fatalf("exp: no controller capabilities, n2's node capabilities got: %+v / %+v", p.ControllerCapabilities, p.NodeCapabilities)
	}

	// Snapshot and restore keep the new fields (msgpack by field name).
	h2 := mustNewHarness(t)
	if err := h2.f.Restore(io.NopCloser(bytes.NewReader(mustSnapshotBytes(t, h.f)))); err != nil {
		t.Fatalf("exp: restore got: %v", err)
	}
	n, _ := h2.f.State().NodeByID(nil, "n2")
	if n == nil || n.CSINodePlugins["hostdir"].AccessibleTopology["zone"] != "b" || !n.CSINodePlugins["hostdir"].NodeCapabilities.GetVolumeStats {
		t.Fatalf("exp: n2 fingerprint with topology and capabilities after restore got: %+v", n)
	}
}
