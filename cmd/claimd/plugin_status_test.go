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
