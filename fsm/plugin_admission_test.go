package fsm

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

// ctrlNode is a node with a hostdir node plugin and a healthy hostdir
// controller that reports provider and controller capabilities.
func ctrlNode(id, provider string, caps *structs.CSIControllerCapabilities) *structs.Node {
	n := testNode(id)
	n.CSINodePlugins["hostdir"].RequiresControllerPlugin = true
	n.CSIControllerPlugins = map[string]*structs.CSIInfo{"hostdir": {PluginID: "hostdir", Healthy: true,
		Provider: provider, ProviderVersion: "1", RequiresControllerPlugin: true, ControllerCapabilities: caps}}
	return n
}

func (h *harness) plugin(id string) *structs.Plugin {
	h.t.Helper()
	p, err := h.f.State().PluginByID(nil, id)
	if err != nil || p == nil {
		h.t.Fatalf("plugin %s: exp: found got: %v, %v", id, p, err)
	}
	return p
}

// TestAdmission_PendingUntilAdmittedAndAfterRevoke: a controller that
// registered without admission counts as pending, not healthy; an
// admission makes it healthy, a revoke pending again. The claim check of
// the state machine is the same either way (a server that predates
// admissions must take the same claims during a rolling upgrade): only
// the controller call is refused to a pending controller (attachment).
func TestAdmission_PendingUntilAdmittedAndAfterRevoke(t *testing.T) {
	h := mustNewHarness(t)
	h.registerPendingNode(ctrlNode("c1", "hostdir.claimd", &structs.CSIControllerCapabilities{PublishUnpublish: true}))
	p := h.plugin("hostdir")
	if p.ControllersHealthy != 0 || p.ControllersPending != 1 || p.ControllerAdmitted("c1") ||
		!reflect.DeepEqual(p.PendingControllers(), []string{"c1"}) {
		t.Fatalf("exp: c1 pending, 0 healthy got: %+v", p)
	}
	h.registerVolumes(testVolume("v1", structs.AccessModeMultiNodeMultiWriter))
	h.placeAllocs(testAlloc("a1", "c1", "v1"))
	h.mustClaim("v1", "a1", "c1", structs.ClaimModeWrite)

	h.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c1"})
	admittedAt := h.index
	p = h.plugin("hostdir")
	a := p.Admissions["c1"]
	if p.ControllersHealthy != 1 || p.ControllersPending != 0 || a == nil || a.Source != structs.AdmittedByOperator ||
		a.CreateIndex != admittedAt || p.ModifyIndex != admittedAt {
		t.Fatalf("exp: c1 admitted by the operator at %d, 1 healthy got: %+v (admission %+v)", admittedAt, p, a)
	}
	// Admitting again changes nothing, not even the index.
	before := mustSnapshotBytes(t, h.f)
	h.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c1"})
	if !bytes.Equal(before, mustSnapshotBytes(t, h.f)) {
		t.Fatal("exp: a second admission changes nothing got: a changed state")
	}
	// The admission outlives the node's controller stopping and coming back.
	down := ctrlNode("c1", "hostdir.claimd", nil)
	down.CSIControllerPlugins["hostdir"].Healthy = false
	h.registerPendingNode(down)
	h.registerPendingNode(ctrlNode("c1", "hostdir.claimd", nil))
	if p = h.plugin("hostdir"); p.ControllersHealthy != 1 || !p.ControllerAdmitted("c1") {
		t.Fatalf("exp: still admitted after a re-register got: %+v", p)
	}

	h.mustApply(structs.PluginRevokeControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c1"})
	if p = h.plugin("hostdir"); p.ControllersHealthy != 0 || p.ControllersPending != 1 || len(p.Admissions) != 0 {
		t.Fatalf("exp: c1 pending again after the revoke got: %+v", p)
	}
	if all, _ := h.f.State().ControllerAdmissions(nil); len(all) != 0 {
		t.Fatalf("exp: no admissions left got: %+v", all)
	}
}

// TestAdmission_BadRequestsChangeNothing: admitting what no node runs, or
// revoking what was never admitted, is refused with the field and the
// problem named, and changes nothing.
func TestAdmission_BadRequestsChangeNothing(t *testing.T) {
	h := mustNewHarness(t)
	h.registerPendingNode(ctrlNode("c1", "p", nil))
	h.registerPendingNode(testNode("n1"))
	for _, c := range []struct {
		mt   structs.MessageType
		req  structs.PluginAdmissionRequest
		code structs.ErrorCode
		want string
	}{
		{structs.PluginAdmitControllerRequestType, structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "nope"}, structs.CodeNotFound, "nope"},
		{structs.PluginAdmitControllerRequestType, structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "n1"}, structs.CodeInvalid, "plugin_id"},
		{structs.PluginAdmitControllerRequestType, structs.PluginAdmissionRequest{PluginID: "other", NodeID: "c1"}, structs.CodeInvalid, "does not run a controller"},
		{structs.PluginAdmitControllerRequestType, structs.PluginAdmissionRequest{PluginID: "", NodeID: "c1"}, structs.CodeInvalid, "plugin_id"},
		{structs.PluginAdmitControllerRequestType, structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "bad\x1bid"}, structs.CodeInvalid, "node_id"},
		{structs.PluginRevokeControllerRequestType, structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c1"}, structs.CodeNotFound, "not admitted"},
	} {
		req := c.req
		err := h.mustRefuse(c.mt, &req, c.code)
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: exp: error naming %q got: %v", c.req, c.want, err)
		}
	}
}

// TestAdmission_SummaryFromAdmittedControllersOnly: a pending controller
// that sorts first and reports another provider and no capabilities, and a
// node instance that disagrees too, leave the plugin's provider and
// controller capabilities as the admitted controller reports them. Once
// admitted, the first controller in key order is the source again.
func TestAdmission_SummaryFromAdmittedControllersOnly(t *testing.T) {
	h := mustNewHarness(t)
	good := &structs.CSIControllerCapabilities{PublishUnpublish: true, CreateDeleteSnapshot: true, ExpandVolume: true}
	h.registerNode(ctrlNode("m1", "hostdir.claimd", good))
	want := h.plugin("hostdir")

	evil := ctrlNode("a0", "evil.example", &structs.CSIControllerCapabilities{PublishUnpublish: true})
	evil.CSINodePlugins["hostdir"].Provider = "evil.example"
	h.registerPendingNode(evil)
	p := h.plugin("hostdir")
	if p.Provider != "hostdir.claimd" || !reflect.DeepEqual(p.ControllerCapabilities, want.ControllerCapabilities) ||
		p.ControllersHealthy != 1 || p.ControllersPending != 1 {
		t.Fatalf("exp: provider and capabilities from m1 (admitted), a0 pending got: %s", dumpPlugins([]*structs.Plugin{p}))
	}

	// Without any admitted controller, the provider comes from the node
	// instances and there are no controller capabilities.
	h.mustApply(structs.PluginRevokeControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "m1"})
	if p = h.plugin("hostdir"); p.Provider != "evil.example" || p.ControllerCapabilities != nil || p.ControllersHealthy != 0 {
		t.Fatalf("exp: provider from a0's node instance (first node), no controller capabilities got: %s", dumpPlugins([]*structs.Plugin{p}))
	}
	h.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "m1"})
	if p = h.plugin("hostdir"); p.Provider != "hostdir.claimd" || !reflect.DeepEqual(p.ControllerCapabilities, want.ControllerCapabilities) {
		t.Fatalf("exp: m1 the source again got: %s", dumpPlugins([]*structs.Plugin{p}))
	}

	// An operator's admission makes a0 a controller like any other: it
	// sorts first, so it is the source.
	h.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "a0"})
	if p = h.plugin("hostdir"); p.Provider != "evil.example" || p.ControllerCapabilities.ExpandVolume || p.ControllersHealthy != 2 {
		t.Fatalf("exp: a0 admitted and first got: %s", dumpPlugins([]*structs.Plugin{p}))
	}
}

// TestAdmission_AutoOnRegisterAndDroppedOnDeregister: a registration the
// server marked for automatic admission admits the node's controllers, with
// the source recorded; deregistering the node drops its admissions, so
// the ID registered again without the mark is pending.
func TestAdmission_AutoOnRegisterAndDroppedOnDeregister(t *testing.T) {
	h := mustNewHarness(t)
	n := ctrlNode("dev", "hostdir.claimd", nil)
	n.CSIControllerPlugins["second"] = &structs.CSIInfo{PluginID: "second", Healthy: true}
	h.mustApply(structs.NodeRegisterRequestType, &structs.NodeRegisterRequest{Node: n, AutoAdmit: structs.AdmittedByServerCert})
	for _, id := range []string{"hostdir", "second"} {
		p := h.plugin(id)
		if a := p.Admissions["dev"]; a == nil || a.Source != structs.AdmittedByServerCert || p.ControllersHealthy != 1 {
			t.Fatalf("%s: exp: dev admitted by its server certificate got: %+v", id, p)
		}
	}
	h.mustApply(structs.NodeDeregisterRequestType, &structs.NodeDeregisterRequest{NodeIDs: []string{"dev"}})
	if all, _ := h.f.State().ControllerAdmissions(nil); len(all) != 0 {
		t.Fatalf("exp: the node's admissions dropped got: %+v", all)
	}
	h.registerPendingNode(ctrlNode("dev", "hostdir.claimd", nil))
	if p := h.plugin("hostdir"); p.ControllersPending != 1 || p.ControllersHealthy != 0 {
		t.Fatalf("exp: pending after registering again got: %+v", p)
	}
}

// TestAdmission_SnapshotRoundTripAndDigest: admissions are in the snapshot
// (and so in the state digest): a restore gives the same plugins, the same
// admissions and the same bytes, and an admission changes the digest.
func TestAdmission_SnapshotRoundTripAndDigest(t *testing.T) {
	h := mustNewHarness(t)
	h.registerPendingNode(ctrlNode("c1", "hostdir.claimd", &structs.CSIControllerCapabilities{PublishUnpublish: true}))
	h.registerPendingNode(ctrlNode("c2", "other.example", nil))
	before, err := h.f.State().Digest()
	if err != nil {
		t.Fatal(err)
	}
	h.mustApply(structs.PluginAdmitControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c2"})
	after, err := h.f.State().Digest()
	if err != nil {
		t.Fatal(err)
	}
	if before.SHA256 == after.SHA256 {
		t.Fatal("exp: an admission changes the state digest got: the same digest")
	}

	snap := mustSnapshotBytes(t, h.f)
	restored := New(nil)
	if err := restored.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("exp: restore got: %v", err)
	}
	want, _ := h.f.State().Plugins(nil)
	got, _ := restored.State().Plugins(nil)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("exp: restored plugins %s got: %s", dumpPlugins(want), dumpPlugins(got))
	}
	if p := got[0]; p.ControllersHealthy != 1 || p.ControllersPending != 1 || p.Provider != "other.example" || !p.ControllerAdmitted("c2") {
		t.Fatalf("exp: c2 admitted (and the source), c1 pending got: %s", dumpPlugins(got))
	}
	wa, _ := h.f.State().ControllerAdmissions(nil)
	ga, _ := restored.State().ControllerAdmissions(nil)
	if len(ga) != 1 || !reflect.DeepEqual(wa, ga) {
		t.Fatalf("exp: the admission restored got: %+v", ga)
	}
	if again := mustSnapshotBytes(t, restored); !bytes.Equal(snap, again) {
		t.Fatalf("exp: the restored state snapshots to the same bytes got: %d, was %d", len(again), len(snap))
	}
	// The restored store keeps the summary up: revoking on it matches.
	for _, f := range []*FSM{h.f, restored} {
		r := &harness{t: t, f: f, index: h.index}
		r.mustApply(structs.PluginRevokeControllerRequestType, &structs.PluginAdmissionRequest{PluginID: "hostdir", NodeID: "c2"})
	}
	want, _ = h.f.State().Plugins(nil)
	got, _ = restored.State().Plugins(nil)
	if !reflect.DeepEqual(want, got) || got[0].ControllersPending != 2 {
		t.Fatalf("exp: both pending, the same on both got: %s and %s", dumpPlugins(want), dumpPlugins(got))
	}
}
