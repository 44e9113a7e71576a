package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/claimd/claimd/structs"
)

func TestPluginDetail_ShowsCapabilitiesAndNodeFacts(t *testing.T) {
	p := &structs.Plugin{ID: "hostdir", Provider: "claimd.hostdir", ProviderVersion: "1",
		ControllerCapabilities: &structs.CSIControllerCapabilities{CreateDeleteVolume: true, PublishUnpublish: true, ExpandVolume: true},
		NodeCapabilities:       &structs.CSINodeCapabilities{},
		Controllers:            map[string]*structs.CSIInfo{"n1": {Healthy: true}},
		Nodes: map[string]*structs.CSIInfo{
			"n1": {Healthy: true, ExternalNodeID: "ext-1", MaxVolumes: 2, AccessibleTopology: map[string]string{"zone": "a", "rack": "r1"}},
			"n2": {Healthy: false, HealthDescription: "node down"},
		},
	}
	var buf bytes.Buffer
	printPluginDetail(&buf, p)
	out := buf.String()
	for _, want := range []string{
		"create_delete_volume, publish_unpublish, expand_volume", // controller capabilities in fixed order
		"Node Capabilities        none",                          // reported, but nothing advertised
		"n1    true     ext-1        2            rack=r1,zone=a",
		"n2    false    -            unlimited    -",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("exp: output containing %q got:\n%s", want, out)
		}
	}
	buf.Reset()
	printPluginDetail(&buf, &structs.Plugin{ID: "x"})
	if !strings.Contains(buf.String(), "(not reported)") {
		t.Fatalf("exp: capabilities not reported got:\n%s", buf.String())
	}
}

func TestPluginList_ShowsHealthyCountsAndCapabilities(t *testing.T) {
	plugs := []*structs.Plugin{
		{ID: "hostdir", Provider: "claimd.hostdir", ControllerRequired: true,
			ControllerCapabilities: &structs.CSIControllerCapabilities{CreateDeleteVolume: true, CreateDeleteSnapshot: true, ExpandVolume: true},
			NodeCapabilities:       &structs.CSINodeCapabilities{StageUnstageVolume: true, ExpandVolume: true},
			Controllers:            map[string]*structs.CSIInfo{"c1": {Healthy: true}},
			Nodes:                  map[string]*structs.CSIInfo{"n1": {Healthy: true}, "n2": {}},
			ControllersHealthy:     1, NodesHealthy: 1},
		{ID: "other", Nodes: map[string]*structs.CSIInfo{"n1": {}}},
	}
	var buf bytes.Buffer
	printPluginList(&buf, plugs)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "Controller Capabilities") {
		t.Fatalf("exp: header and one line per plugin got:\n%s", buf.String())
	}
	if f := strings.Fields(lines[1]); len(f) != 8 || f[3] != "1/1" || f[4] != "1/2" || f[7] != "0" ||
		f[5] != "create_delete_volume,create_delete_snapshot,expand_volume" || f[6] != "stage_unstage_volume,expand_volume" {
		t.Fatalf("hostdir line exp: healthy 1/1 and 1/2 with both capability lists got: %q", f)
	}
	if !strings.Contains(lines[2], "(not reported)") {
		t.Fatalf("plugin without fingerprints exp: capabilities not reported got: %q", lines[2])
	}
}

// TestPluginStatus_ShowsPendingControllers (issue 38): the detail view
// counts the pending controllers with the command that admits them and
// says per controller how it was admitted or that it is pending; the list
// counts them in its last column.
func TestPluginStatus_ShowsPendingControllers(t *testing.T) {
	p := &structs.Plugin{ID: "hostdir", ControllerRequired: true, ControllersHealthy: 1, ControllersPending: 1,
		Controllers: map[string]*structs.CSIInfo{"c1": {Healthy: true}, "rogue": {Healthy: true}},
		Admissions:  map[string]*structs.ControllerAdmission{"c1": {PluginID: "hostdir", NodeID: "c1", Source: structs.AdmittedByOperator}}}
	var buf bytes.Buffer
	printPluginDetail(&buf, p)
	for _, want := range []string{
		"Controllers Pending      1 (claimd plugin admit hostdir NODE)",
		"c1     true     operator",
		"rogue  true     pending",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("exp: output containing %q got:\n%s", want, buf.String())
		}
	}
	buf.Reset()
	printPluginList(&buf, []*structs.Plugin{p})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if f := strings.Fields(lines[1]); len(lines) != 2 || f[3] != "1/2" || f[len(f)-1] != "1" {
		t.Fatalf("exp: 1/2 healthy and 1 pending got:\n%s", buf.String())
	}
}
