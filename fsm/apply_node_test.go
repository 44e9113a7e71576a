package fsm

import (
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestPlugins_DerivedFromNodeFingerprints(t *testing.T) {
	h := mustNewHarness(t)
	n1 := testNode("n1")
	n1.CSINodePlugins["hostdir"].Provider, n1.CSINodePlugins["hostdir"].ProviderVersion = "claimd.hostdir", "1.0"
	n1.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true, RequiresControllerPlugin: true}}
	h.registerNode(n1)
	n2 := testNode("n2")
	n2.CSINodePlugins["hostdir"].Healthy = false
	n2.CSINodePlugins["other"] = &structs.CSIInfo{PluginID: "other", Healthy: true}
	h.registerNode(n2)

	p, _ := h.f.State().PluginByID(nil, "hostdir")
	if p == nil || p.NodesHealthy != 1 || len(p.Nodes) != 2 || p.ControllersHealthy != 1 || !p.ControllerRequired ||
		p.Provider != "claimd.hostdir" || p.CreateIndex != 1 || p.ModifyIndex != 2 {
		t.Fatalf("exp: hostdir 1/2 nodes healthy, 1 controller, required, created 1, modified 2 got: %+v", p)
	}
	if all, _ := h.f.State().Plugins(nil); len(all) != 2 || all[0].ID != "hostdir" || all[1].ID != "other" {
		t.Fatalf("exp: [hostdir other] got: %+v", all)
	}

	// n2 drops "other" from its fingerprints: the plugin goes with it.
	n2 = testNode("n2")
	h.registerNode(n2)
	if p, _ := h.f.State().PluginByID(nil, "other"); p != nil {
		t.Fatalf("exp: plugin without instances deleted got: %+v", p)
	}
	if p, _ := h.f.State().PluginByID(nil, "hostdir"); p.NodesHealthy != 2 {
		t.Fatalf("exp: 2 healthy node instances got: %+v", p)
	}
	// n1 leaves: its controller and node instance go, the rest stays.
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1"}})
	p, _ = h.f.State().PluginByID(nil, "hostdir")
	if p.Controllers != nil || p.ControllersHealthy != 0 || p.ControllerRequired || len(p.Nodes) != 1 || p.Provider != "" {
		t.Fatalf("exp: only n2's node instance left got: %+v", p)
	}
}

func TestNodeRegister_Rules(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	impostor := testNode("n1")
	impostor.SecretID = "guess"
	h.mustRefuse(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: impostor}, structs.CodePermissionDenied)
	h.mustRefuse(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{}, structs.CodeInvalid)
	h.mustRefuse(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "nope", Status: structs.NodeStatusDown}, structs.CodeNotFound)
	h.mustRefuse(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: "asleep"}, structs.CodeInvalid)
	h.mustRefuse(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"n1", "nope"}}, structs.CodeNotFound)

	// Placing on a down node is unschedulable; back to ready, it works,
	// and the allocs lost while down stay lost.
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("early", "n1", "v1"))
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusDown})
	h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a1", "n1", "v1")}}, structs.CodeUnschedulable)
	h.mustApply(structs.NodeUpdateStatusRequestType, &structs.NodeUpdateStatusRequest{NodeID: "n1", Status: structs.NodeStatusReady})
	h.placeAllocs(testAlloc("a1", "n1", "v1"))
	if a := h.alloc("early"); a.ClientStatus != structs.AllocClientLost {
		t.Fatalf("exp: early stays lost got: %s", a.ClientStatus)
	}
	if n, _ := h.f.State().NodeByID(nil, "n1"); n.CreateIndex != 1 || n.Status != structs.NodeStatusReady {
		t.Fatalf("exp: n1 ready, created at 1 got: %+v", n)
	}
}

func TestAllocPlace_Rules(t *testing.T) {
	h := mustNewHarness(t)
	h.registerNode(testNode("n1"))
	h.registerVolumes(testVolume("v1", structs.AccessModeSingleNodeWriter))
	in := testAlloc("a1", "n1", "v1")
	in.ClientStatus, in.DesiredStatus = structs.AllocClientComplete, structs.AllocDesiredStop
	h.placeAllocs(in)
	a := h.alloc("a1")
	if a.ClientStatus != structs.AllocClientPending || a.DesiredStatus != structs.AllocDesiredRun {
		t.Fatalf("exp: statuses set by the state machine got: %+v", a)
	}
	idx := a.ModifyIndex
	h.placeAllocs(testAlloc("a1", "n1", "v1")) // a retry changes nothing
	if h.alloc("a1").ModifyIndex != idx {
		t.Fatalf("exp: retried placement is a no-op got: modified")
	}
	h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a1", "n1")}}, structs.CodeConflict)
	h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a2", "nope", "v1")}}, structs.CodeNotFound)
	h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a2", "n1", "nope")}}, structs.CodeNotFound)
	h.mustRefuse(structs.AllocPlaceRequestType, &structs.AllocPlaceRequest{Allocs: []*structs.Alloc{testAlloc("a2", "n1"), testAlloc("a2", "n1")}}, structs.CodeInvalid)
	h.mustRefuse(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"a1", "nope"}}, structs.CodeNotFound)
	h.mustApply(structs.AllocStopRequestType, &structs.AllocStopRequest{AllocIDs: []string{"a1"}})
	if a := h.alloc("a1"); a.DesiredStatus != structs.AllocDesiredStop || a.ClientStatus != structs.AllocClientPending {
		t.Fatalf("exp: desired stop, client status untouched got: %+v", a)
	}
}
