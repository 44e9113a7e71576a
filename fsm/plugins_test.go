package fsm

import (
	"bytes"
	"io"
	"os"
	"reflect"
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

// TestPlugins_SnapshotFromBeforeInstanceTable: a snapshot written before
// plugin instances had their own table (testdata, written at bea79c4 from
// pluginSnapshotState) restores to the plugins the live state answers when
// its controllers registered without admission: a snapshot from before
// admissions (issue 38) has every controller pending, so none is sent a
// call until an operator admits it. The restored plugins then keep being
// summarised right, admissions included.
func TestPlugins_SnapshotFromBeforeInstanceTable(t *testing.T) {
	old, err := os.ReadFile("testdata/plugins-before-instance-table.snap")
	if err != nil {
		t.Fatal(err)
	}
	h := pluginSnapshotState(t, (*harness).registerPendingNode)
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatalf("exp: restore got: %v", err)
	}
	want, _ := h.f.State().Plugins(nil)
	got, _ := restored.State().Plugins(nil)
	if len(want) != 2 || !reflect.DeepEqual(want, got) {
		t.Fatalf("exp: restored plugins %s got: %s", dumpPlugins(want), dumpPlugins(got))
	}
	if a, b := mustSnapshotBytes(t, h.f), mustSnapshotBytes(t, restored); !bytes.Equal(a, b) {
		t.Fatalf("exp: the restored state snapshots to the live state's bytes got: %d and %d bytes", len(a), len(b))
	}
	// The controllers are pending: none counts as healthy, and the
	// provider comes from the node instances (n1's, with its version).
	if p := got[0]; p.ID != "hostdir" || p.NodesHealthy != 2 || p.ControllersHealthy != 0 || p.ControllersPending != 2 ||
		p.Provider != "hostdir.claimd.io" || p.ProviderVersion != "1.0.n1" || !p.ControllerRequired || p.ControllerCapabilities != nil {
		t.Fatalf("exp: hostdir with 2 healthy nodes, 2 pending controllers, provider from n1's node got: %s", dumpPlugins(got))
	}

	// n10's controller is admitted, then n1 leaves, on the restored store
	// as on the live one: the summary is kept up from the restored rows.
	for _, f := range []*FSM{h.f, restored} {
		r := &harness{t: t, f: f, index: h.index}
		r.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "n10"})
		r.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
		p, _ := f.State().PluginByID(nil, "hostdir")
		if p.ControllersHealthy != 1 || p.ControllersPending != 0 || p.NodesHealthy != 1 || len(p.Nodes) != 2 || p.Nodes["n1"] != nil ||
			p.ControllerCapabilities == nil || p.ProviderVersion != "" {
			t.Fatalf("exp: hostdir with n10's admitted healthy controller as the source, 2 nodes (1 healthy) got: %s", dumpPlugins([]*structs.Plugin{p}))
		}
	}
	want, _ = h.f.State().Plugins(nil)
	got, _ = restored.State().Plugins(nil)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("exp: the same plugins after the same entries got: %s and %s", dumpPlugins(want), dumpPlugins(got))
	}
}

// pluginSnapshotState builds a state with two plugins over three nodes: a
// controller and node plugin with capabilities and a provider, one node
// down, and a second plugin on one node only.
func pluginSnapshotState(t testing.TB, register func(*harness, *structs.Node)) *harness {
	h := mustNewHarness(t)
	for _, id := range []string{"n1", "n10", "n2"} {
		n := testNode(id)
		n.CSINodePlugins["hostdir"].Provider = "hostdir.claimd.io"
		n.CSINodePlugins["hostdir"].ProviderVersion = "1.0." + id
		n.CSINodePlugins["hostdir"].RequiresControllerPlugin = true
		n.CSINodePlugins["hostdir"].AccessibleTopology = map[string]string{"zone": id}
		n.CSINodePlugins["hostdir"].NodeCapabilities = &structs.CSINodeCapabilities{StageUnstageVolume: true}
		if id != "n2" {
			n.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
				Provider: "hostdir.claimd.io", RequiresControllerPlugin: true,
				ControllerCapabilities: &structs.CSIControllerCapabilities{PublishUnpublish: true}}}
		}
		if id == "n10" {
			n.CSINodePlugins["other"] = &structs.CSIInfo{PluginID: "other", Healthy: true, MaxVolumes: 2}
		}
		register(h, n)
	}
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n2", Status: structs.NodeStatusDown})
	return h
}
