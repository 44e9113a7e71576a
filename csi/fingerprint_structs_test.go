package csi

import (
	"slices"
	"testing"

	"github.com/claimd/claimd/csi/hostdir"
)

// TestFingerprint_CapabilitiesAndNodeFactsReachRegistration fingerprints a
// real monolith plugin and checks that what the node registers carries its
// controller and node capabilities and its NodeGetInfo facts. Only
// capabilities hostdir advertises today are required, so the plugin may
// learn more without breaking this test.
func TestFingerprint_CapabilitiesAndNodeFactsReachRegistration(t *testing.T) {
	tp := mustNewPlugin(t, func(c *hostdir.Config) { c.MaxVolumes = 4 })
	m := mustManager(t, []PluginConfig{{ID: "hostdir", Type: PluginTypeMonolith, Socket: "unix://" + tp.socket}}, &changes{})
	fps := m.Refresh(testCtx(t))
	if len(fps) != 1 || !fps[0].Healthy {
		t.Fatalf("exp: one healthy fingerprint got: %+v", fps)
	}
	fp := fps[0]

	ci := fp.ControllerInfo()
	if ci == nil || ci.ControllerCapabilities == nil {
		t.Fatalf("exp: controller instance with capabilities got: %+v", ci)
	}
	for _, want := range []string{"create_delete_volume", "publish_unpublish", "publish_readonly"} {
		if !slices.Contains(ci.ControllerCapabilities.Names(), want) {
			t.Fatalf("exp: controller capability %s got: %v", want, ci.ControllerCapabilities.Names())
		}
	}
	ni := fp.NodeInfo()
	if ni == nil || ni.NodeCapabilities == nil || !ni.NodeCapabilities.StageUnstageVolume ||
		ni.MaxVolumes != 4 || ni.ExternalNodeID != "ext-node-1" || !ni.RequiresControllerPlugin {
		t.Fatalf("exp: node instance staging, max 4, ext-node-1, needing a controller got: %+v", ni)
	}
	if ni.ControllerCapabilities != nil || ci.NodeCapabilities != nil || ci.MaxVolumes != 0 {
		t.Fatalf("exp: each instance carries only its own service's facts got: node %+v controller %+v", ni, ci)
	}
}

// TestFingerprint_TopologyAndUnknownCapabilities: topology is copied (the
// registration must not share the manager's map), a node-only plugin has no
// controller instance, and a plugin never reached reports no capabilities
// rather than "none".
func TestFingerprint_TopologyAndUnknownCapabilities(t *testing.T) {
	fp := PluginFingerprint{ID: "p", Type: PluginTypeNode, Name: "x", Healthy: true,
		AccessibleTopology: map[string]string{"zone": "a"}, NodeCaps: NodeCapabilities{ExpandVolume: true}}
	ni := fp.NodeInfo()
	fp.AccessibleTopology["zone"] = "changed"
	if ni.AccessibleTopology["zone"] != "a" || !ni.NodeCapabilities.ExpandVolume {
		t.Fatalf("exp: topology zone=a copied, expand_volume got: %+v", ni)
	}
	if ci := fp.ControllerInfo(); ci != nil {
		t.Fatalf("exp: no controller instance for a node plugin got: %+v", ci)
	}
	never := PluginFingerprint{ID: "p", Type: PluginTypeMonolith, HealthDescription: "not fingerprinted yet"}
	if ni, ci := never.NodeInfo(), never.ControllerInfo(); ni.NodeCapabilities != nil || ci.ControllerCapabilities != nil {
		t.Fatalf("exp: no capabilities before the first answer got: %+v %+v", ni, ci)
	}
}
